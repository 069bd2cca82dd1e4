"""Per-seed outcomes of a group's runs, the input of every paired comparison: final held-out accuracy,
mean training reward (reward AUC) and steps to a reward threshold, which is censored (a run may never
reach it) and so summarised by Kaplan-Meier rather than a mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.formatting import is_missing
from oar.analysis.statistics import kaplan_meier
from oar.method.metrics import STEP_CREDIT

PAIRED_METRICS = {
    "final_accuracy": "held-out accuracy after training",
    "reward_auc": "mean training reward over all steps (area under the reward curve)",
    "steps_to_threshold": "first step whose trailing mean reward reaches the threshold",
}


def steps_to_threshold(rewards: Sequence[float], threshold: float, window: int = 5) -> float:
    """First (1-based) step whose trailing mean over ``window`` steps reaches ``threshold``; nan if none."""
    r = np.asarray(rewards, dtype=float)
    for i in range(len(r)):
        if np.nanmean(r[max(0, i - window + 1) : i + 1]) >= threshold:
            return float(i + 1)
    return math.nan


def base_accuracy(acc: pd.DataFrame, benchmark: str) -> dict[str, float]:
    """Model -> the untrained policy's accuracy on ``benchmark`` (the rows of method ``base``)."""
    rows = acc[(acc["method"] == "base") & (acc["benchmark"] == benchmark)]
    return {str(m): float(v) for m, v in zip(rows["model"], rows["pass@1"])}


def reward_thresholds(curves: pd.DataFrame, threshold: float | None, gain: float | None = None) -> dict[str, float]:
    """Model -> the reward threshold of "steps to threshold": ``threshold`` for every model, or, with
    ``gain``, the model's starting reward (mean reward at the first logged step over all its runs; the
    same for every method, as a seed fixes the first rollouts) plus ``gain``. Exactly one is set."""
    if (threshold is None) == (gain is None):
        raise ValueError(f"set exactly one of reward_threshold and reward_gain, got {threshold} and {gain}")
    models = list(dict.fromkeys(curves["model"]))
    if gain is None:
        return {m: float(threshold) for m in models}
    first = curves[curves["step"] == curves.groupby("run")["step"].transform("min")]
    start = first.groupby("model")["reward"].mean()
    return {m: float(start[m]) + float(gain) for m in models}


def threshold_rule(reward_threshold: float | None, reward_gain: float | None) -> str:
    """How the reward threshold of "steps to threshold" was set, for a table's note."""
    if reward_gain is not None:
        return f"the model's starting reward (mean first-step reward of its runs) + {reward_gain:g}"
    return f"{reward_threshold:g}" if reward_threshold is not None else "the threshold"


def per_seed_outcomes(acc: pd.DataFrame, curves: pd.DataFrame, benchmark: str, threshold: float | None,
                      window: int = 5, gain: float | None = None) -> pd.DataFrame:
    """One row per run of a group: model, method, seed, the model's reward threshold
    (:func:`reward_thresholds`) and each of :data:`PAIRED_METRICS`; where the curves carry them, each
    step-credit share (``oar.method.metrics.STEP_CREDIT``) averaged over the run's steps. A run that
    never reaches the threshold is right-censored: ``reached`` False and ``steps_to_threshold`` nan (it
    is known only to need more than its ``steps``)."""
    rows = []
    acc = acc[acc["benchmark"] == benchmark]
    final = {r: v for r, v in zip(acc["run"], acc["pass@1"])}
    thresholds = reward_thresholds(curves, threshold, gain)
    for run, g in curves.groupby("run", sort=False):
        g = g.sort_values("step")
        rewards = list(g["reward"])
        if run not in final:
            raise ValueError(f"run {run!r} has training curves but no {benchmark} accuracy")
        model = g["model"].iloc[0]
        reached = steps_to_threshold(rewards, thresholds[model], window)
        rows.append({"run": run, "model": model, "method": g["method"].iloc[0],
                     "seed": int(g["seed"].iloc[0]), "threshold": thresholds[model], "final_accuracy": final[run],
                     "reward_auc": float(np.nanmean(rewards)), "steps_to_threshold": reached,
                     "reached": not math.isnan(reached), "steps": len(rewards),
                     **{k: float(g[k].mean()) for k in STEP_CREDIT if k in g}})  # over logged steps; nan if none
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ censored steps


def censored_times(runs: pd.DataFrame) -> tuple[list[float], list[bool]]:
    """Steps to threshold of some runs as (times, reached): a run that never reached it at its last step."""
    reached = [bool(r) for r in runs["reached"]]
    return [float(t) if r else float(n) for t, r, n in zip(runs["steps_to_threshold"], reached, runs["steps"])], reached


def censored_steps(outcomes: pd.DataFrame) -> dict[str, float]:
    """Kaplan-Meier summary (:func:`oar.analysis.statistics.kaplan_meier`) of the steps to threshold of
    some runs, a run that never reached it censored at its last step: n, reached, median, rmst."""
    return kaplan_meier(*censored_times(outcomes))


def steps_cell(median: Any, steps: Any) -> str:
    """A Kaplan-Meier median; ``> N`` when half the runs had not reached the threshold by their last step N."""
    if is_missing(median):
        return "not reached" if is_missing(steps) else f"> {int(steps)}"
    return f"{median:g}"
