"""The ground-truth track's step-level scores: where a scorer puts a response's error, and its sign.

The token metrics (``oar.bench.credit``) ask whether the decisive tokens rank high; the step-level
literature (ProcessBench, PRMBench) asks *which step* is the first wrong one. A credit scorer gives one
score per token, so a step's score has to be defined first:

- **credit of a step**: the mean of ``|score|`` over the step's decisive tokens (its relation and the
  digits of its result, the row's ``steps[i]["positions"]``). The mean, not the sum, so that a step whose
  result has more digits does not gain credit for its length; the magnitude, so that a signed score (a
  reward, an advantage term) blames a step by the size of its push either way, as the gate reads it.
  A step without decisive tokens has no credit and is no candidate.

On that:

- :func:`first_error_hit` (**first-error localisation**): in a wrong response with a first erring step,
  whether the step of most credit is that step. Tied top steps count as the mean over their orders (the
  erring step among t tied ones: 1/t). Chance: a step drawn uniformly, 1/S of the S candidate steps.
- :func:`flagged_step` and :func:`processbench` (**ProcessBench-style F1**): ProcessBench asks for the
  earliest erring step of an erroneous response and "no error" for a right one; F1 is the harmonic mean
  of the two accuracies. A credit scorer never says "no error", so the rule that makes it say so is fixed
  here, in advance and on the scores' own shape, never fitted to the answer key: **the step of most credit
  is flagged as the error when its credit exceeds ``FLAG_RATIO`` = 2 times the mean credit of the other
  steps** (the credit stands out from the rest of the response; with no other step, when it is above 0);
  else "no error". Equal credit everywhere (an all-zero row, a flat scorer) says "no error".
- :func:`sign_scores` (**the sign of a signed entry**, only for a scorer registered ``signed``): in wrong
  responses, whether the first erring step's relation token (the ``~`` or ``=`` that broke the chain)
  scores below 0, and in right responses the share of decisive tokens that score above 0; a score of
  exactly 0 has no sign and counts half (as a tie does). 0.5 is a sign that says nothing.

Responses: *wrong* ones are graded incorrect with a first step that the grammar marks wrong and that has
decisive tokens (a wrong final answer after all-right steps has no erring step to find); *right* ones are
graded correct with every step right.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

FLAG_RATIO = 2.0  # the "error" flag's rule: the top step's credit over the other steps' mean credit


def step_credits(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any]) -> list[tuple[int, float]]:
    """``(step index, credit)`` of each step with decisive tokens: the mean ``|score|`` over them."""
    values = np.abs(np.asarray(scores, dtype=np.float64))
    return [(i, float(values[[int(p) for p in s["positions"]]].mean()))
            for i, s in enumerate(row["steps"]) if s["positions"]]


def first_erring_step(row: Mapping[str, Any]) -> int | None:
    """The index of a wrong response's first wrong step, where that step has decisive tokens; else None."""
    if row["correct"]:
        return None
    first = next((i for i, s in enumerate(row["steps"]) if not s["right"]), None)
    return first if first is not None and row["steps"][first]["positions"] else None


def is_right_response(row: Mapping[str, Any]) -> bool:
    """Graded correct, with every step right (and at least one step to judge)."""
    return bool(row["correct"]) and bool(row["steps"]) and all(s["right"] for s in row["steps"])


def top_steps(credits: Sequence[tuple[int, float]]) -> list[int]:
    """The steps that share the highest credit (several when tied)."""
    best = max(c for _, c in credits)
    return [i for i, c in credits if c == best]


def flagged_step(credits: Sequence[tuple[int, float]]) -> tuple[list[int], bool]:
    """The candidate steps for "the error" (the top ones) and whether the rule flags an error at all:
    the top credit exceeds ``FLAG_RATIO`` x the mean credit of the other steps (0 when there is none).
    For tied top steps the answer is the same whichever of them is taken first."""
    top = top_steps(credits)
    best = credits[[i for i, _ in credits].index(top[0])][1]
    others = [c for i, c in credits if i != top[0]]  # a tied top step stays among the others
    return top, best > FLAG_RATIO * (float(np.mean(others)) if others else 0.0)


