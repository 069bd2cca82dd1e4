"""Scorers as a user's own module writes them, named by import path in tests (``user_scorers:...``)."""

from __future__ import annotations

import torch

from oar.method.scorer_registry import register_scorer


def last_tokens_first(batch):
    """A plain function of the contract (no registration): later reasoning tokens score higher."""
    return [torch.arange(1, p.reasoning_len + 1, dtype=torch.float32) for p in batch.probes]


@register_scorer("user_surprise", needs=("model",), description="the policy's surprise at each reasoning token")
def surprise(batch):
    """-log p(token | prefix) under the policy: a registered scorer that reads the model."""
    rows = []
    for p in batch.probes:
        ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len])])
        with torch.no_grad():
            logits = batch.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits[len(p.prompt_ids) - 1: -1], dim=-1)
        rows.append(-logp.gather(-1, ids[0, len(p.prompt_ids):, None]).squeeze(-1))
    return rows


def wrong_length(batch):
    """Breaks the contract: one score too many."""
    return [torch.ones(p.reasoning_len + 1) for p in batch.probes]


def not_a_function_of_one_argument(model, probes):
    return []
