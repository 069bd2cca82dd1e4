"""The decisive run's reading, by rules fixed before its runs.

The truth gates score the parsed decisive tokens (``truth``: 1, the rest 0; ``truth_graded``: also the
words that cannot change the answer at 0) through the paper's gate: the best a scorer could do through
it. The run has policies at several distractor levels (words a note, remarks a step). Per level:

1. The better truth gate does not beat the baseline (GRPO): reshaping through this gate does not help at
   this level by more than the design can see (its MDE), and no scorer's difference there says anything
   about its scoring.
2. A truth gate beats the baseline and a scorer does not: that scorer fails where an upper bound exists.
   Each scorer's gain is also given as a share of the better truth gate's gain.
3. Across levels: each arm's change in (arm minus baseline) from the lowest level to the highest. A truth
   gate's gain that grows with the distractor level is the paper's mechanism holding where its premise does.

Beside these rules, a scorer decided *below* the baseline at a level where no truth gate beats it is read
as what it is: its scores cost accuracy that right scores through the same gate do not. This reading was
added after the truth gates' results had been read, so it is not a rule fixed in advance; the tables say so.

"Beats" means: for a declared primary comparison (``analysis.primary``), Holm's adjusted p below 5% with a
positive mean difference; for any other, the raw 95% interval above 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, fmt_p, is_missing, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.paired import holm_interval_cell
from oar.analysis.statistics import ALPHA, welch
from oar.method.names import TRUTH_GATES



def _decided(row: Mapping[str, Any], sign: int) -> bool:
    """Whether the arm is decided above (sign 1) or below (sign -1) the baseline."""
    if row.get("role") == "primary" and not math.isnan(float(row.get("p_holm", math.nan))):
        return float(row["p_holm"]) < ALPHA and sign * float(row["diff_mean"]) > 0
    return float(row["ci_low"]) > 0 if sign > 0 else float(row["ci_high"]) < 0


def _beats(row: Mapping[str, Any]) -> bool:
    return _decided(row, 1)


def level_key(level: Mapping[str, int] | None) -> tuple[int, int]:
    """Order of distractor levels: words a note, then remarks a step."""
    level = level or {}
    return int(level.get("distractors", 0)), int(level.get("filler", 0))


def level_label(level: Mapping[str, int] | None) -> str:
    level = level or {}
    parts = []
    words, remarks = int(level.get("distractors", 0)), int(level.get("filler", 0))
    if words:
        parts.append(f"{words} word{'s' if words > 1 else ''} a note")
    if remarks:
        parts.append(f"{remarks} remark{'s' if remarks > 1 else ''} a step")
    return ", ".join(parts) or "no distractors"


def level_readings(differences: pd.DataFrame, levels: Mapping[str, Mapping[str, int] | None],
                   metric: str = "final_accuracy") -> pd.DataFrame:
    """Per model (level) and arm on ``metric``: the arm minus the baseline as in ``differences``
    (:func:`oar.analysis.paired.paired_differences`), whether it beats the baseline, the better truth
    gate of that level (``upper_bound``: the one with the larger mean difference), the arm's share of
    that gate's gain (nan unless the gate beats the baseline) and the reading by the rules above."""
    d = differences[differences["metric"] == metric]
    rows = []
    for model in sorted(d["model"].unique(), key=lambda m: level_key(levels.get(m))):
        g = d[d["model"] == model]
        gates = g[g["method"].isin(TRUTH_GATES)]
        bound = gates.loc[gates["diff_mean"].idxmax()] if len(gates) else None
        bound_wins = bound is not None and _beats(bound)
        words, remarks = level_key(levels.get(model))
        for r in g.to_dict("records"):
            wins = _beats(r)
            share = (float(r["diff_mean"]) / float(bound["diff_mean"])
                     if bound_wins and r["method"] not in TRUTH_GATES else math.nan)
            if r["method"] in TRUTH_GATES:
                reading = "upper bound: beats the baseline" if wins else "upper bound: does not beat the baseline"
            elif bound is None:
                reading = "no truth gate at this level: no upper bound to read it against"
            elif not bound_wins:
                # the rules say nothing of a scorer where right scores do not help; a decided loss is still
                # a finding: its scores cost accuracy that right scores through the same gate do not
                reading = ("below the baseline, where no truth gate is: its scores cost accuracy"
                           if _decided(r, -1) else "not informative: no truth gate beats the baseline here")
            else:
                reading = "recovers part of the upper bound" if wins else "fails where the upper bound wins"
            rows.append({"model": model, "level": level_label(levels.get(model)),
                         "distractors": words, "filler": remarks,
                         "method": r["method"], "role": r.get("role", "secondary"), "diff_mean": r["diff_mean"],
                         "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "ci_low_holm": r.get("ci_low_holm", math.nan), "ci_high_holm": r.get("ci_high_holm", math.nan),
                         "p": r["p"], "p_holm": r.get("p_holm", math.nan), "mde": r["mde"],
                         "mde_holm": r.get("mde_holm", math.nan), "n_seeds": r["n_seeds"], "beats": wins,
                         "upper_bound": None if bound is None else bound["method"],
                         "upper_bound_wins": bound_wins, "share_of_upper_bound": share, "reading": reading})
    return pd.DataFrame(rows)


