"""A tiny randomly initialised chat model, built offline in about a second.

Tests and the CI smoke workflow need a real ``transformers`` model and tokenizer that behave like the
production ones (byte-level BPE with single-digit tokens, a chat template, distinct pad and eos) but
cost nothing to run. Its outputs are meaningless; only shapes and code paths are exercised.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"

# ChatML, the format SmolLM2 and Qwen2.5 use.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS_WORDS = (
    "the answer is so we have total each there are left how many more than less times half twice "
    "Therefore final Question Answer Please reason step by step and put your within apples cost "
    "dollars minutes hours per week day year sum product difference equals let x y n"
)


def _corpus() -> list[str]:
    lines = [_CORPUS_WORDS]
    for a in range(30):
        b = (a * 7 + 3) % 50
        lines.append(f"If {a} + {b} = {a + b}, then {a} * {b} = {a * b}. The final answer is \\boxed{{{a * b}}}.")
        lines.append(f"Question: what is \\frac{{{a}}}{{{b + 1}}} - {a}.5? #### {a - b}")
    return lines


def build_tiny_tokenizer(vocab_size: int = 384, corpus: list[str] | None = None) -> PreTrainedTokenizerFast:
    """Byte-level BPE with single digits and ChatML special tokens, trained on ``corpus`` (default: a
    few lines of math words)."""
    backend = Tokenizer(models.BPE())
    # Single digits, as in SmolLM2 and Qwen2.5, so numbers span several tokens like in real responses.
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus or _corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, bos_token=BOS, eos_token=EOS, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    seed: int = 0, hidden_size: int = 64, num_layers: int = 2, head_dim: int = 16,
    tokenizer: PreTrainedTokenizerFast | None = None,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """4 query and 2 key/value heads of ``head_dim`` (vLLM's CPU attention needs ``head_dim >= 32``), over
    ``tokenizer`` (default: :func:`build_tiny_tokenizer`'s, of math words)."""
    tokenizer = build_tiny_tokenizer() if tokenizer is None else tokenizer
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval(), tokenizer
