"""The declared dose-response of the mechanism test: does accuracy fall as the last step's share of the
credit grows?

A dose method (``runs.dose``) trains at several ratios r of the last step's decisive tokens' weight to
the earlier steps' (``oar.final_step_ratio``) on the same seeds. The reading (``analysis.dose_response``),
fixed before the runs:

- per seed, the ordinary least-squares slope of final accuracy on log2(r) across the levels (each seed
  its own intercept, so the seeds are paired across levels); then a one-sample t-test of the mean slope
  against 0 in the declared direction (``alternative``; ``less``: more weight on the last step costs
  accuracy), with the mean slope's two-sided 95% interval;
- the declared sensitivity analysis: Page's L test of an ordered trend across the levels, seeds as
  blocks (ranks only: neither linear in log2(r) nor normal);
- a manipulation check where the runs logged it (``oar.log_step_credit``): each level's share of the
  reasoning's weight on the last step's decisive tokens.

Its own test at its own level, outside the contrasts' Holm family (``oar.analysis.mechanism``). A run
missing on a declared seed and level stops the reading, naming it: the slopes are never read on a subset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from oar.analysis.formatting import fmt_cell, fmt_num, fmt_p, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.statistics import one_sided_t, paired_t, seed_interval

KEY = "analysis.dose_response"
ALTERNATIVES = ("less", "greater", "two-sided")
CLAIMS = {"less": "accuracy falls as the last step's weight grows",
          "greater": "accuracy rises as the last step's weight grows",
          "two-sided": "accuracy changes with the last step's weight"}
MIN_LEVELS = 3  # Page's L needs three ordered levels; a slope on two is a single contrast


def check_design(design: Mapping[str, Any], dose: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems of a declared dose-response, each (key, message), against runs.dose (its ``models``,
    ``methods``, ``ratios`` and ``seeds``; empty when runs.dose is not given)."""
    if not dose:
        return [("runs.dose", f"{KEY} reads the runs of runs.dose, which declares none")]
    problems = []
    if design.get("model") not in dose["models"]:
        problems.append((f"{KEY}.model", f"{design.get('model')!r} is not in runs.dose.models {list(dose['models'])}"))
    if design.get("method") not in dose["methods"]:
        problems.append((f"{KEY}.method", f"{design.get('method')!r} is not in runs.dose.methods "
                                          f"{list(dose['methods'])}"))
    if len(dose["ratios"]) < MIN_LEVELS:
        problems.append(("runs.dose.ratios", f"{list(dose['ratios'])}: a trend test needs at least {MIN_LEVELS} "
                                             "ratios"))
    if len(set(dose["seeds"])) < 2:
        problems.append(("runs.dose.seeds", f"{list(dose['seeds'])}: the slopes' t-test needs at least 2 seeds"))
    if design.get("alternative") not in ALTERNATIVES:
        problems.append((f"{KEY}.alternative", f"{design.get('alternative')!r} is not one of {list(ALTERNATIVES)}"))
    alpha = design.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 0.2:
        problems.append((f"{KEY}.alpha", f"{alpha!r} is outside (0, 0.2]"))
    return problems


def accuracy_by_level(accuracy: pd.DataFrame, design: Mapping[str, Any], benchmark: str) -> pd.DataFrame:
    """Final accuracy (``pass@1`` on ``benchmark``) of every declared run: seeds as rows, ratios as
    columns (ascending). A declared run without it raises, naming the run."""
    rows = accuracy[accuracy["benchmark"] == benchmark]
    have = {str(r): float(v) for r, v in zip(rows["run"], rows["pass@1"])}
    missing = [f"{r['run']} (ratio {r['ratio']:g}, seed {r['seed']})" for r in design["runs"] if r["run"] not in have]
    if missing:
        raise ValueError(f"{KEY}: declared runs without {benchmark} accuracy: {', '.join(missing[:6])}"
                         + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
                         + "; the slopes are read on every declared seed and level or not at all")
    table = pd.DataFrame(index=[int(s) for s in design["seeds"]], columns=sorted(float(r) for r in design["ratios"]),
                         dtype=float)
    for r in design["runs"]:
        table.loc[int(r["seed"]), float(r["ratio"])] = have[r["run"]]
    return table


def seed_slopes(table: pd.DataFrame) -> pd.Series:
    """Per seed (row), the least-squares slope of its values on log2 of the ratios (columns): the change
    per doubling of the ratio."""
    x = np.log2(np.asarray(table.columns, dtype=float))
    xc = x - x.mean()
    y = table.to_numpy(dtype=float)
    return pd.Series((y - y.mean(axis=1, keepdims=True)) @ xc / float(xc @ xc), index=table.index, name="slope")


