"""Does a method beat the baseline (GRPO)? Each method minus the baseline over paired seeds, per model and
outcome (:data:`oar.analysis.outcomes.PAIRED_METRICS`): paired t-tests, Holm's correction over the
declared primary family (checked to be complete), the minimum detectable effect, and the paired
differences table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, fmt_p, is_missing, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.outcomes import PAIRED_METRICS, censored_steps, censored_times, steps_cell
from oar.analysis.statistics import holm, holm_alpha, logrank, mde, paired_t, t_half_width

PRIMARY_ROLE, SECONDARY_ROLE = "primary", "secondary"


def check_family(frame: pd.DataFrame, primary: Mapping[str, Any]) -> None:
    """Holm's family is the declared one, not the rows that happen to exist: every declared primary
    comparison (``primary["family"]``: [model, arm] pairs, from the registry) is present on
    ``primary["metric"]`` with every declared seed (``primary["seeds"]``) paired, and no other row is
    primary. Raises ValueError naming each missing comparison and seed otherwise (an interim table
    that applied Holm to the runs made so far would test a smaller family than the one declared)."""
    declared = [tuple(x) for x in primary["family"]]
    seeds = sorted(int(s) for s in primary.get("seeds") or [])
    rows = frame[frame["metric"] == primary["metric"]] if len(frame) else frame
    problems = []
    for model, arm in declared:
        r = rows[(rows["model"] == model) & (rows["method"] == arm)] if len(rows) else rows
        if r.empty:
            problems.append(f"{model}/{arm}: no paired runs")
        elif seeds and int(r["n_seeds"].iloc[0]) < len(seeds):
            problems.append(f"{model}/{arm}: {int(r['n_seeds'].iloc[0])} of the {len(seeds)} declared seeds paired")
    if problems:
        raise ValueError(f"analysis.primary: the declared family of {len(declared)} comparisons is incomplete "
                         f"({'; '.join(problems)}); Holm over the runs that exist would test a smaller family. "
                         "Make the missing runs, or read them as exploratory without analysis.primary")


def paired_differences(outcomes: pd.DataFrame, baseline: str = "grpo",
                       primary: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Each method minus ``baseline`` over the seeds both ran (same seed = same prompts and first
    rollouts), per model and metric.

    Final accuracy and reward AUC: a paired t-test (:func:`oar.analysis.statistics.paired_t`): mean
    difference with its 95% t-interval, p-value, SD of the differences, minimum detectable effect at 80%
    power, the seed count, how many seeds the method won, and both methods' own means; decided when the
    interval excludes 0.

    Steps to threshold is censored (a run may never reach it), so it gets no t-interval: per method and
    baseline, how many of the paired runs reached the threshold and the Kaplan-Meier median steps (nan:
    the median is not reached within the runs) and restricted mean (to the last step);
    ``diff_mean`` is the difference of the two medians and ``p`` the log-rank test's
    (:func:`oar.analysis.statistics.logrank`, two-sided); never decided, never primary.

    ``primary`` (the config's ``analysis.primary``: ``arms``, ``metric``) marks the declared primary
    comparisons (``role`` primary; every other row secondary) and adds ``p_holm``, Holm's adjusted
    p-value over the primary family (every declared arm on every model), and ``mde_holm``, the minimum
    detectable effect at Holm's strictest level alpha / family size. Secondary rows carry raw p-values only.
    """
    out = []
    for model, m in outcomes.groupby("model", sort=False):
        base = m[m["method"] == baseline].set_index("seed")
        if base.empty:
            raise ValueError(f"model {model!r}: no {baseline!r} runs to pair with")
        for method, g in m.groupby("method", sort=False):
            if method == baseline:
                continue
            g = g.set_index("seed")
            seeds = sorted(set(g.index) & set(base.index))
            for metric in PAIRED_METRICS:
                row = {"model": model, "method": method, "baseline": baseline, "metric": metric,
                       "threshold": float(m["threshold"].iloc[0]) if "threshold" in m else math.nan,
                       "n_seeds": len(seeds)}
                if metric == "steps_to_threshold":
                    mine = censored_steps(g.loc[seeds].reset_index())
                    theirs = censored_steps(base.loc[seeds].reset_index())
                    both = [s for s in seeds if g.at[s, "reached"] and base.at[s, "reached"]]
                    lr = logrank(*censored_times(g.loc[seeds]), *censored_times(base.loc[seeds]))
                    row.update(diff_mean=mine["median"] - theirs["median"], ci_low=math.nan, ci_high=math.nan,
                               p=lr["p"], sd_diff=math.nan, mde=math.nan,
                               wins=sum(float(g.at[s, metric]) < float(base.at[s, metric]) for s in both)
                               + sum(bool(g.at[s, "reached"]) and not bool(base.at[s, "reached"]) for s in seeds),
                               method_mean=mine["median"], baseline_mean=theirs["median"],
                               method_reached=mine["reached"], baseline_reached=theirs["reached"],
                               method_rmst=mine["rmst"], baseline_rmst=theirs["rmst"],
                               steps=int(m["steps"].max()), decided=False)
                else:
                    d = [float(g.at[s, metric]) - float(base.at[s, metric]) for s in seeds]
                    t = paired_t(d)
                    row.update(diff_mean=t["mean"], ci_low=t["ci_low"], ci_high=t["ci_high"], p=t["p"],
                               sd_diff=t["sd"], mde=t["mde"], wins=sum(x > 0 for x in d),
                               method_mean=float(g.loc[seeds, metric].mean()),
                               baseline_mean=float(base.loc[seeds, metric].mean()),
                               decided=bool(len(seeds) > 1 and (t["ci_low"] > 0 or t["ci_high"] < 0)))
                out.append(row)
    frame = pd.DataFrame(out)
    if primary and primary.get("family") is not None:
        check_family(frame, primary)
    if frame.empty:
        return frame
    is_primary = [bool(primary) and r["method"] in primary["arms"] and r["metric"] == primary["metric"]
                  for r in frame.to_dict("records")]
    frame["role"] = [PRIMARY_ROLE if x else SECONDARY_ROLE for x in is_primary]
    adjusted = holm([p for p, x in zip(frame["p"], is_primary) if x])
    family = len(adjusted)
    it = iter(adjusted)
    frame["p_holm"] = [next(it) if x else math.nan for x in is_primary]
    frame["mde_holm"] = [mde(sd, n, alpha=holm_alpha(family)) if x else math.nan
                         for sd, n, x in zip(frame["sd_diff"], frame["n_seeds"], is_primary)]
    frame["family_size"] = [family if x else math.nan for x in is_primary]
    # beside the raw interval, the one at Holm's strictest level (Bonferroni's: simultaneous over the family)
    half = [t_half_width(sd, n, 1 - holm_alpha(family)) if x else math.nan
            for sd, n, x in zip(frame["sd_diff"], frame["n_seeds"], is_primary)]
    frame["ci_low_holm"] = frame["diff_mean"] - half
    frame["ci_high_holm"] = frame["diff_mean"] + half
    return frame


