"""Where each arm put the gate's weight during training, on the chain task (``oar.log_step_credit``): per
model and method, the share of the reasoning's weight on the last step's decisive tokens and on the earlier
steps', each run's mean over its logged steps, then the mean over seeds with its 95% interval, beside those
tokens' share of the reasoning (what GRPO's uniform weights give). A reading, not a test: the mechanism
table reports the same shares for its declared arms; this table serves runs with no declared contrast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from oar.analysis.formatting import fmt_cell, fmt_num, markdown_table
from oar.analysis.mechanism import arm_intervals
from oar.method.metrics import STEP_CREDIT


def step_credit_table(curves: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The table from the training curves (``analysis/credit/main.csv``: one row per run and logged step);
    stops naming the runs that did not log the step credit."""
    missing = [k for k in STEP_CREDIT if k not in curves]
    if missing:
        raise ValueError(f"the training curves have no {missing}: the runs did not log oar.log_step_credit")
    silent = sorted(curves.groupby("run")["final_step_weight_share"].apply(lambda s: s.isna().all())
                    .loc[lambda x: x].index)
    if silent:
        raise ValueError(f"runs without a logged step credit: {silent[:5]}")
    runs = curves.groupby(["run", "model", "method", "seed"], as_index=False)[list(STEP_CREDIT)].mean()
    frames = []
    for model, of_model in runs.groupby("model", sort=False):
        arms = list(dict.fromkeys(of_model["method"]))
        frames.append(arm_intervals(of_model, arms, STEP_CREDIT).assign(model=model))
    frame = pd.concat(frames, ignore_index=True)

    def share(r, k):
        return fmt_cell(r[k], r[f"{k}_low"], r[f"{k}_high"])

    rows = [[r["model"], r["method"], int(r["n_seeds"]), share(r, "final_step_weight_share"),
             fmt_num(r["final_step_token_share"], 1, 100.0), share(r, "early_steps_weight_share"),
             fmt_num(r["early_steps_token_share"], 1, 100.0)] for r in frame.to_dict("records")]
    md = ("## Where each arm put the weight during training\n\n"
          + markdown_table(["model", "arm", "seeds", "last step's decisive tokens: weight, % [95%]", "their tokens, %",
                            "earlier steps' decisive tokens: weight, % [95%]", "their tokens, %"], rows,
                           align="llrrrrr")
          + "\nThe share of the reasoning's token weight on the decisive tokens of the last step and of the earlier "
            "steps, on the training rollouts with a nonzero advantage: each run's mean over its logged steps, then "
            "the mean over seeds with its 95% t-interval. \"their tokens\": those tokens' share of the reasoning, "
            "what uniform weights give. Exploratory: no test is declared on it.\n")
    return frame, md


def per_token_ratio(runs: pd.DataFrame) -> pd.Series:
    """Each run's weight per last-step decisive token over its weight per earlier-step decisive token (the
    quantity a dose sets: 1 for the truth gate and for GRPO), from its logged step-credit means."""
    return ((runs["final_step_weight_share"] / runs["final_step_token_share"])
            / (runs["early_steps_weight_share"] / runs["early_steps_token_share"]))


def ratio_regression(outcomes: pd.DataFrame, arms: Sequence[str], metric: str = "final_accuracy") -> list[dict]:
    """Exploratory: the least-squares slope of a run's ``metric`` on log2 of its logged per-token ratio
    (:func:`per_token_ratio`) over the runs of ``arms``, pooled (one intercept) and within arms (an
    intercept per arm: the slope that the ratio's spread inside each arm carries). Each: ``model``,
    ``runs``, ``slope`` per doubling with its 95% interval, ``p`` (two-sided) and ``r2``."""
    o = outcomes[outcomes["method"].isin(arms)].dropna(subset=[metric, *STEP_CREDIT])
    x = np.log2(per_token_ratio(o).to_numpy(dtype=float))
    y = o[metric].to_numpy(dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, arm = x[keep], y[keep], o["method"].to_numpy()[keep]
    rows = []
    for name, dummies in (("pooled", [np.ones_like(x)]),
                          ("within arms", [(arm == a).astype(float) for a in dict.fromkeys(arm)])):
        design = np.column_stack([x, *dummies])
        n, k = design.shape
        if n <= k or np.linalg.matrix_rank(design) < k:
            rows.append({"model": name, "runs": n, "slope": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                         "p": math.nan, "r2": math.nan})
            continue
        beta, *_ = np.linalg.lstsq(design, y, rcond=None)
        residual = y - design @ beta
        df = n - k
        se = math.sqrt(residual @ residual / df * np.linalg.inv(design.T @ design)[0, 0])
        half = stats.t.ppf(0.975, df) * se
        total = ((y - y.mean()) @ (y - y.mean())) or math.nan
        rows.append({"model": name, "runs": n, "slope": float(beta[0]), "ci_low": float(beta[0] - half),
                     "ci_high": float(beta[0] + half),
                     "p": float(2 * stats.t.sf(abs(beta[0] / se), df)) if se else math.nan,
                     "r2": 1 - float(residual @ residual) / total})
    return rows


def ratio_regression_text(rows: Sequence[dict]) -> str:
    lines = [f"- {r['model']}: {fmt_num(r['slope'], 1, 100.0)} points per doubling "
             f"[{fmt_num(r['ci_low'], 1, 100.0)}, {fmt_num(r['ci_high'], 1, 100.0)}], p {r['p']:.3f}, "
             f"R² {r['r2']:.2f}, {r['runs']} runs" for r in rows]
    return ("\n**Accuracy against the logged ratio** (exploratory, no test declared): the least-squares slope of a "
            "run's final accuracy on log2 of its weight per last-step decisive token over its weight per earlier-step "
            "decisive token (1 for GRPO and the truth gate), pooled over the arms and within arms (an intercept "
            "per arm).\n\n" + "\n".join(lines) + "\n")
