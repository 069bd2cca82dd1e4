"""How accurate is each method variant, how noisy is that, and does it beat GRPO? The accuracy tables
(main table, gating and probe ablations, controls).

Per variant (model, method, tau, beta, probe) and benchmark: the mean pass@1 over seeds with its 95%
interval (t over seeds with two or more seeds, else the bootstrap over problems of the single
evaluation), the two noise sources (SD over seeds, a run's binomial evaluation SE), and the variant's
accuracy averaged over the benchmarks minus GRPO's on paired seeds. Accuracies are shown in percent; a
cell reads ``mean [low, high]``; the CSV keeps the interval and what it rests on in separate columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.credit import CREDIT_COLUMNS, UNTRAINED_NOTE, join_credit, mark_untrained
from oar.analysis.formatting import fmt_cell, fmt_num, fmt_p, is_missing, markdown_table
from oar.analysis.gating import gate_tests_text
from oar.analysis.labels import BENCHMARK_NAMES, method_label, variant_order
from oar.analysis.run_outputs import VARIANT_COLUMNS, variant_key, variant_seed_averages
from oar.analysis.statistics import binomial_se, paired_t, seed_interval, seed_sd

# ------------------------------------------------------------------------------------ per variant


def _mean_share(rows: pd.DataFrame) -> float:
    """Mean unparsable share of some (run, benchmark) rows; nan when a summary did not count it."""
    if "unparsable_share" not in rows or rows.empty:
        return math.nan
    values = [float(v) for v in rows["unparsable_share"]]
    return math.nan if any(math.isnan(v) for v in values) else float(np.mean(values))


def _undecided(rows: pd.DataFrame) -> int:
    """Responses of some (run, benchmark) rows that the grader left undecided, summed over the rows."""
    if "undecided" not in rows:
        return 0
    return int(sum(0 if is_missing(v) else int(v) for v in rows["undecided"]))


def aggregate_accuracy(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per variant (model, method, tau, beta, probe) and benchmark (plus ``average``): mean pass@1 over
    seeds with its 95% interval (t over seeds with >= 2 seeds, else the single run's bootstrap interval
    over problems; none for the average of a single seed), what it rests on, the mean share of
    responses without an answer (``unparsable_share``; for ``average``, the mean over benchmarks), and
    the two noise sources: ``seed_sd``, the SD of the per-seed accuracies (training noise plus
    evaluation noise), and ``eval_se``, the mean over seeds of a run's binomial standard error from its
    problems x samples (evaluation noise alone, :func:`oar.analysis.statistics.binomial_se`). Where
    ``seed_sd`` is much larger than ``eval_se``, seeds, not evaluation problems, limit the comparison."""
    if acc.empty:
        return pd.DataFrame()
    out = []
    acc = acc.copy()
    acc["_key"] = [variant_key(r) for r in acc.to_dict("records")]
    for key, g in acc.groupby("_key", sort=False, dropna=False):
        base = dict(zip(VARIANT_COLUMNS, key))
        per_seed_avg: dict[Any, list[float]] = {}
        for bench in benchmarks:
            b = g[g["benchmark"] == bench]
            if b.empty:
                continue
            values = list(b["pass@1"])
            n_seeds = len(values)
            mean, low, high = seed_interval(values)
            interval = "seeds"
            if n_seeds == 1:
                low, high, interval = float(b["ci_low"].iloc[0]), float(b["ci_high"].iloc[0]), "bootstrap over problems"
            errors = [binomial_se(v, k, n) for v, k, n in zip(b["pass@1"], b["num_problems"], b["samples_per_problem"])]
            out.append({**base, "benchmark": bench, "mean": mean, "ci_low": low, "ci_high": high, "n_seeds": n_seeds,
                        "interval": interval, "num_problems": int(b["num_problems"].max()),
                        "samples_per_problem": int(b["samples_per_problem"].max()),
                        "unparsable_share": _mean_share(b), "seed_sd": seed_sd(values),
                        "eval_se": float(np.mean(errors)), "undecided": _undecided(b)})
            for seed, v, se in zip(b["seed"], b["pass@1"], errors):
                per_seed_avg.setdefault(None if is_missing(seed) else seed, []).append((v, se))
        complete = [v for v in per_seed_avg.values() if len(v) == len(benchmarks)]
        if complete:
            averages = [float(np.mean([v for v, _ in runs])) for runs in complete]
            mean, low, high = seed_interval(averages)
            shares = [_mean_share(g[g["benchmark"] == bench]) for bench in benchmarks]
            # the mean of independent benchmark accuracies: SE = sqrt(sum of squared SEs) / benchmarks
            errors = [math.sqrt(sum(se ** 2 for _, se in runs)) / len(runs) for runs in complete]
            out.append({**base, "benchmark": "average", "mean": mean, "ci_low": low, "ci_high": high,
                        "n_seeds": len(complete), "interval": "seeds" if len(complete) > 1 else "none",
                        "num_problems": None, "samples_per_problem": None,
                        "unparsable_share": float(np.mean(shares)) if not any(map(math.isnan, shares)) else math.nan,
                        "seed_sd": seed_sd(averages), "eval_se": float(np.mean(errors)),
                        "undecided": sum(_undecided(g[g["benchmark"] == bench]) for bench in benchmarks)})
    return pd.DataFrame(out)


