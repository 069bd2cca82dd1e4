"""Bi-level gating with mass preservation (method.md section 6).

Turns per-token importance scores into per-token advantage weights. Per response, over its R reasoning
tokens with scores s_t >= 0:

1. l_t = log(1 + s_t)
2. n_t = (l_t - min l) / (max l - min l)                      (all weights 1 when max == min)
3. theta = tau-quantile of {n_t} (linear interpolation, as ``torch.quantile``)
4. n_t <  theta: w_t = max(n_t / theta, floor)                 (suppression band)
5. n_t >= theta: w_t = 1 + beta * (n_t - theta) / (1 - theta)  (boost band; no boost when theta == 1)
6. w~_t = w_t * R / sum_u w_u                                  (the reasoning weights sum to R)

Non-reasoning positions get exactly 1.0, so with the token advantages A_{i,t} = w~_t * A_i the total
advantage mass of each response equals GRPO's. tau = 0 is boost-only, tau = 1 is suppress-only.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _row_quantile(values: Tensor, mask: Tensor, q: float) -> Tensor:
    """q-quantile of each row's masked entries, linear interpolation (``torch.quantile``'s default).

    Rows with no masked entry return 0 (the caller ignores them).
    """
    count = mask.sum(dim=1)
    # Unmasked entries sort to the end, so the first `count` sorted entries are the row's values.
    ordered = torch.where(mask, values, torch.full_like(values, float("inf"))).sort(dim=1).values
    rank = q * (count - 1).clamp_min(0).to(values.dtype)
    lower = rank.floor().long()
    upper = rank.ceil().long()
    low_val = ordered.gather(1, lower[:, None]).squeeze(1)
    high_val = ordered.gather(1, upper[:, None]).squeeze(1)
    result = low_val + (high_val - low_val) * (rank - lower.to(values.dtype))
    return torch.where(count > 0, result, torch.zeros_like(result))


@torch.no_grad()
def gate(
    scores: Tensor, reasoning_mask: Tensor, tau: float, beta: float, floor: float = 0.1
) -> Tensor:
    """Per-token advantage weights [B, T] from importance scores [B, T].

    Reasoning positions (``reasoning_mask``) are gated and renormalised to sum to the row's number of
    reasoning tokens; every other position is exactly 1.0. A row whose reasoning scores are all equal,
    that has no reasoning token, or that holds a non-finite score among its reasoning tokens is all 1.0
    (no signal, so no reshaping). Scores are clamped at 0 (importance is non-negative by definition;
    tiny negative KL values are float rounding). The gate computes in the scores' dtype, at least
    float32, and returns weights in the scores' dtype. The weights carry no gradient.
    """
    if scores.shape != reasoning_mask.shape or scores.dim() != 2:
        raise ValueError(
            f"scores {tuple(scores.shape)} and reasoning_mask {tuple(reasoning_mask.shape)} must be the same [B, T]"
        )
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor must be in (0, 1], got {floor}")

    mask = reasoning_mask.bool()
    # The scores' own precision, at least float32: float64 keeps differences float32 would round away.
    compute = torch.promote_types(scores.dtype, torch.float32) if scores.is_floating_point() else torch.float32
    work = scores.detach().to(compute)
    finite_row = torch.where(mask, torch.isfinite(work), True).all(dim=1)
    work = torch.where(mask & torch.isfinite(work), work.clamp_min(0.0), torch.zeros_like(work))

    logs = torch.log1p(work)
    low = torch.where(mask, logs, torch.full_like(logs, float("inf"))).amin(dim=1, keepdim=True)
    high = torch.where(mask, logs, torch.full_like(logs, float("-inf"))).amax(dim=1, keepdim=True)
    spread = high - low
    reshaped = mask.any(dim=1) & finite_row & (spread.squeeze(1) > 0)
    norm = torch.where(mask, (logs - low) / torch.where(spread > 0, spread, 1.0), 0.0)

    theta = _row_quantile(norm, mask, tau)[:, None]
    # Both branches are evaluated everywhere: guard the divisions, then select.
    suppressed = (norm / theta.clamp_min(1e-12)).clamp_min(floor)
    boost_span = 1.0 - theta
    boosted = 1.0 + beta * torch.where(boost_span > 0, (norm - theta) / boost_span.clamp_min(1e-12), 0.0)
    raw = torch.where(norm < theta, suppressed, boosted)

    raw = torch.where(mask, raw, 0.0)
    count = mask.sum(dim=1, keepdim=True).to(raw.dtype)
    renormalised = raw * count / raw.sum(dim=1, keepdim=True).clamp_min(1e-12)

    use = mask & reshaped[:, None]
    out_dtype = scores.dtype if scores.is_floating_point() else torch.float32
    return torch.where(use, renormalised, torch.ones_like(renormalised)).to(out_dtype)


def token_advantages(weights: Tensor, advantages: Tensor) -> Tensor:
    """A_{i,t} = w_{i,t} * A_i: the same weights whatever the sign of A_i (method.md section 6, step 7)."""
    if advantages.dim() != 1 or advantages.shape[0] != weights.shape[0]:
        raise ValueError(f"advantages {tuple(advantages.shape)} must be [B] for weights {tuple(weights.shape)}")
    return weights * advantages[:, None]
