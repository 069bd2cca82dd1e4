"""The inverted-importance control of "Beyond Uniform Credit: Causal Credit Assignment for Policy
Optimization" (arXiv 2602.09331): the same importance signal, turned upside down, so that the tokens the
scorer calls most important get the least weight and the least important the most. The paper trains with
it to show that its counterfactual importance carries structure (inverting it hurts); here it is a scorer,
``oar_g_inverted``, OAR-G's scores inverted per response, for the token-credit benchmark and the gate.

What is inverted: the paper states the inversion of the importance signal, not a formula; the choice taken
here inverts it where OAR's gate reads it. The gate min-max normalises ``l = log(1 + s)`` over a response's
reasoning (``oar.method.gate``: ``n = (l - min l) / (max l - min l)``); the inverted score

    s' = (1 + max s) (1 + min s) / (1 + s) - 1

has ``log(1 + s') = max l + min l - l``, so the gate sees ``n' = 1 - n``: the ranking exactly reversed
and the normalised importances mirrored, with the gate's own tau cut and boost then applied to them. It is
non-negative (``s' >= min s >= 0``), maps the top score to the bottom one and back, and leaves a response
whose scores are all equal as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor


def inverted(scores: Tensor) -> Tensor:
    """One response's scores inverted (module docstring): ``(1 + max) (1 + min) / (1 + s) - 1``, computed in
    float64 and returned in the scores' dtype."""
    if scores.numel() == 0:
        return scores.clone()
    work = scores.detach().double().clamp_min(0.0)  # the gate clamps float rounding below 0 the same way
    out = (1.0 + work.max()) * (1.0 + work.min()) / (1.0 + work) - 1.0
    return out.clamp_min(0.0).to(scores.dtype)


def inverted_rows(rows: Sequence[Tensor]) -> list[Tensor]:
    """Every response's scores inverted on its own (the gate normalises each response apart)."""
    return [inverted(r) for r in rows]