def accuracy_wide(acc: pd.DataFrame, benchmarks: Sequence[str], show: Sequence[str] = ()) -> pd.DataFrame:
    """Per variant: one row with ``<bench>``, ``<bench>_ci_low``, ``<bench>_ci_high``,
    ``<bench>_unparsable`` (the share of responses without an answer), ``<bench>_seed_sd`` (SD over
    seeds) and ``<bench>_eval_se`` (a run's binomial standard error; all percent), ``<bench>_problems``
    and ``<bench>_samples`` for every benchmark and ``average``, plus ``n_seeds``."""
    agg = aggregate_accuracy(acc, benchmarks)
    if agg.empty:
        return pd.DataFrame()
    rows = []
    agg["_key"] = [variant_key(r) for r in agg.to_dict("records")]
    for key, g in agg.groupby("_key", sort=False):
        row: dict[str, Any] = dict(zip(VARIANT_COLUMNS, key))
        row["label"] = method_label(row["method"], row["tau"], row["beta"], row["probe"], show)
        row["n_seeds"] = int(g["n_seeds"].max())
        for bench in [*benchmarks, "average"]:
            b = g[g["benchmark"] == bench]
            if b.empty:
                continue
            r = b.iloc[0]
            row[bench] = r["mean"] * 100
            row[f"{bench}_ci_low"] = r["ci_low"] * 100 if not is_missing(r["ci_low"]) else math.nan
            row[f"{bench}_ci_high"] = r["ci_high"] * 100 if not is_missing(r["ci_high"]) else math.nan
            share = r.get("unparsable_share", math.nan)
            row[f"{bench}_unparsable"] = share * 100 if not is_missing(share) else math.nan
            undecided = r.get("undecided", 0)
            row[f"{bench}_undecided"] = 0 if is_missing(undecided) else int(undecided)
            for noise in ("seed_sd", "eval_se"):
                value = r.get(noise, math.nan)
                row[f"{bench}_{noise}"] = value * 100 if not is_missing(value) else math.nan
            if bench != "average":
                row[f"{bench}_problems"] = r["num_problems"]
                row[f"{bench}_samples"] = r["samples_per_problem"]
        rows.append(row)
    rows.sort(key=lambda r: (str(r["model"]), *variant_order(r)))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------- minus GRPO, paired