def slope_test(slopes: Sequence[float], alternative: str, alpha: float = 0.05) -> dict[str, float]:
    """The one-sample t-test of the mean per-seed slope against 0 in the declared direction: ``n``,
    ``mean``, ``ci_low``/``ci_high`` (two-sided 95%), ``sd``, ``t``, ``p`` and ``mde`` (two-sided 5%, 80%
    power, at the observed SD)."""
    two = paired_t(slopes)
    one = one_sided_t(slopes, 0.0, "less" if alternative == "two-sided" else alternative, alpha)
    return {"n": two["n"], "mean": two["mean"], "ci_low": two["ci_low"], "ci_high": two["ci_high"], "sd": two["sd"],
            "t": one["t"], "p": two["p"] if alternative == "two-sided" else one["p"], "mde": two["mde"]}


def page_trend(table: pd.DataFrame, alternative: str) -> dict[str, float]:
    """Page's L test of an ordered trend across the ratios (columns, ascending), each seed (row) a block
    ranked within itself (ties averaged): ``less`` predicts values falling as the ratio grows,
    ``greater`` rising; ``two-sided`` doubles the smaller one-sided p. Returns ``L`` (for the declared
    order; for ``less``, and for ``two-sided``, the falling order), ``p`` and ``method`` (scipy's: exact
    or asymptotic)."""
    data = table.to_numpy(dtype=float)
    k = data.shape[1]
    rising, falling = list(range(1, k + 1)), list(range(k, 0, -1))
    if alternative == "greater":
        res = stats.page_trend_test(data, predicted_ranks=rising)
        return {"L": float(res.statistic), "p": float(res.pvalue), "method": res.method}
    down = stats.page_trend_test(data, predicted_ranks=falling)
    if alternative == "less":
        return {"L": float(down.statistic), "p": float(down.pvalue), "method": down.method}
    up = stats.page_trend_test(data, predicted_ranks=rising)
    return {"L": float(down.statistic), "p": min(1.0, 2 * min(float(down.pvalue), float(up.pvalue))),
            "method": down.method}


def read_dose_response(accuracy: pd.DataFrame, design: Mapping[str, Any], benchmark: str,
                       curves: pd.DataFrame | None = None) -> dict[str, Any]:
    """The declared reading: ``table`` (seeds x ratios, final accuracy), ``levels`` (per ratio: mean
    accuracy over seeds with its 95% interval, and where ``curves`` carry it the last step's weight
    share, mean of each run's steps, then over seeds), ``slopes`` (per seed), ``slope`` (the t-test of
    :func:`slope_test`) and ``page`` (:func:`page_trend`)."""
    table = accuracy_by_level(accuracy, design, benchmark)
    alternative, alpha = design["alternative"], float(design.get("alpha", 0.05))
    shares = _run_means(curves, [r["run"] for r in design["runs"]],
                        ("final_step_weight_share", "final_step_token_share"))
    levels = []
    for ratio in table.columns:
        mean, low, high = seed_interval(list(table[ratio]))
        row = {"ratio": float(ratio), "log2_ratio": math.log2(ratio), "n_seeds": int(table[ratio].notna().sum()),
               "mean": mean, "ci_low": low, "ci_high": high}
        if shares is not None:
            runs = [r["run"] for r in design["runs"] if float(r["ratio"]) == float(ratio)]
            weight = list(shares["final_step_weight_share"].reindex(runs))
            row["final_step_weight_share"], row["final_step_weight_share_low"], row["final_step_weight_share_high"] = \
                seed_interval(weight)
            row["final_step_token_share"] = seed_interval(list(shares["final_step_token_share"].reindex(runs)))[0]
        levels.append(row)
    slopes = seed_slopes(table)
    return {"table": table, "levels": pd.DataFrame(levels), "slopes": slopes,
            "slope": slope_test(list(slopes), alternative, alpha), "page": page_trend(table, alternative)}


def _run_means(curves: pd.DataFrame | None, runs: Sequence[str], columns: Sequence[str]) -> pd.DataFrame | None:
    """Per run of ``runs``, the mean of each of ``columns`` over its logged steps (indexed by run); None
    when the curves do not carry them (the runs did not log the step credit)."""
    if curves is None or not all(c in curves for c in columns):
        return None
    return curves[curves["run"].isin(list(runs))].groupby("run")[list(columns)].mean()


def reference_arm(outcomes: pd.DataFrame, design: Mapping[str, Any], method: str) -> dict[str, Any] | None:
    """An arm of the per-seed outcomes (GRPO) on the dose's model and seeds, for scale: ``name``,
    ``n_seeds``, ``mean``, ``ci_low``, ``ci_high`` of its final accuracy; None where it has no run there."""
    seeds = [int(s) for s in design["seeds"]]
    runs = outcomes[(outcomes["model"] == design["model"]) & (outcomes["method"] == method)
                    & outcomes["seed"].isin(seeds)]
    if runs.empty:
        return None
    mean, low, high = seed_interval(list(runs["final_accuracy"]))
    return {"name": f"{METHOD_NAMES.get(method, method)} (same seeds)", "n_seeds": len(runs), "mean": mean,
            "ci_low": low, "ci_high": high}


