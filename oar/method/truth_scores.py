"""Truth scorers beside those of :mod:`oar.method.importance`, registered in the same registry.

``truth_early`` completes the 2x2 of where truth credit goes on the chain task: neither (GRPO), the last
step only (``truth_final``), the earlier steps only (``truth_early``, here) and both (``truth``). Like the
other truth scorers it reads no model, only the positions the chain task's grammar marks in each
response (``Probe.decisive``, ``Probe.final_step``), which training attaches for every method of
:data:`PARSED_METHODS`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from oar.method.importance import GROUND_TRUTH_METHODS, ScorerConfig, register
from oar.method.probes import Probe


@register("truth_early")
def early_steps_truth_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """The truth gate on the earlier steps only: 1 on the decisive tokens of every equation but the
    reasoning's last (``Probe.decisive`` less ``Probe.final_step``), 0 elsewhere, the last step's decisive
    tokens included. The complement of ``truth_final`` within the truth gate's credit: a mechanism control
    for whether credit on the steps where errors are made, without the restatement the answer is copied
    from, keeps what GRPO learns. Reads no model."""
    missing = [i for i, p in enumerate(probes) if p.decisive is None or p.final_step is None]
    if missing:
        raise ValueError(f"scorer 'truth_early' needs the decisive and last-step positions of every probe; rows "
                         f"{missing[:5]} have none (only a task whose grammar marks them, the chain task, has them)")
    out = []
    for p in probes:
        row = torch.zeros(p.reasoning_len, dtype=torch.float32)
        last = set(p.final_step)
        row[[j for j in p.decisive if j < p.reasoning_len and j not in last]] = 1.0
        out.append(row)
    return out


# every scorer that reads the task's parsed grammar: training attaches the positions they need
PARSED_METHODS = (*GROUND_TRUTH_METHODS, "truth_early")