def first_error_hit(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(hit, chance)`` of first-error localisation for a wrong response with a first erring step (else
    None): hit is 1/t when the erring step is among the t steps of most credit, else 0; chance 1/S."""
    erring = first_erring_step(row)
    if erring is None:
        return None
    credits = step_credits(scores, row)
    top = top_steps(credits)
    return (1.0 / len(top) if erring in top else 0.0), 1.0 / len(credits)


def processbench(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any]) -> tuple[str, float] | None:
    """This response's ProcessBench judgement: ``("wrong", accuracy)`` for a wrong response with a first
    erring step (the flag raised at that step, 1/t among t tied top steps), ``("right", accuracy)`` for a
    right response (1 when no error is flagged), None for the others."""
    erring = first_erring_step(row)
    if erring is not None:
        top, flagged = flagged_step(step_credits(scores, row))
        return "wrong", (1.0 / len(top) if flagged and erring in top else 0.0)
    if is_right_response(row):
        credits = step_credits(scores, row)
        if not credits:
            return None
        return "right", 0.0 if flagged_step(credits)[1] else 1.0
    return None


def f1(accuracy_wrong: float, accuracy_right: float) -> float:
    """ProcessBench's F1: the harmonic mean of the two accuracies (0 when either is 0; nan when undefined)."""
    if math.isnan(accuracy_wrong) or math.isnan(accuracy_right):
        return math.nan
    total = accuracy_wrong + accuracy_right
    return 0.0 if total == 0 else 2 * accuracy_wrong * accuracy_right / total


def _sign_share(values: np.ndarray, negative: bool) -> float:
    """The share of ``values`` of the wanted sign, a 0 counting half."""
    wanted = values < 0 if negative else values > 0
    return float((wanted.sum() + 0.5 * (values == 0).sum()) / len(values))


def sign_scores(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any]) -> tuple[str, float] | None:
    """A signed entry's sign on this response: ``("wrong", 1, 0.5 or 0)`` as the first erring step's relation
    token scores below, at or above 0; ``("right", share)`` of a right response's decisive tokens above 0
    (0 counting half); None for the others (no relation token, no decisive token)."""
    values = np.asarray(scores, dtype=np.float64)
    erring = first_erring_step(row)
    if erring is not None:
        at = row["steps"][erring]["relation_at"]
        return None if at is None else ("wrong", _sign_share(values[[int(at)]], negative=True))
    if is_right_response(row) and row["decisive"]:
        return "right", _sign_share(values[[int(i) for i in row["decisive"]]], negative=False)
    return None


def response_step_metrics(scores: Sequence[float] | np.ndarray, row: Mapping[str, Any],
                          signed: bool = False) -> dict[str, float]:
    """One response's step-level values (nan where the response does not enter a metric)."""
    out = {"first_error": math.nan, "chance_first_error": math.nan, "processbench_wrong": math.nan,
           "processbench_right": math.nan, "sign_wrong": math.nan, "sign_right": math.nan}
    hit = first_error_hit(scores, row)
    if hit is not None:
        out["first_error"], out["chance_first_error"] = hit
    judged = processbench(scores, row)
    if judged is not None:
        out[f"processbench_{judged[0]}"] = judged[1]
    if signed:
        sign = sign_scores(scores, row)
        if sign is not None:
            out[f"sign_{sign[0]}"] = sign[1]
    return out


def summarise_steps(per_response: Sequence[Mapping[str, float]], problems: Sequence[int],
                    signed: bool = False) -> dict[str, Any]:
    """The step-level metrics over responses: each a clustered mean with its interval (problems as
    clusters), ProcessBench's F1 of the two accuracies' means (no interval), and chance's localisation."""
    from oar.analysis.statistics import clustered_mean

    def mean(key: str) -> dict[str, float]:
        return clustered_mean([m[key] for m in per_response], problems)

    out: dict[str, Any] = {"first_error": mean("first_error"), "processbench_wrong": mean("processbench_wrong"),
                           "processbench_right": mean("processbench_right"),
                           "chance_first_error": mean("chance_first_error")["mean"], "flag_ratio": FLAG_RATIO}
    out["processbench_f1"] = f1(out["processbench_wrong"]["mean"], out["processbench_right"]["mean"])
    if signed:
        out["sign_wrong"], out["sign_right"] = mean("sign_wrong"), mean("sign_right")
    return out