def _paired_by_seed(outcomes: pd.DataFrame, model: str, method: str, baseline: str, metric: str) -> list[float]:
    m = outcomes[outcomes["model"] == model]
    arm = m[m["method"] == method].set_index("seed")[metric]
    base = m[m["method"] == baseline].set_index("seed")[metric]
    seeds = sorted(set(arm.index) & set(base.index))
    return [float(arm[s]) - float(base[s]) for s in seeds]


def level_trends(outcomes: pd.DataFrame, levels: Mapping[str, Mapping[str, int] | None],
                 baseline: str = "grpo", metric: str = "final_accuracy") -> pd.DataFrame:
    """Per arm run at two or more levels: its paired difference from the baseline at the highest level
    minus that at the lowest (Welch's interval over the two levels' per-seed differences). The graded
    truth gate is not run where it equals the truth gate (a level without such words); there the truth
    gate's differences stand for it."""
    models = sorted(outcomes["model"].unique(), key=lambda m: level_key(levels.get(m)))
    rows = []
    if len(models) < 2:
        return pd.DataFrame(rows)
    low, high = models[0], models[-1]
    for method in [m for m in outcomes["method"].unique() if m != baseline]:
        at_low = _paired_by_seed(outcomes, low, method, baseline, metric)
        if not at_low and method == "truth_graded":
            at_low = _paired_by_seed(outcomes, low, "truth", baseline, metric)
        at_high = _paired_by_seed(outcomes, high, method, baseline, metric)
        if not at_low or not at_high:
            continue
        w = welch(at_high, at_low)
        rows.append({"method": method, "low": low, "high": high, "low_level": level_label(levels.get(low)),
                     "high_level": level_label(levels.get(high)), "at_low": float(np.mean(at_low)),
                     "at_high": float(np.mean(at_high)), "change": w["diff"], "ci_low": w["ci_low"],
                     "ci_high": w["ci_high"], "p": w["p"], "seeds_low": len(at_low), "seeds_high": len(at_high),
                     "grows": bool(w["ci_low"] > 0)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ the table


def decisive_table(readings: pd.DataFrame, trends: pd.DataFrame, baseline: str = "grpo") -> tuple[pd.DataFrame, str]:
    """The decisive run read by its rules (:func:`level_readings`, :func:`level_trends`): per distractor level, each arm
    minus the baseline with the raw and Holm-level intervals, Holm p, the MDE, its share of the better
    truth gate's gain and the reading; then each arm's change from the lowest level to the highest."""
    base = METHOD_NAMES.get(baseline, baseline)
    rows = []
    for r in readings.to_dict("records"):
        share = "–" if is_missing(r["share_of_upper_bound"]) else f"{100 * r['share_of_upper_bound']:.0f}%"
        primary = r["role"] == "primary"
        rows.append([f"{r['model']} ({r['level']})", METHOD_NAMES.get(r["method"], r["method"]),
                     "primary" if primary else "secondary",
                     fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]) + (" *" if r["beats"] else ""),
                     holm_interval_cell(r) if primary else "–", fmt_p(r["p_holm"] if primary else r["p"]),
                     fmt_num(r["mde_holm"] if primary else r["mde"], 1, 100.0), int(r["n_seeds"]), share,
                     r["reading"]])
    parts = ["## The decisive reading\n\n", f"Each arm minus {base} per distractor level (final accuracy, points):\n\n",
             markdown_table(["Level", "Method", "comparison", "difference [95%]", "interval at Holm's level",
                             "p (Holm for primary)", "MDE 80% (Holm for primary)", "seeds",
                             "share of the truth gate's gain", "reading"], rows, align="lllrrrrrrl")]
    # the registry does not plan the graded gate on a policy without such words (its run would be the truth gate's)
    by_model = readings.groupby("model", sort=False)
    without_graded = [m for m, g in by_model if "truth" in set(g["method"]) and "truth_graded" not in set(g["method"])
                      and not (g["distractors"] > 0).any() and not (g["filler"] > 0).any()]
    if without_graded:
        parts.append(f"\nThe graded truth gate is not run on {', '.join(without_graded)}: its policy writes no words "
                     "that cannot change the answer, so its weights equal the truth gate's.\n")
    if len(trends):
        trow = [[METHOD_NAMES.get(r["method"], r["method"]), f"{100 * r['at_low']:.1f} ({r['seeds_low']})",
                 f"{100 * r['at_high']:.1f} ({r['seeds_high']})",
                 fmt_cell(r["change"], r["ci_low"], r["ci_high"]) + (" *" if r["grows"] else ""), fmt_p(r["p"])]
                for r in trends.to_dict("records")]
        t0 = trends.iloc[0]
        parts.append(f"\nChange with the distractor level, {t0['low']} ({t0['low_level']}) to {t0['high']} "
                     f"({t0['high_level']}): each arm minus {base} at each level (seeds), and the change with "
                     "Welch's 95% interval (the levels are different policies; at the lowest level the truth "
                     "gate stands for the graded one where that is not run):\n\n"
                     + markdown_table(["Method", "at the lowest level", "at the highest level", "change [95%]", "p"],
                                      trow, align="lrrrr"))
    else:
        parts.append("\nOne distractor level run: no change with the level to read.\n")
    parts.append(
        f"\nRules 1-3 of oar.analysis.decisive were fixed before the runs; the reading of a scorer decided below "
        f"{base} where no truth gate beats it was added after the truth gates' results had been read. "
        f"A truth gate scores the parsed decisive tokens through the paper's gate: "
        f"the best a scorer could do through it. Where the better truth gate does not beat {base}, reshaping "
        f"through the gate does not help at that level by more than the MDE, and a scorer's difference there says "
        f"nothing about its scoring, unless it falls below {base}: then its scores cost accuracy that right scores "
        f"through the same gate do not. Where a truth gate wins and a scorer does not, that scorer fails. Share: the "
        f"scorer's mean difference over the better truth gate's, where that gate wins. Beats: Holm p below 5% "
        f"with a positive mean for a primary comparison (`analysis.primary`), the raw interval above 0 otherwise "
        f"(`*`). A truth gate's gain that grows with the level is the paper's mechanism holding where its premise "
        f"does. Interval at Holm's level and MDE: as in the paired differences table.\n")
    return pd.concat([readings.assign(kind="level"), trends.assign(kind="trend")], ignore_index=True), "".join(parts)