# ------------------------------------------------------------------------------------ the table


PAIRED_METRICS_SHORT = {"final_accuracy": "final accuracy", "reward_auc": "reward AUC",
                        "steps_to_threshold": "steps to threshold"}


def holm_interval_cell(r: Mapping[str, Any]) -> str:
    """``[-1.2, 20.4]``: a primary comparison's interval at Holm's strictest level, in points."""
    low, high = r.get("ci_low_holm", math.nan), r.get("ci_high_holm", math.nan)
    if is_missing(low) or is_missing(high):
        return "–"
    return f"[{fmt_num(low, 1, 100.0)}, {fmt_num(high, 1, 100.0)}]"


def _threshold_of(frame: pd.DataFrame, model: str) -> str:
    values = frame.loc[frame["model"] == model, "threshold"].dropna() if "threshold" in frame else []
    return f" (reward threshold {values.iloc[0]:.3f})" if len(values) else ""


def paired_table(differences: pd.DataFrame, rule: str | None = None,
                 primary: Mapping[str, Any] | None = None,
                 not_run: Sequence[str] = ()) -> tuple[pd.DataFrame, str]:
    """Each method minus the baseline over paired seeds, per model.

    Final accuracy and reward AUC (points), one row per method and metric: ``mean [95% interval]``, the
    paired t-test's p-value, Holm's adjusted p over the declared primary family (primary rows only), the
    SD of the paired differences, the minimum detectable effect at 80% power (and at Holm's level for
    primary rows), seeds and wins; each row labelled primary or secondary (exploratory).

    Steps to threshold (censored): per method and baseline, runs that reached it of n, the Kaplan-Meier
    median and the restricted mean to the last step; no interval.

    ``primary`` (``analysis.primary``) is named in the note; ``not_run`` lists comparison tests the
    config did not run (each printed as "not run")."""
    d = differences.copy()
    if "role" not in d:
        d["role"] = "secondary"
    d["label"] = [METHOD_NAMES.get(m, m) for m in d["method"]]
    parts = ["## Paired differences from the baseline\n"]
    tested = [k for k in PAIRED_METRICS if k != "steps_to_threshold"]
    for model, g in d.groupby("model", sort=False):
        base = METHOD_NAMES.get(g["baseline"].iloc[0], g["baseline"].iloc[0])
        rows, step_rows = [], []
        for (method, label), m in g.groupby(["method", "label"], sort=False):
            for metric in tested:
                r = m[m["metric"] == metric].iloc[0]
                primary_row = r["role"] == "primary"
                mde_cell = fmt_num(r.get("mde"), 1, 100.0)
                if primary_row:
                    mde_cell += f" ({fmt_num(r.get('mde_holm'), 1, 100.0)})"
                rows.append([label, PAIRED_METRICS_SHORT[metric],
                             "primary" if primary_row else "secondary (exploratory)",
                             fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]) + (" *" if r["decided"] else ""),
                             fmt_p(r.get("p")), fmt_p(r.get("p_holm")) if primary_row else "–",
                             holm_interval_cell(r) if primary_row else "–",
                             fmt_num(r.get("sd_diff"), 1, 100.0), mde_cell, int(r["n_seeds"]), int(r["wins"])])
            s = m[m["metric"] == "steps_to_threshold"]
            if len(s):
                r = s.iloc[0]
                n, steps = int(r["n_seeds"]), r.get("steps")
                step_rows.append([label, f"{int(r['method_reached'])}/{n} vs {int(r['baseline_reached'])}/{n}",
                                  f"{steps_cell(r['method_mean'], steps)} vs {steps_cell(r['baseline_mean'], steps)}",
                                  f"{fmt_num(r['method_rmst'], 1)} vs {fmt_num(r['baseline_rmst'], 1)}",
                                  fmt_p(r.get("p"))])
        parts.append(f"\n### {model}: each method minus {base}{_threshold_of(g, model)}\n\n" + markdown_table(
            ["Method", "metric", "comparison", "difference, points [95%]", "p", "Holm p", "interval at Holm's level",
             "SD of differences", "MDE 80% (Holm)", "seeds", "wins"], rows, align="lllrrrrrrrr"))
        if step_rows:
            parts.append(f"\nSteps to threshold (censored; method vs {base}):\n\n" + markdown_table(
                ["Method", "reached", "Kaplan-Meier median steps", "restricted mean steps", "log-rank p"], step_rows))
    if primary:
        arms = ", ".join(METHOD_NAMES.get(a, a) for a in primary["arms"])
        family = int(d["family_size"].dropna().iloc[0]) if "family_size" in d and d["family_size"].notna().any() else 0
        parts.append(f"\nPrimary comparisons, declared in the config before the runs (`analysis.primary`): {arms} "
                     f"minus {METHOD_NAMES.get(primary['baseline'], primary['baseline'])} on "
                     f"{PAIRED_METRICS_SHORT.get(primary['metric'], primary['metric'])}, a family of {family}; "
                     f"Holm p is adjusted over that family. Declared minimum: {primary['min_seeds']} paired seeds"
                     + (" (below 10: a smoke-scale design whose primary comparisons are underpowered; read the MDE)"
                        if primary["min_seeds"] < 10 else "") + ".\n")
    else:
        parts.append("\nNo primary comparisons declared (`analysis.primary` is null): every row is exploratory.\n")
    for name in not_run:
        parts.append(f"\n{name}: not run (the config runs no such group).\n")
    parts.append("\nDifference: mean over paired seeds with its 95% t-interval; the same seed means the same training "
                 "prompts and first rollouts for every method. `*`: the interval excludes 0. p: two-sided paired "
                 "t-test. Secondary rows are exploratory: raw p, no correction. Interval at Holm's level: the "
                 "t-interval at Holm's strictest level, 1 - 5% / family size (Bonferroni's, simultaneous over the "
                 "family; a primary comparison whose Holm p is below 5% can still have one that touches 0, as Holm "
                 "tests the larger p-values at looser levels). SD of differences: SD of the "
                 "per-seed paired differences. MDE 80%: the smallest true difference a paired t-test at two-sided "
                 "5% finds with 80% power at that SD, (t(0.975, n-1) + t(0.8, n-1)) x SD / sqrt(n); in brackets, "
                 "at Holm's strictest level (5% / family size). Final accuracy: held-out accuracy after training. "
                 "Reward AUC: mean training reward over all steps. Steps to threshold: first step whose trailing "
                 "mean reward reaches " + (rule or "the threshold")
                 + "; a run that never reaches it is censored at its last step, so the table gives how many runs "
                 "reached it, the Kaplan-Meier median (\"> N\": not reached by half the runs within N steps) and "
                 "the restricted mean steps (area under the Kaplan-Meier curve up to the last step) and the two-sided "
                 "log-rank test of method against baseline (the runs as independent groups; no t-interval).\n")
    return d.drop(columns=["label"]), "".join(parts)
