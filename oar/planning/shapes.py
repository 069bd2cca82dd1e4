"""A model's geometry, read from its transformers config: what the cost and memory plans depend on.

Parameter counts come from the model built on the meta device (no memory, no weights); the rest from
the config (a Qwen2/Llama-style one). The paper's models are known by name (``QWEN_SHAPES``, their hub ids
``HUB_SHAPES``), and a shape is named by them where it is one of theirs (``shape_name``).
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")

# Shapes of the paper's models from their published config.json files (no hub here);
# Qwen2.5-Math-1.5B has Qwen2.5-1.5B's layer shape with a 4,096-token context.
QWEN_SHAPES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=4096),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                       max_position_embeddings=131072),
}
HUB_SHAPES = {"Qwen/Qwen2.5-Math-1.5B": "qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B": "qwen2.5-1.5b",
              "Qwen/Qwen2.5-7B": "qwen2.5-7b"}


@dataclass(frozen=True)
class Shape:
    """One model's sizes."""

    params: int  # unique parameters (tied embeddings once)
    params_per_layer: int  # one decoder layer's parameters
    layer_params_total: int  # every decoder layer's parameters (no embedding, no LM head, no final norm)
    head_params: int  # the LM head's weight (the embedding's when tied)
    layers: int
    hidden: int
    attn_width: int  # heads x head_dim (queries)
    vocab: int
    widths: tuple  # (hidden, intermediate, heads, kv_heads) for the activation measurement
    kv_bytes_per_token_bf16: int  # K and V of every layer, bf16
    max_positions: int


def shape_of(config) -> Shape:
    """The shape of the model a transformers config describes."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Shape(params=sum(p.numel() for p in model.parameters()),  # parameters() yields a tied weight once
                 params_per_layer=sum(p.numel() for p in model.model.layers[0].parameters()),
                 layer_params_total=sum(p.numel() for p in model.model.layers.parameters()),
                 head_params=model.get_output_embeddings().weight.numel(),
                 layers=config.num_hidden_layers, hidden=config.hidden_size,
                 attn_width=config.num_attention_heads * head_dim, vocab=config.vocab_size,
                 widths=tuple(getattr(config, k) for k in WIDTH_KEYS),
                 kv_bytes_per_token_bf16=2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2,
                 max_positions=config.max_position_embeddings)


def shape_name(shape: Shape) -> str:
    """``qwen2.5-1.5b`` or ``qwen2.5-7b`` for their layer shapes, else the sizes."""
    for name, spec in QWEN_SHAPES.items():
        widths = (spec["hidden_size"], spec["intermediate_size"], spec["num_attention_heads"],
                  spec["num_key_value_heads"])
        if shape.widths == widths and shape.layers == spec["num_hidden_layers"]:
            return name
    return f"hidden {shape.hidden}, {shape.layers} layers"