def paired_accuracy_differences(acc: pd.DataFrame, benchmarks: Sequence[str], baseline: str = "grpo") -> pd.DataFrame:
    """Per trained variant (model, method, tau, beta, probe) other than ``baseline``: its accuracy
    averaged over ``benchmarks`` minus the baseline's on the same model, over the seeds both ran (the
    same seed means the same prompts and first rollouts), as a fraction: mean with its 95% t-interval,
    the seed count, the seeds it won, whether the interval excludes 0, the paired t-test's p-value, the
    SD of the paired differences and the minimum detectable effect at 80% power
    (:func:`oar.analysis.statistics.paired_t`). A run missing a benchmark has no average and no pair."""
    columns = [*VARIANT_COLUMNS, "n_seeds", "diff_mean", "ci_low", "ci_high", "wins", "decided", "p", "sd_diff", "mde"]
    if acc.empty:
        return pd.DataFrame(columns=columns)
    by_variant = variant_seed_averages(acc, benchmarks)
    references: dict[Any, dict[Any, float]] = {}
    for key, values in by_variant.items():
        if key[1] == baseline:
            if key[0] in references:
                raise ValueError(f"model {key[0]!r}: several {baseline!r} variants to pair with")
            references[key[0]] = values
    out = []
    for key, values in by_variant.items():
        model, method = key[0], key[1]
        reference = references.get(model)
        if method == baseline or reference is None:
            continue
        seeds = sorted(set(values) & set(reference))
        d = [values[s] - reference[s] for s in seeds]
        t = paired_t(d)
        out.append({**dict(zip(VARIANT_COLUMNS, key)), "n_seeds": len(seeds),
                    "diff_mean": t["mean"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                    "wins": sum(x > 0 for x in d),
                    "decided": bool(len(seeds) > 1 and (t["ci_low"] > 0 or t["ci_high"] < 0)),
                    "p": t["p"], "sd_diff": t["sd"], "mde": t["mde"]})
    return pd.DataFrame(out, columns=columns)


PAIRED_NOTE = ("minus GRPO, paired: the variant's average accuracy minus GRPO's on the same model, in points, over "
               "the seeds both ran (the same seed is the same prompts and first rollouts), mean [95% t-interval] "
               "(seeds; seeds won); `*`: the interval excludes 0. p: two-sided paired t-test, raw (the primary "
               "comparisons, Holm-corrected, are in the paired differences table; every other comparison is "
               "exploratory). MDE 80%: the smallest true difference this design detects with 80% power at "
               "two-sided 5%, (t(0.975, n-1) + t(0.8, n-1)) x SD of the paired differences / sqrt(n).\n")


def join_paired(wide: pd.DataFrame, diffs: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Per variant, its paired difference from GRPO (``diffs``, :func:`paired_accuracy_differences`) in
    points: numeric columns for the CSV and a ``minus_grpo`` cell for the Markdown; False when there is none."""
    if diffs.empty or wide.empty:
        return wide, False
    found = {variant_key(r): r for r in diffs.to_dict("records")}
    wide = wide.copy()
    rows = [found.get(variant_key(r)) for r in wide.to_dict("records")]
    for col in ("diff_mean", "ci_low", "ci_high"):
        wide[f"minus_grpo_{col.replace('diff_', '')}"] = [r[col] * 100 if r else math.nan for r in rows]
    wide["minus_grpo_seeds"] = [r["n_seeds"] if r else math.nan for r in rows]
    wide["minus_grpo_p"] = [r["p"] if r else math.nan for r in rows]
    wide["minus_grpo_sd"] = [r["sd_diff"] * 100 if r else math.nan for r in rows]
    wide["minus_grpo_mde"] = [r["mde"] * 100 if r else math.nan for r in rows]
    wide["minus_grpo"] = [paired_cell(r) for r in rows]
    wide["minus_grpo_p_cell"] = [fmt_p(r["p"]) if r else "–" for r in rows]
    wide["minus_grpo_mde_cell"] = [fmt_num(r["mde"], 1, 100.0) if r else "–" for r in rows]
    return wide, True


def paired_cell(r: Mapping[str, Any] | None) -> str:
    """``10.0 [-2.1, 22.1]* (5; 4)``: a paired difference in points (``*``: decided), its seeds and wins."""
    if r is None:
        return "–"
    cell = fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]) + ("*" if r["decided"] else "")
    return f"{cell} ({r['n_seeds']}; {r['wins']})"


def p_mde_cell(r: Mapping[str, Any] | None) -> str:
    """``p 0.031; MDE 12.5``: a paired difference's raw p and its MDE at 80% power, in points."""
    return "–" if r is None else f"p {fmt_p(r['p'])}; MDE {fmt_num(r['mde'], 1, 100.0)}"


# ------------------------------------------------------------------------------------ the table


UNPARSABLE_NOTE = ("(x% no answer): share of responses in which the grader found no final answer, counted as "
                   "wrong; a low accuracy with a high share is a format failure rather than a wrong answer.")


def _unparsable_suffix(share: Any) -> str:
    """`` (2.5% no answer)`` beside an accuracy; nothing where the evaluation did not count it."""
    return "" if is_missing(share) else f" ({share:.1f}% no answer)"


UNDECIDED_NOTE = ("(n undecided): responses whose symbolic equivalence check timed out twice, counted as wrong; "
                  "shown only where there are any.")


def _undecided_suffix(count: Any) -> str:
    """`` (3 undecided)`` beside an accuracy whose responses the grader left undecided; nothing for none."""
    return "" if is_missing(count) or not count else f" ({int(count)} undecided)"


NOISE_NOTE = ("seed SD / eval SE: the two noise sources of the average accuracy, in points. Seed SD: the SD of the "
              "per-seed accuracies (training noise with evaluation noise in it). Eval SE: a run's binomial "
              "standard error from its problems x samples, sqrt(p (1 - p) / (problems x samples)), the "
              "evaluation noise alone (for this fixed set of problems an upper bound, as problems differ in "
              "difficulty). "
              "Where the seed SD is much larger, seeds, not evaluation problems, limit the comparison.\n")


def _accuracy_markdown(wide: pd.DataFrame, benchmarks: Sequence[str], title: str,
                       extra: Sequence[tuple[str, str, int]] = ()) -> str:
    """One Markdown table per model: label | benchmarks | average | extra columns."""
    parts = [f"## {title}\n"]
    cols = [*benchmarks, "average"]
    for model, g in wide.groupby("model", sort=False):
        headers = ["Method", *[BENCHMARK_NAMES.get(b, b) for b in cols], "seeds", *[h for _, h, _ in extra]]
        rows = []
        for r in g.to_dict("records"):
            cells = [fmt_cell(r.get(b, math.nan), r.get(f"{b}_ci_low", math.nan), r.get(f"{b}_ci_high", math.nan),
                              scale=1.0) + _unparsable_suffix(r.get(f"{b}_unparsable", math.nan))
                     + _undecided_suffix(r.get(f"{b}_undecided", 0)) for b in cols]
            rows.append([r["label"], *cells, r["n_seeds"] if r["method"] != "base" else "–",
                         *[r.get(c, "–") if d is None else fmt_num(r.get(c), d) for c, _, d in extra]])
        parts.append(f"\n### {model}\n\n" + markdown_table(headers, rows))
        first = g.iloc[0]
        sizes = ", ".join(f"{BENCHMARK_NAMES.get(b, b)} {int(first[f'{b}_problems'])} problems x "
                          f"{int(first[f'{b}_samples'])}" for b in benchmarks if f"{b}_problems" in first
                          and not is_missing(first[f"{b}_problems"]))
        parts.append(f"\nAccuracy in %, pass@1 (mean over samples where a benchmark samples several). {sizes}. "
                     "Brackets: 95% interval (t over seeds with >= 2 seeds, else bootstrap over problems). "
                     f"{UNPARSABLE_NOTE}"
                     + (f" {UNDECIDED_NOTE}" if any(g.get(f"{b}_undecided", pd.Series([0])).fillna(0).sum()
                                                     for b in cols) else "") + "\n")
    return "".join(parts)


def accuracy_table(acc: pd.DataFrame, benchmarks: Sequence[str], title: str, methods: Sequence[str] | None = None,
                   show: Sequence[str] = (), credit: pd.DataFrame | None = None,
                   keep=None, gate_tests: bool = False) -> tuple[pd.DataFrame, str]:
    """The main table, the gating and probe ablations and the controls: (wide CSV frame, Markdown).

    ``methods`` keeps only those methods (and the base model row, always first); ``keep`` is an optional
    row filter on the wide frame; ``credit`` (the per-run credit summary) adds the per-variant credit
    metrics and the training evidence of :func:`oar.analysis.credit.mark_untrained`. Every table shows the
    two noise sources of the average accuracy (SD over seeds, a run's binomial evaluation SE) and, where
    variants pair with GRPO, the paired t-test's p and the minimum detectable effect; ``gate_tests`` (the
    gating ablation) adds the direct paired tests of the bi-level gate against boost-only and suppress-only.
    """
    wide = accuracy_wide(acc, benchmarks, show)
    if wide.empty:
        return wide, f"## {title}\n\nNo results.\n"
    if methods is not None:
        wide = wide[wide["method"].isin(["base", *methods])]
    if keep is not None:
        wide = wide[[bool(keep(r)) for r in wide.to_dict("records")]]
    wide["noise"] = [f"{fmt_num(r.get('average_seed_sd'), 1)} / {fmt_num(r.get('average_eval_se'), 1)}"
                     if r["method"] != "base" else "–" for r in wide.to_dict("records")]
    extra: tuple = (("noise", "seed SD / eval SE", None),)
    wide, paired = join_paired(wide, paired_accuracy_differences(acc, benchmarks))
    if paired:
        extra = (*extra, ("minus_grpo", "minus GRPO, paired", None), ("minus_grpo_p_cell", "p", None),
                 ("minus_grpo_mde_cell", "MDE 80%", None))
    if credit is not None and not credit.empty:
        wide = join_credit(wide, credit, [c for c, _, _ in CREDIT_COLUMNS])
        wide = mark_untrained(wide, credit)
        extra = (*extra, ("steps_with_advantage", "steps A≠0", None), *CREDIT_COLUMNS)
    wide = wide.reset_index(drop=True)
    markdown = _accuracy_markdown(wide, benchmarks, title, extra)
    notes = (NOISE_NOTE + (PAIRED_NOTE if paired else "")
             + (UNTRAINED_NOTE if credit is not None and not credit.empty else ""))
    if gate_tests:
        markdown += gate_tests_text(acc, benchmarks)
    return wide, markdown + "\n" + notes