# ------------------------------------------------------------------------------------ the table


def dose_response_section(reading: Mapping[str, Any], design: Mapping[str, Any],
                          reference: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, str]:
    """The reading as rows (``kind`` level, slope or page) and a Markdown section: per ratio the mean
    accuracy with its 95% interval (and the last step's weight share where logged), then the slope per
    doubling with its declared test and Page's L. ``reference``: an arm's ``name``, ``mean``,
    ``ci_low``, ``ci_high`` and ``n_seeds`` on the same seeds (GRPO), shown for scale, not tested."""
    levels, slope, page = reading["levels"], reading["slope"], reading["page"]
    alternative, alpha = design["alternative"], float(design.get("alpha", 0.05))
    logged = "final_step_weight_share" in levels
    rows = []
    for r in levels.to_dict("records"):
        row = [f"{r['ratio']:g}", f"{r['log2_ratio']:g}", int(r["n_seeds"]),
               fmt_cell(r["mean"], r["ci_low"], r["ci_high"])]
        if logged:
            row += [fmt_cell(r["final_step_weight_share"], r["final_step_weight_share_low"],
                             r["final_step_weight_share_high"]), fmt_num(r["final_step_token_share"], 1, 100.0)]
        rows.append(row)
    headers = ["ratio r", "log2 r", "seeds", "accuracy, % [95%]"]
    if logged:
        headers += ["last step's decisive tokens: weight, % [95%]", "their tokens, %"]
    if reference:
        rows.append([reference["name"], "", int(reference["n_seeds"]),
                     fmt_cell(reference["mean"], reference["ci_low"], reference["ci_high"])]
                    + (["", ""] if logged else []))
    decided = not math.isnan(slope["p"]) and slope["p"] < alpha
    verdict = f"decided: {CLAIMS[alternative]}" if decided else "not decided"
    # The sensitivity analysis decides nothing of its own; it says whether it would have decided the same.
    page_decides = not math.isnan(page["p"]) and page["p"] < alpha
    page_verdict = "sensitivity: " + ("agrees" if page_decides == decided else "disagrees") + (
        f" (p {'<' if page_decides else '>='} {alpha:g})")
    model, method = design["model"], design["method"]
    md = (f"## Dose-response: the last step's weight on {model} ({method})\n\n"
          + (f"Hypothesis (declared): {design['hypothesis']}\n\n" if design.get("hypothesis") else "")
          + markdown_table(headers, rows, align="l" + "r" * (len(headers) - 1))
          + f"\nEach level trains {method} with the last step's decisive tokens at r times the earlier steps' "
            "decisive tokens' mean weight, the mass kept; r = 1 is the truth gate's run on the same seed."
          + (f" {reference['name']} is shown for scale, not tested." if reference else "")
          + (" " if logged else "")
          + ("\"their tokens\" is those tokens' share of the reasoning, what uniform weights give (the manipulation "
             "check: the weight share should rise with r)." if logged else "")
          + "\n\n"
          + markdown_table(["test", "estimate", "statistic", "p", "decision"], [
              ["slope of accuracy on log2 r, per seed, then a one-sample t-test (declared)",
               f"{fmt_cell(slope['mean'], slope['ci_low'], slope['ci_high'])} points per doubling; MDE 80% "
               f"{fmt_num(slope['mde'], 1, 100.0)}", f"t = {fmt_num(slope['t'], 2)}, {slope['n'] - 1} df",
               fmt_p(slope["p"]), verdict],
              ["Page's L test of an ordered trend (declared sensitivity analysis)", "",
               f"L = {fmt_num(page['L'], 1)} ({page['method']})", fmt_p(page["p"]), page_verdict]],
              align="lrrrl")
          + f"\nThe slope is each seed's least-squares fit of final accuracy on log2 r (its own intercept: the seeds "
            f"are paired across levels), {slope['n']} seeds; the test is one-sample t of the mean slope, "
            f"alternative {alternative}, at alpha {alpha:g}, its own test outside the contrasts' Holm family; the "
            f"interval is two-sided 95%. Page's L ranks the levels within each seed (predicted order: "
            f"{'rising' if alternative == 'greater' else 'falling'} with r), neither linear in log2 r nor normal. "
            "A declared run missing on any seed or level stops this reading.\n")
    frame = pd.concat([
        levels.assign(kind="level"),
        pd.DataFrame([{"kind": "slope", **{k: slope[k] for k in ("n", "mean", "ci_low", "ci_high", "sd", "t", "p",
                                                                  "mde")}, "alternative": alternative,
                       "alpha": alpha, "decided": decided}]),
        pd.DataFrame([{"kind": "page", "L": page["L"], "p": page["p"], "method": page["method"],
                       "alternative": alternative}]),
    ], ignore_index=True)
    return frame, md
