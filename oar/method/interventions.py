"""Weight interventions of the mechanism test, applied to the gate's weights (no scoring, no IO).

``hold_to_rest`` is the rescue: a scorer's weights with chosen reasoning tokens (the last step's decisive
tokens, where the scorers put their credit) held to the mean weight of the rest of the reasoning, the
total mass kept. If concentrating credit on those tokens is what costs a scorer its accuracy, the rescued
scorer recovers GRPO's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def hold_to_rest(weights: Tensor, reasoning_mask: Tensor, positions: Sequence[Sequence[int] | None]) -> Tensor:
    """Per row, the weights of ``positions`` (reasoning positions) set to the mean weight of the row's
    other reasoning tokens; then the reasoning weights rescaled to the sum they had (the gate's mass
    preservation kept), every other position untouched. A row without positions, or whose reasoning
    is all positions, is returned as it was.

    Args:
        weights: [B, T] the gate's weights (``oar.method.gate.gate``).
        reasoning_mask: [B, T] bool, True on reasoning positions.
        positions: per row, the reasoning positions to hold (None: none).
    Returns:
        [B, T] tensor in ``weights``' dtype.
    """
    if weights.shape != reasoning_mask.shape or weights.dim() != 2 or len(positions) != weights.shape[0]:
        raise ValueError(f"weights {tuple(weights.shape)}, reasoning_mask {tuple(reasoning_mask.shape)} and "
                         f"{len(positions)} rows of positions must agree on [B, T]")
    held = torch.zeros_like(reasoning_mask, dtype=torch.bool)
    for i, row in enumerate(positions):
        if row:
            index = torch.as_tensor(sorted(set(row)), dtype=torch.long)
            if index.max() >= weights.shape[1] or not reasoning_mask[i, index].all():
                raise ValueError(f"row {i}: positions {sorted(set(row))} are not all reasoning positions")
            held[i, index] = True
    mask = reasoning_mask.bool()
    rest = mask & ~held
    work = weights.to(torch.promote_types(weights.dtype, torch.float32))
    rest_mean = torch.where(rest, work, 0.0).sum(dim=1) / rest.sum(dim=1).clamp_min(1)
    changed = held.any(dim=1) & rest.any(dim=1)
    out = torch.where(held & changed[:, None], rest_mean[:, None], work)
    before = torch.where(mask, work, 0.0).sum(dim=1)
    after = torch.where(mask, out, 0.0).sum(dim=1)
    scale = torch.where(changed & (after > 0), before / after.clamp_min(1e-30), 1.0)
    out = torch.where(mask, out * scale[:, None], out)
    return out.to(weights.dtype)
