"""The truth scorers: scores read off the chain task's parsed grammar instead of a model (method.md
section 7): ``truth`` and ``truth_graded`` (the upper bounds of what exactly right scores do through the
gate) and the mechanism controls ``truth_final`` and ``truth_early``.

Each marks parsed reasoning positions with fixed values (``_marked_scores``); the positions
(``Probe.decisive``, ``final_step``, ``irrelevant``) exist only where a task's grammar marks them, and the
trainer attaches them for these methods. None of these reads the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

from oar.method.probes import Probe


def _marked_scores(probes: Sequence[Probe], scorer: str, what: str, fields: tuple[str, ...],
                   marks: Callable[[Probe], Sequence[tuple[Iterable[int], float]]], rest: float = 0.0) -> list[Tensor]:
    """Per probe, ``rest`` over its reasoning with each ``(positions, value)`` of ``marks(probe)`` written
    in turn (a later mark wins). Stops first when a probe lacks one of ``fields``, the parsed positions the
    scorer reads."""
    missing = [i for i, p in enumerate(probes) if any(getattr(p, f) is None for f in fields)]
    if missing:
        raise ValueError(f"scorer '{scorer}' needs the {what} of every probe; rows {missing[:5]} have none "
                         "(only a task whose grammar marks them, the chain task, has them)")
    rows = []
    for p in probes:
        row = torch.full((p.reasoning_len,), rest, dtype=torch.float32)
        for positions, value in marks(p):
            row[[j for j in positions if j < p.reasoning_len]] = value
        rows.append(row)
    return rows


def truth_scores(probes: Sequence[Probe]) -> list[Tensor]:
    """Exactly right scores that only boost: 1 on the response's decisive tokens (``Probe.decisive``, parsed from its
    text by the task's grammar), 0 elsewhere. Through the gate it shows what reshaping can do when the
    scores are exactly right; it reads no model. Not the intervention oracle of the causal-token study."""
    return _marked_scores(probes, "truth", "decisive positions", ("decisive",), lambda p: [(p.decisive, 1.0)])


def graded_truth_scores(probes: Sequence[Probe]) -> list[Tensor]:
    """The truth gate with the reward-irrelevant tokens ranked last: 1 on the decisive tokens, 0 on the
    choices that cannot change the answer (``Probe.irrelevant``: remark and note words), 0.5 on the rest
    (tokens the text before forces). With the truth scorer's binary scores the zeros tie at the gate's
    tau-quantile and nothing is suppressed; ranked this way the gate suppresses the irrelevant choices,
    as a continuous scorer that ranked them lowest would. Reads no model."""
    return _marked_scores(probes, "truth_graded", "decisive and irrelevant positions", ("decisive", "irrelevant"),
                          lambda p: [(p.irrelevant, 0.0), (p.decisive, 1.0)], rest=0.5)


def final_step_truth_scores(probes: Sequence[Probe]) -> list[Tensor]:
    """The truth gate on the last step only: 1 on the decisive tokens of the reasoning's last equation
    (``Probe.final_step``), 0 elsewhere, earlier steps' decisive tokens included. A mechanism control, not
    an upper bound: it puts the credit where OAR-P puts most of it (the restatement the answer is copied
    from), with scores that are otherwise the truth gate's. Reads no model."""
    return _marked_scores(probes, "truth_final", "last step's decisive positions", ("final_step",),
                          lambda p: [(p.final_step, 1.0)])


def early_steps_truth_scores(probes: Sequence[Probe]) -> list[Tensor]:
    """The truth gate on the earlier steps only: 1 on the decisive tokens of every equation but the
    reasoning's last (``Probe.decisive`` less ``Probe.final_step``), 0 elsewhere, the last step's decisive
    tokens included. The complement of ``truth_final`` within the truth gate's credit: a mechanism control
    for whether credit on the steps where errors are made, without the restatement the answer is copied
    from, keeps what GRPO learns. Reads no model."""
    return _marked_scores(probes, "truth_early", "decisive and last-step positions", ("decisive", "final_step"),
                          lambda p: [(set(p.decisive) - set(p.final_step), 1.0)])
