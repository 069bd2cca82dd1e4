"""Weight interventions of the mechanism test, applied to the gate's weights (no scoring, no IO).

``hold_to_rest`` is the rescue: a scorer's weights with chosen reasoning tokens (the last step's decisive
tokens, where the scorers put their credit) held to the mean weight of the rest of the reasoning, the
total mass kept. If concentrating credit on those tokens is what costs a scorer its accuracy, the rescued
scorer recovers GRPO's.

``hold_top_outside`` is the rescue's placebo: as many of the scorer's highest-weighted reasoning tokens as
the row has protected tokens (the last step's decisive tokens), chosen among the other reasoning tokens,
held to the mean weight of the rest, the mass kept. It changes as much weight as the rescue, on tokens the
mechanism does not name; if it recovers as much accuracy as the rescue, the rescue's gain is not the
mechanism's.

``set_to_ratio`` is the dose: chosen reasoning tokens (the last step's decisive tokens) set to a ratio
times the mean weight of reference tokens (the earlier steps' decisive tokens), the total mass kept. Run
at several ratios it asks whether accuracy falls as the last step's share of the credit grows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def _positions_mask(weights: Tensor, reasoning_mask: Tensor, positions: Sequence[Sequence[int] | None],
                    what: str = "positions") -> Tensor:
    """[B, T] bool, True at each row's ``positions``; stops unless every one is a reasoning position."""
    if weights.shape != reasoning_mask.shape or weights.dim() != 2 or len(positions) != weights.shape[0]:
        raise ValueError(f"weights {tuple(weights.shape)}, reasoning_mask {tuple(reasoning_mask.shape)} and "
                         f"{len(positions)} rows of {what} must agree on [B, T]")
    marked = torch.zeros_like(reasoning_mask, dtype=torch.bool)
    for i, row in enumerate(positions):
        if row:
            index = torch.as_tensor(sorted(set(row)), dtype=torch.long)
            if index.max() >= weights.shape[1] or not reasoning_mask[i, index].all():
                raise ValueError(f"row {i}: {what} {sorted(set(row))} are not all reasoning positions")
            marked[i, index] = True
    return marked


def _keep_mass(weights: Tensor, changed_weights: Tensor, mask: Tensor, changed: Tensor) -> Tensor:
    """``changed_weights`` with each changed row's reasoning rescaled to the sum it had in ``weights``
    (the gate's mass preservation); unchanged rows as they were."""
    before = torch.where(mask, weights, 0.0).sum(dim=1)
    after = torch.where(mask, changed_weights, 0.0).sum(dim=1)
    scale = torch.where(changed & (after > 0), before / after.clamp_min(1e-30), 1.0)
    return torch.where(mask, changed_weights * scale[:, None], changed_weights)


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
    held = _positions_mask(weights, reasoning_mask, positions)
    mask = reasoning_mask.bool()
    rest = mask & ~held
    work = weights.to(torch.promote_types(weights.dtype, torch.float32))
    rest_mean = torch.where(rest, work, 0.0).sum(dim=1) / rest.sum(dim=1).clamp_min(1)
    changed = held.any(dim=1) & rest.any(dim=1)
    out = torch.where(held & changed[:, None], rest_mean[:, None], work)
    return _keep_mass(work, out, mask, changed).to(weights.dtype)


@torch.no_grad()
def top_outside(weights: Tensor, reasoning_mask: Tensor, protected: Sequence[Sequence[int] | None]) -> list[list[int]]:
    """Per row, as many reasoning positions as the row has ``protected`` ones: the highest-weighted reasoning
    positions outside ``protected`` (ties: the earlier position), or all of them where there are fewer."""
    guarded = _positions_mask(weights, reasoning_mask, protected, "protected positions")
    candidates = reasoning_mask.bool() & ~guarded
    chosen = []
    for i in range(weights.shape[0]):
        k = int(guarded[i].sum())
        index = candidates[i].nonzero().flatten()
        if k == 0 or index.numel() == 0:
            chosen.append([])
            continue
        order = torch.sort(-weights[i, index].double(), stable=True).indices  # stable: the earlier of equal weights
        chosen.append(sorted(index[order[:k]].tolist()))
    return chosen


