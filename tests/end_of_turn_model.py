"""A tiny model folder with Qwen2.5 base's stop-token layout, for the stop-token tests (``.venv`` and
``.venv-vllm`` alike; no hub).

Qwen2.5 base tokenizers carry a ChatML template that ends turns with ``<|im_end|>``, but their eos (the
tokenizer's and ``generation_config.json``'s) is ``<|endoftext|>``. ``oar.models.tiny``'s tokenizer has both
tokens; here eos is moved to ``<|endoftext|>``. A random model would rarely write ``<|im_end|>``, so
the head is untied and three output rows (``<|im_end|>`` and two ordinary tokens) are set to one large
common direction of the prompt's hidden states plus a little noise each: those three tokens then take
nearly all the probability, in varying shares, and a sampled response of a few tokens almost surely
holds ``<|im_end|>`` with more tokens after it when only eos stops it. The prompt's own computation is
the tiny model's (input embeddings unchanged).
"""

from __future__ import annotations

from pathlib import Path

import torch

from oar.models.tiny import build_tiny_model
from oar.prompting import build_prompt, encode_prompts

PROBLEM = "What is 3 + 4? Tom has 3 apples and buys 4 more."
END_OF_TURN, EOS = "<|im_end|>", "<|endoftext|>"
ORDINARY = (100, 200)  # two ordinary token ids of the tiny vocabulary (3 specials, then BPE tokens)


def build_end_of_turn_model(out: Path, head_dim: int = 32) -> Path:
    model, tokenizer = build_tiny_model(head_dim=head_dim)  # head_dim 32: vLLM's CPU attention needs it
    tokenizer.eos_token = EOS
    tokenizer.clean_up_tokenization_spaces = False
    eos = tokenizer.convert_tokens_to_ids(EOS)
    end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    (prompt,) = encode_prompts(tokenizer, [build_prompt(PROBLEM, tokenizer)])
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        direction = model.model(torch.tensor([prompt])).last_hidden_state[0].mean(0)
        scale = direction.norm()
        for token in (end_of_turn, *ORDINARY):
            model.lm_head.weight[token] = (10 * direction / scale**2
                                           + 0.5 * torch.randn(direction.shape, generator=noise) / scale)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
