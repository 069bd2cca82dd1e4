"""Did each run train, and how was its credit spread? Per-run training evidence and credit metrics from
its training curves, and their columns beside the accuracy tables.

A run trained only if some step had a response with a non-zero advantage and its weights moved from the
base model's; a variant with an untrained run is marked in every accuracy table, as its row measures
the base model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from oar.analysis.run_outputs import META_COLUMNS, variant_key


def steps_with_advantage(g: pd.DataFrame) -> int:
    """Logged steps of one run in which some response had a non-zero advantage (the only steps that
    train anything). Older metrics files without ``frac_active`` fall back on a non-zero reward std."""
    if "frac_active" in g and g["frac_active"].notna().any():
        return int((g["frac_active"].fillna(0) > 0).sum())
    return int((g["reward_std"].fillna(0) > 0).sum())


SUMMARY_COLUMNS = ("steps", "steps_with_advantage", "weights_changed", "rel_l2_delta", "trained", "reward_first",
                   "reward_mean", "reward_final", "ess_ratio_mean", "top_mass_mean", "entropy_final",
                   "completion_length_final", "frac_scored_mean", "step_time_s_median")


def credit_summary(curves: pd.DataFrame, weights: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Per run: steps logged and steps with a non-zero advantage, whether the weights moved (from the
    run's ``weights_delta.json`` in ``weights``, run id -> record), ``trained`` (both), first, mean and
    final reward, mean ESS ratio and top-10% mass over training, final entropy and response length,
    median step time. A run without a weights record has ``weights_changed`` unknown (None) and is
    judged on its steps alone."""
    weights = weights or {}
    rows = []
    for run, g in curves.groupby("run", sort=False):
        g = g.sort_values("step")
        first = g.iloc[0]
        delta = weights.get(run)
        changed = None if delta is None else bool(delta["tensors_changed"] > 0)
        active_steps = steps_with_advantage(g)
        rows.append({
            **{k: first[k] for k in META_COLUMNS},
            "steps": int(g["step"].max()),
            "steps_with_advantage": active_steps,
            "weights_changed": changed,
            "rel_l2_delta": math.nan if delta is None else delta["rel_l2_delta"],
            "trained": active_steps > 0 and changed is not False,
            "reward_first": g["reward"].iloc[0],
            "reward_mean": g["reward"].mean(),
            "reward_final": g["reward"].iloc[-1],
            "ess_ratio_mean": g["ess_ratio"].mean(),
            "top_mass_mean": g["top_mass"].mean(),
            "entropy_final": g["entropy"].iloc[-1],
            "completion_length_final": g["completion_length"].iloc[-1],
            "frac_scored_mean": g["frac_scored"].mean(),
            "step_time_s_median": g["step_time_s"].median(),
        })
    return pd.DataFrame(rows, columns=[*META_COLUMNS, *SUMMARY_COLUMNS])


# --------------------------------------------------------------------------- beside the accuracy tables

# (credit summary column, header, digits) of the per-variant credit columns of an accuracy table
CREDIT_COLUMNS = (("ess_ratio_mean", "ESS ratio", 3), ("top_mass_mean", "top-10% mass", 3),
                  ("entropy_final", "final entropy", 3))


def join_credit(wide: pd.DataFrame, credit: pd.DataFrame | None, columns: Sequence[str]) -> pd.DataFrame:
    """Mean over seeds of per-run credit columns, joined on the variant."""
    if credit is None or credit.empty or wide.empty:
        return wide
    credit = credit.copy()
    credit["_key"] = [variant_key(r) for r in credit.to_dict("records")]
    means = credit.groupby("_key", sort=False)[list(columns)].mean()
    wide = wide.copy()
    wide_keys = [variant_key(r) for r in wide.to_dict("records")]
    for c in columns:
        wide[c] = [means[c].get(k, math.nan) if k in means.index else math.nan for k in wide_keys]
    return wide


def mark_untrained(wide: pd.DataFrame, credit: pd.DataFrame) -> pd.DataFrame:
    """The guard against comparing untrained models: per variant, the steps with a non-zero advantage of
    each seed's run (``steps_with_advantage``, e.g. ``"18/20, 19/20"``) and how many of its runs trained
    nothing (``untrained_runs``: no step with a non-zero advantage, or weights equal to the base
    model's); the label of a variant with an untrained run says so."""
    credit = credit.copy()
    credit["_key"] = [variant_key(r) for r in credit.to_dict("records")]
    wide = wide.copy()
    steps, untrained, labels = [], [], []
    for r in wide.to_dict("records"):
        runs = credit[credit["_key"] == variant_key(r)].sort_values("seed")
        if r["method"] == "base" or runs.empty:
            steps.append("–" if r["method"] == "base" else "no training record")
            untrained.append(0)
            labels.append(r["label"])
            continue
        steps.append(", ".join(f"{int(a)}/{int(n)}" for a, n in zip(runs["steps_with_advantage"], runs["steps"])))
        bad = int((~runs["trained"].astype(bool)).sum())
        untrained.append(bad)
        note = ""
        if bad == len(runs):
            note = " – UNTRAINED"
        elif bad:
            note = f" – {bad} of {len(runs)} seeds UNTRAINED"
        labels.append(r["label"] + note)
    wide["steps_with_advantage"] = steps
    wide["untrained_runs"] = untrained
    wide["label"] = labels
    return wide


UNTRAINED_NOTE = ("Steps A≠0: per seed, training steps in which some response had a non-zero advantage, of all "
                  "steps. A run with none, or whose weights equal the base model's, trained nothing and is marked "
                  "UNTRAINED: its row measures the base model.\n")