@torch.no_grad()
def hold_top_outside(weights: Tensor, reasoning_mask: Tensor, protected: Sequence[Sequence[int] | None]) -> Tensor:
    """The rescue's placebo: per row, :func:`top_outside` of ``protected`` held to the mean weight of the rest
    of the reasoning, the mass kept (:func:`hold_to_rest`); ``protected`` itself is never touched.

    Args:
        weights: [B, T] the gate's weights.
        reasoning_mask: [B, T] bool, True on reasoning positions.
        protected: per row, the reasoning positions the rescue holds (the last step's decisive tokens); the
            placebo holds as many others.
    Returns:
        [B, T] tensor in ``weights``' dtype.
    """
    held = top_outside(weights, reasoning_mask, protected)
    for i, (row, guard) in enumerate(zip(held, protected)):
        if set(row) & set(guard or ()):
            raise ValueError(f"row {i}: the placebo would hold protected positions {sorted(set(row) & set(guard))}")
    return hold_to_rest(weights, reasoning_mask, held)


@torch.no_grad()
def set_to_ratio(weights: Tensor, reasoning_mask: Tensor, targets: Sequence[Sequence[int] | None],
                 references: Sequence[Sequence[int] | None], ratio: float) -> Tensor:
    """Per row, the weights of ``targets`` set to ``ratio`` times the mean weight of ``references`` (both
    reasoning positions, disjoint); then the reasoning weights rescaled to the sum they had, which keeps
    the ratio and the gate's mass. Every other position is untouched, and the other reasoning tokens
    keep their relative weights. A row without targets or references, or whose targets already weigh
    ``ratio`` times the references' mean, is returned exactly as it was (so the truth gate, which gives
    every decisive token one weight, is unchanged at ratio 1). Computes in float64, where the mean of
    equal float32 weights is exact.

    Args:
        weights: [B, T] the gate's weights (``oar.method.gate.gate``).
        reasoning_mask: [B, T] bool, True on reasoning positions.
        targets: per row, the reasoning positions to set (None: none): the last step's decisive tokens.
        references: per row, the reasoning positions whose mean weight the targets are set against (None:
            none): the earlier steps' decisive tokens.
        ratio: the targets' weight over the references' mean weight; finite and above 0.
    Returns:
        [B, T] tensor in ``weights``' dtype.
    """
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"ratio must be a finite number above 0, got {ratio!r}")
    target = _positions_mask(weights, reasoning_mask, targets, "targets")
    reference = _positions_mask(weights, reasoning_mask, references, "references")
    overlap = (target & reference).any(dim=1).nonzero().flatten().tolist()
    if overlap:
        raise ValueError(f"rows {overlap[:5]}: targets and references share positions")
    mask = reasoning_mask.bool()
    work = weights.to(torch.float64)
    reference_mean = torch.where(reference, work, 0.0).sum(dim=1) / reference.sum(dim=1).clamp_min(1)
    dosed = float(ratio) * reference_mean
    applies = target.any(dim=1) & reference.any(dim=1)
    changed = applies & (torch.where(target, work != dosed[:, None], False)).any(dim=1)
    out = torch.where(target & changed[:, None], dosed[:, None], work)
    return _keep_mass(work, out, mask, changed).to(weights.dtype)


# ----------------------------------------------------------------------------------------------------
# The registered transforms (oar.method.weight_transforms): each of one signature,
# (weights, reasoning_mask, probes, settings) -> weights, the probes carrying the parsed positions.
# ----------------------------------------------------------------------------------------------------


def rescue_final_step(weights: Tensor, reasoning_mask: Tensor, probes: Sequence, settings: object) -> Tensor:
    """The mechanism's rescue: the last step's decisive tokens held to the rest's mean (:func:`hold_to_rest`)."""
    return hold_to_rest(weights, reasoning_mask, [p.final_step for p in probes])


def placebo_final_step(weights: Tensor, reasoning_mask: Tensor, probes: Sequence, settings: object) -> Tensor:
    """The rescue's placebo: as many other top-weighted tokens held (:func:`hold_top_outside`)."""
    return hold_top_outside(weights, reasoning_mask, [p.final_step for p in probes])


def dose_final_step(weights: Tensor, reasoning_mask: Tensor, probes: Sequence, settings: object) -> Tensor:
    """The mechanism's dose: the last step's decisive tokens at ``settings.final_step_ratio`` times the earlier
    steps' decisive tokens' mean weight (:func:`set_to_ratio`)."""
    return set_to_ratio(weights, reasoning_mask, [p.final_step for p in probes],
                        [set(p.decisive) - set(p.final_step) for p in probes], settings.final_step_ratio)
