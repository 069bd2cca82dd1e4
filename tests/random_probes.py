"""A random probe over a tokenizer's vocabulary: the scorer tests' shared input."""

from __future__ import annotations

import torch

from oar.method.probes import CONCLUDE_TEXT, Probe


def random_probe(tokenizer, generator, prompt_len, reasoning_len, answer_len, tail=2) -> Probe:
    n = prompt_len + reasoning_len + tail
    ids = torch.randint(3, len(tokenizer), (n + answer_len,), generator=generator).tolist()
    conclude = tokenizer(CONCLUDE_TEXT, add_special_tokens=False)["input_ids"]
    return Probe(
        prompt_ids=tuple(ids[:prompt_len]),
        response_ids=tuple(ids[prompt_len:n]),
        reasoning_len=reasoning_len,
        conclude_ids=tuple(conclude),
        answer_ids=tuple(ids[n:]),
        answer_kind="boxed" if answer_len else None,
        pad_id=tokenizer.pad_token_id,
    )
