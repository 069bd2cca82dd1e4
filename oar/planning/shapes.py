"""A model's geometry, read from its transformers config: what the cost and memory plans depend on.

Parameter counts come from the model built on the meta device (no memory, no weights); the rest from
the config (a Qwen2/Llama-style one).
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")


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
