"""The top-entropy mask of "Beyond the 80/20 rule" (arXiv 2506.01939) as a token scorer: 1 on the tokens
whose entropy is in the top ``quantile`` of the call's tokens, 0 elsewhere.

TRL trains with it through ``GRPOConfig.top_entropy_quantile`` (rho; the paper recommends 0.2): the
entropy of the distribution each completion token was sampled from, a threshold at the ``1 - rho``
quantile of those entropies over every completion token of the batch (``torch.quantile``, linear
interpolation), and the policy loss kept only where ``entropy >= threshold``. Here the same rule marks the
tokens: the threshold is taken over every response token of the call (the reasoning, its conclusion and
answer, as TRL pools the whole completion), and the mask of the reasoning tokens is the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

TOP_ENTROPY_QUANTILE = 0.2  # rho: the share of tokens kept (the paper's recommendation, TRL's ``0.2``)


def top_entropy_mask(entropies: Sequence[Tensor], quantile: float = TOP_ENTROPY_QUANTILE) -> list[Tensor]:
    """Per row, 1.0 where the token's entropy is at or above the ``1 - quantile`` quantile of all rows'
    entropies pooled, else 0.0 (TRL's ``get_high_entropy_mask`` on one process)."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    pooled = torch.cat([e.reshape(-1).float() for e in entropies]) if entropies else torch.zeros(0)
    if pooled.numel() == 0:
        return [torch.zeros_like(e, dtype=torch.float32) for e in entropies]
    threshold = torch.quantile(pooled, 1.0 - quantile)
    return [(e.float() >= threshold).float() for e in entropies]


def top_entropy_scores(model, probes: Sequence, config, quantile: float = TOP_ENTROPY_QUANTILE) -> list[Tensor]:
    """The mask of each probe's reasoning tokens, the threshold over every token of its response."""
    from oar.method.controls import entropy_scores

    whole = [replace(p, reasoning_len=len(p.response_ids)) for p in probes]
    masks = top_entropy_mask(entropy_scores(model, whole, ["lt_logits"] * len(whole), config), quantile)
    return [m[: p.reasoning_len] for m, p in zip(masks, probes)]
