"""The workflow's tables: pandas frames in, a CSV frame and a Markdown text out.

Accuracies are shown in percent. A cell reads ``mean [low, high]`` with the 95% interval of
:func:`oar.analysis.results.aggregate_accuracy` (over seeds with two or more seeds, else the bootstrap over
problems of the single evaluation); the CSV keeps the interval and what it rests on in separate
columns. :func:`write_table` writes both files atomically.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oar.analysis.results import (aggregate_accuracy, censored_steps, gate_comparisons, paired_accuracy_differences,
                                  seed_interval, strength_trends)


def _seed_sd(values) -> float:
    x = [float(v) for v in values if not _isnan(v)]
    return float(pd.Series(x).std(ddof=1)) if len(x) > 1 else math.nan

METHOD_NAMES = {
    "base": "Base model",
    "grpo": "GRPO",
    "truth": "truth gate",
    "truth_graded": "graded truth gate",
    "truth_final": "final-step truth gate",
    "truth_early": "earlier-steps truth gate",
    "oar_p": "OAR-P",
    "oar_g": "OAR-G",
    "grad_norm": "grad-norm",
    "entropy": "entropy",
    "position": "position",
    "random": "random",
}
METHOD_ORDER = tuple(METHOD_NAMES)
PROBE_NAMES = {"lt_logits": "LT-Logits", "as_mean": "AS-Mean", "as_joint": "AS-Joint"}
BENCHMARK_NAMES = {"arith_test": "Arith (held-out)", "gsm8k_test": "GSM8K", "math500": "MATH500", "math_test": "MATH", "aime24": "AIME24",
                   "aime25": "AIME25", "amc23": "AMC23", "average": "Avg."}


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_num(v: Any, digits: int = 1, scale: float = 1.0) -> str:
    return "–" if _isnan(v) else f"{v * scale:.{digits}f}"


def fmt_p(p: Any) -> str:
    """A p-value: ``0.031``, ``<0.001``; ``–`` where there is none."""
    if _isnan(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_cell(mean: float, low: float, high: float, scale: float = 100.0, digits: int = 1) -> str:
    """``48.3 [44.1, 52.0]`` (no brackets when there is no interval)."""
    if _isnan(mean):
        return "–"
    text = f"{mean * scale:.{digits}f}"
    if not _isnan(low) and not _isnan(high):
        text += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    return text


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub Markdown table; ``align`` is one of l/r per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    esc = [[str(c).replace("|", "\\|") for c in row] for row in [headers, *rows]]
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(esc[0]) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines) + "\n"


def method_label(method: str, tau: Any = None, beta: Any = None, probe: Any = None, show: Sequence[str] = ()) -> str:
    """``OAR-G``, or with variant settings: ``OAR-G (tau 0.0, boost-only)``, ``OAR-P (AS-Joint)``."""
    label = METHOD_NAMES.get(method, method)
    extra = []
    if "tau" in show and not _isnan(tau):
        note = {0.0: ", boost-only", 1.0: ", suppress-only"}.get(float(tau), "")
        extra.append(f"tau {float(tau):g}{note}")
    if "beta" in show and not _isnan(beta):
        extra.append(f"beta {float(beta):g}")
    if "probe" in show and not _isnan(probe):
        extra.append(PROBE_NAMES.get(probe, probe))
    return label + (f" ({', '.join(extra)})" if extra else "")


def _sort_key(row: Mapping[str, Any]) -> tuple:
    m = row["method"]
    return (METHOD_ORDER.index(m) if m in METHOD_ORDER else 99,
            -1 if _isnan(row.get("tau")) else float(row["tau"]),
            -1 if _isnan(row.get("beta")) else float(row["beta"]),
            "" if _isnan(row.get("probe")) else str(row["probe"]))


def _variant_key(r: Mapping[str, Any]) -> tuple:
    return tuple(None if _isnan(r[k]) else r[k] for k in ("model", "method", "tau", "beta", "probe"))


def accuracy_wide(acc: pd.DataFrame, benchmarks: Sequence[str], show: Sequence[str] = ()) -> pd.DataFrame:
    """Per variant: one row with ``<bench>``, ``<bench>_ci_low``, ``<bench>_ci_high``,
    ``<bench>_unparsable`` (the share of responses without an answer), ``<bench>_seed_sd`` (SD over
    seeds) and ``<bench>_eval_se`` (a run's binomial standard error; all percent), ``<bench>_problems``
    and ``<bench>_samples`` for every benchmark and ``average``, plus ``n_seeds``."""
    agg = aggregate_accuracy(acc, benchmarks)
    if agg.empty:
        return pd.DataFrame()
    rows = []
    keys = ["model", "method", "tau", "beta", "probe"]
    agg["_key"] = [_variant_key(r) for r in agg.to_dict("records")]
    for key, g in agg.groupby("_key", sort=False):
        row: dict[str, Any] = dict(zip(keys, key))
        row["label"] = method_label(row["method"], row["tau"], row["beta"], row["probe"], show)
        row["n_seeds"] = int(g["n_seeds"].max())
        for bench in [*benchmarks, "average"]:
            b = g[g["benchmark"] == bench]
            if b.empty:
                continue
            r = b.iloc[0]
            row[bench] = r["mean"] * 100
            row[f"{bench}_ci_low"] = r["ci_low"] * 100 if not _isnan(r["ci_low"]) else math.nan
            row[f"{bench}_ci_high"] = r["ci_high"] * 100 if not _isnan(r["ci_high"]) else math.nan
            share = r.get("unparsable_share", math.nan)
            row[f"{bench}_unparsable"] = share * 100 if not _isnan(share) else math.nan
            undecided = r.get("undecided", 0)
            row[f"{bench}_undecided"] = 0 if _isnan(undecided) else int(undecided)
            for noise in ("seed_sd", "eval_se"):
                value = r.get(noise, math.nan)
                row[f"{bench}_{noise}"] = value * 100 if not _isnan(value) else math.nan
            if bench != "average":
                row[f"{bench}_problems"] = r["num_problems"]
                row[f"{bench}_samples"] = r["samples_per_problem"]
        rows.append(row)
    rows.sort(key=lambda r: (str(r["model"]), *_sort_key(r)))
    return pd.DataFrame(rows)


UNPARSABLE_NOTE = ("(x% no answer): share of responses in which the grader found no final answer, counted as "
                   "wrong; a low accuracy with a high share is a format failure rather than a wrong answer.")


def _unparsable_suffix(share: Any) -> str:
    """`` (2.5% no answer)`` beside an accuracy; nothing where the evaluation did not count it."""
    return "" if _isnan(share) else f" ({share:.1f}% no answer)"


UNDECIDED_NOTE = ("(n undecided): responses whose symbolic equivalence check timed out twice, counted as wrong; "
                  "shown only where there are any.")


def _undecided_suffix(count: Any) -> str:
    """`` (3 undecided)`` beside an accuracy whose responses the grader left undecided; nothing for none."""
    return "" if _isnan(count) or not count else f" ({int(count)} undecided)"


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
                          and not _isnan(first[f"{b}_problems"]))
        parts.append(f"\nAccuracy in %, pass@1 (mean over samples where a benchmark samples several). {sizes}. "
                     "Brackets: 95% interval (t over seeds with >= 2 seeds, else bootstrap over problems). "
                     f"{UNPARSABLE_NOTE}"
                     + (f" {UNDECIDED_NOTE}" if any(g.get(f"{b}_undecided", pd.Series([0])).fillna(0).sum()
                                                     for b in cols) else "") + "\n")
    return "".join(parts)


def _join_credit(wide: pd.DataFrame, credit: pd.DataFrame | None, columns: Sequence[str]) -> pd.DataFrame:
    """Mean over seeds of per-run credit columns, joined on the variant."""
    if credit is None or credit.empty or wide.empty:
        return wide
    credit = credit.copy()
    credit["_key"] = [_variant_key(r) for r in credit.to_dict("records")]
    means = credit.groupby("_key", sort=False)[list(columns)].mean()
    wide = wide.copy()
    wide_keys = [_variant_key(r) for r in wide.to_dict("records")]
    for c in columns:
        wide[c] = [means[c].get(k, math.nan) if k in means.index else math.nan for k in wide_keys]
    return wide


CREDIT_COLUMNS = (("ess_ratio_mean", "ESS ratio", 3), ("top_mass_mean", "top-10% mass", 3),
                  ("entropy_final", "final entropy", 3))


def mark_untrained(wide: pd.DataFrame, credit: pd.DataFrame) -> pd.DataFrame:
    """The guard against comparing untrained models: per variant, the steps with a non-zero advantage of
    each seed's run (``steps_with_advantage``, e.g. ``"18/20, 19/20"``) and how many of its runs trained
    nothing (``untrained_runs``: no step with a non-zero advantage, or weights equal to the base
    model's); the label of a variant with an untrained run says so."""
    credit = credit.copy()
    credit["_key"] = [_variant_key(r) for r in credit.to_dict("records")]
    wide = wide.copy()
    steps, untrained, labels = [], [], []
    for r in wide.to_dict("records"):
        runs = credit[credit["_key"] == _variant_key(r)].sort_values("seed")
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


def accuracy_table(acc: pd.DataFrame, benchmarks: Sequence[str], title: str, methods: Sequence[str] | None = None,
                   show: Sequence[str] = (), credit: pd.DataFrame | None = None,
                   keep=None, gate_tests: bool = False) -> tuple[pd.DataFrame, str]:
    """The main table, the gating and probe ablations and the controls: (wide CSV frame, Markdown).

    ``methods`` keeps only those methods (and the base model row, always first); ``keep`` is an optional
    row filter on the wide frame; ``credit`` (the per-run credit summary) adds the per-variant credit
    metrics and the training evidence of :func:`mark_untrained`. Every table shows the two noise sources
    of the average accuracy (SD over seeds, a run's binomial evaluation SE) and, where variants pair with
    GRPO, the paired t-test's p and the minimum detectable effect; ``gate_tests`` (the gating ablation)
    adds the direct paired tests of the bi-level gate against boost-only and suppress-only.
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
    wide, paired = _join_paired(wide, paired_accuracy_differences(acc, benchmarks))
    if paired:
        extra = (*extra, ("minus_grpo", "minus GRPO, paired", None), ("minus_grpo_p_cell", "p", None),
                 ("minus_grpo_mde_cell", "MDE 80%", None))
    if credit is not None and not credit.empty:
        wide = _join_credit(wide, credit, [c for c, _, _ in CREDIT_COLUMNS])
        wide = mark_untrained(wide, credit)
        extra = (*extra, ("steps_with_advantage", "steps A≠0", None), *CREDIT_COLUMNS)
    wide = wide.reset_index(drop=True)
    markdown = _accuracy_markdown(wide, benchmarks, title, extra)
    notes = (NOISE_NOTE + (PAIRED_NOTE if paired else "")
             + (UNTRAINED_NOTE if credit is not None and not credit.empty else ""))
    if gate_tests:
        markdown += gate_tests_text(acc, benchmarks)
    return wide, markdown + "\n" + notes


PAIRED_NOTE = ("minus GRPO, paired: the variant's average accuracy minus GRPO's on the same model, in points, over "
               "the seeds both ran (the same seed is the same prompts and first rollouts), mean [95% t-interval] "
               "(seeds; seeds won); `*`: the interval excludes 0. p: two-sided paired t-test, raw (the primary "
               "comparisons, Holm-corrected, are in the paired differences table; every other comparison is "
               "exploratory). MDE 80%: the smallest true difference this design detects with 80% power at "
               "two-sided 5%, (t(0.975, n-1) + t(0.8, n-1)) x SD of the paired differences / sqrt(n).\n")
NOISE_NOTE = ("seed SD / eval SE: the two noise sources of the average accuracy, in points. Seed SD: the SD of the "
              "per-seed accuracies (training noise with evaluation noise in it). Eval SE: a run's binomial "
              "standard error from its problems x samples, sqrt(p (1 - p) / (problems x samples)), the "
              "evaluation noise alone (for this fixed set of problems an upper bound, as problems differ in difficulty). "
              "Where the seed SD is much larger, seeds, not evaluation problems, limit the comparison.\n")


def _join_paired(wide: pd.DataFrame, diffs: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Per variant, its paired difference from GRPO (``diffs``, :func:`paired_accuracy_differences`) in
    points: numeric columns for the CSV and a ``minus_grpo`` cell for the Markdown; False when there is none."""
    if diffs.empty or wide.empty:
        return wide, False
    found = {_variant_key(r): r for r in diffs.to_dict("records")}
    wide = wide.copy()
    rows = [found.get(_variant_key(r)) for r in wide.to_dict("records")]
    for col in ("diff_mean", "ci_low", "ci_high"):
        wide[f"minus_grpo_{col.replace('diff_', '')}"] = [r[col] * 100 if r else math.nan for r in rows]
    wide["minus_grpo_seeds"] = [r["n_seeds"] if r else math.nan for r in rows]
    wide["minus_grpo_p"] = [r["p"] if r else math.nan for r in rows]
    wide["minus_grpo_sd"] = [r["sd_diff"] * 100 if r else math.nan for r in rows]
    wide["minus_grpo_mde"] = [r["mde"] * 100 if r else math.nan for r in rows]
    wide["minus_grpo"] = [_paired_cell(r) for r in rows]
    wide["minus_grpo_p_cell"] = [fmt_p(r["p"]) if r else "–" for r in rows]
    wide["minus_grpo_mde_cell"] = [fmt_num(r["mde"], 1, 100.0) if r else "–" for r in rows]
    return wide, True


def _paired_cell(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "–"
    cell = fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]) + ("*" if r["decided"] else "")
    return f"{cell} ({r['n_seeds']}; {r['wins']})"


def _p_mde_cell(r: Mapping[str, Any] | None) -> str:
    return "–" if r is None else f"p {fmt_p(r['p'])}; MDE {fmt_num(r['mde'], 1, 100.0)}"


def grid_table(acc: pd.DataFrame, benchmarks: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """tau x beta grid: CSV one row per (model, method, tau, beta) with every benchmark and the average;
    Markdown one matrix of the average accuracy (%) per model and method, tau down, beta across."""
    wide = accuracy_wide(acc[acc["method"] != "base"] if not acc.empty else acc, benchmarks, ("tau", "beta"))
    if wide.empty:
        return wide, "## tau x beta grid\n\nNo results.\n"
    wide = wide[wide["method"] != "grpo"].reset_index(drop=True)
    diffs = paired_accuracy_differences(acc, benchmarks)
    paired = {(r["model"], r["method"], r["tau"], r["beta"]): r for r in diffs.to_dict("records")}
    wide, _ = _join_paired(wide, diffs)
    parts = ["## tau x beta grid\n"]
    for (model, method), g in wide.groupby(["model", "method"], sort=False):
        taus = sorted(g["tau"].unique())
        betas = sorted(g["beta"].unique())
        headers = ["tau \\ beta", *[f"{b:g}" for b in betas]]
        rows = []
        for t in taus:
            row = [f"{t:g}"]
            for b in betas:
                cell = g[(g["tau"] == t) & (g["beta"] == b)]
                row.append(fmt_cell(cell["average"].iloc[0], cell["average_ci_low"].iloc[0],
                                    cell["average_ci_high"].iloc[0], scale=1.0) if len(cell) and "average" in cell else "–")
            rows.append(row)
        parts.append(f"\n### {model}, {METHOD_NAMES.get(method, method)}\n\n" + markdown_table(headers, rows))
        if paired:
            rows = [[f"{t:g}", *[_paired_cell(paired.get((model, method, t, b))) for b in betas]] for t in taus]
            parts.append(f"\nMinus GRPO, paired:\n\n" + markdown_table(headers, rows))
            rows = [[f"{t:g}", *[_p_mde_cell(paired.get((model, method, t, b))) for b in betas]] for t in taus]
            parts.append(f"\nMinus GRPO, paired: p (raw) and MDE 80%, points:\n\n" + markdown_table(headers, rows))
    parts.append("\nAverage accuracy over the benchmarks in % (95% interval over seeds where there are >= 2).\n")
    if paired:
        parts.append(PAIRED_NOTE)
    parts.append(strength_trends_text(acc, benchmarks))
    return wide, "".join(parts)


def strength_trends_text(acc: pd.DataFrame, benchmarks: Sequence[str]) -> str:
    """The grid's trend tests (:func:`oar.analysis.results.strength_trends`) as a Markdown section."""
    trends = strength_trends(acc, benchmarks)
    if trends.empty:
        return "\n### Trend over reshaping strength\n\nNot run: no grid variants with seeds.\n"
    rows = [[r["model"], METHOD_NAMES.get(r["method"], r["method"]), r["strength"],
             fmt_cell(r["slope"], r["ci_low"], r["ci_high"]), fmt_p(r["p"]), r["n"], r["blocks"]]
            for r in trends.to_dict("records")]
    return ("\n### Trend over reshaping strength\n\n"
            + markdown_table(["Model", "Method", "strength", "slope, points [95%]", "p", "runs", "blocks"], rows,
                             align="lllrrrr")
            + "\nLinear regression of a run's average accuracy on one strength setting with every (seed, other "
              "setting) pair its own intercept (block), so the slope compares cells of the same seed: points per "
              "doubling of beta (blocks seed x tau) and per unit of tau (blocks seed x beta); t-test on the "
              "slope with runs - blocks - 1 degrees of freedom. Exploratory: raw p. A negative slope with p < "
              "0.05 is the tested form of \"the stronger the reshaping, the lower the accuracy\".\n")


def gate_tests_text(acc: pd.DataFrame, benchmarks: Sequence[str]) -> str:
    """The gating ablation's direct paired tests (:func:`oar.analysis.results.gate_comparisons`)."""
    tests = gate_comparisons(acc, benchmarks)
    if tests.empty:
        return ("\n### Bi-level gate against boost-only and suppress-only\n\nNot run: the group has no bi-level "
                "variant beside tau 0 or tau 1.\n")
    rows = [[r["model"], METHOD_NAMES.get(r["method"], r["method"]), r["comparison"],
             fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]), fmt_p(r["p"]), fmt_num(r["sd_diff"], 1, 100.0),
             fmt_num(r["mde"], 1, 100.0), f"{r['wins']} of {r['n_seeds']}"] for r in tests.to_dict("records")]
    return ("\n### Bi-level gate against boost-only and suppress-only\n\n"
            + markdown_table(["Model", "Method", "comparison", "difference, points [95%]", "p", "SD of differences",
                              "MDE 80%", "seeds won"], rows, align="lllrrrrr")
            + "\nAverage accuracy of one gate minus another's over the seeds both ran, paired t-test; "
              "exploratory (raw p).\n")


def fmt_interval(s: Mapping[str, Any] | None, digits: int = 3) -> str:
    """``0.412 [0.301, 0.523]`` from a spread record (mean and 95% interval)."""
    s = s or {}
    return fmt_cell(s.get("mean"), s.get("ci_low"), s.get("ci_high"), scale=1.0, digits=digits)


BASELINE_NAMES = {"earliest_first": "earliest tokens first", "latest_first": "latest tokens first",
                  "chance": "chance (uniform top-k)"}


def recall_table(recall: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """Recall@10% per scorer with its 95% interval over responses, beside the trivial orders (earliest and
    latest tokens first) and chance, followed by the oracle's own sanity numbers."""
    lines = [(scorer, METHOD_NAMES.get(scorer, scorer), s) for scorer, s in recall["summary"].items()]
    lines += [(name, BASELINE_NAMES[name], s) for name, s in (recall.get("baselines") or {}).items()]
    lines.append(("chance", BASELINE_NAMES["chance"], recall.get("chance") or {}))
    rows = [{"scorer": key, "label": label, "recall_mean": s.get("mean"), "ci_low": s.get("ci_low"),
             "ci_high": s.get("ci_high"), "recall_std": s.get("std"), "n": s.get("n")} for key, label, s in lines]
    frame = pd.DataFrame(rows)
    md = markdown_table(["Scorer", "recall@10% [95% interval]", "std", "n"],
                        [[label, fmt_interval(s), fmt_num(s.get("std"), 3), s.get("n")] for _, label, s in lines])
    probe = PROBE_NAMES.get(recall.get("probe"), recall.get("probe"))
    oracle = recall.get("oracle") or {}
    note = (f"\n{recall['responses']} held-out responses ({oracle.get('responses_correct', '?')} with a correct answer, "
            f"{oracle.get('responses_incorrect', '?')} incorrect), {recall['empty_oracle']} with no oracle causal token. "
            f"Outcome probe of the scorers: {probe}. Intervals: t over responses.\n"
            f"\nOracle: intervention `{oracle.get('intervention')}`; it flips the answer at "
            f"{fmt_num(oracle.get('flip_rate'), 1, 100)}% of {oracle.get('positions', '?')} reasoning positions; "
            f"Spearman of oracle membership with relative position {fmt_num(oracle.get('position_spearman'), 2)} "
            "(near -1: the oracle mostly marks early tokens, which any early change derails; then "
            "'earliest tokens first' wins and recall says little about the scorers).\n")
    text = "## Causal-token recall\n\n" + md + note
    truth = recall.get("ground_truth")
    if truth:
        lines = [(scorer, METHOD_NAMES.get(scorer, scorer), s) for scorer, s in truth["summary"].items()]
        lines += [(name, BASELINE_NAMES[name], s) for name, s in (truth.get("baselines") or {}).items()]
        lines.append(("chance", BASELINE_NAMES["chance"], truth.get("chance") or {}))
        rows = [{"scorer": key, "label": label, "reference": "ground_truth", "recall_mean": s.get("mean"),
                 "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"), "recall_std": s.get("std"), "n": s.get("n")}
                for key, label, s in lines]
        frame = pd.concat([frame.assign(reference="oracle"), pd.DataFrame(rows)], ignore_index=True)
        agree = truth.get("oracle_agreement") or {}
        text += ("\n### Against the parsed decisive tokens (chain task)\n\n"
                 "The decisive tokens of each response are each step's relation (`=` or `~`) and the digits of its "
                 "result, found by parsing it (oar.data.chains): the only places where a sampled token decides "
                 "the answer.\n\n"
                 + markdown_table(["Scorer", "recall@10% [95% interval]", "std", "n"],
                                  [[label, fmt_interval(s), fmt_num(s.get("std"), 3), s.get("n")]
                                   for _, label, s in lines])
                 + f"\n\nThe intervention oracle against the same ground truth: precision "
                 f"{fmt_interval(agree.get('precision') or {})}, recall {fmt_interval(agree.get('recall') or {})}, "
                 f"Jaccard {fmt_interval(agree.get('jaccard') or {})} (means over {agree.get('responses', '?')} "
                 "responses, 95% t-intervals).\n")
        if truth.get("steps"):
            text += _step_attribution_text(truth["steps"])
    return frame, text


def _step_attribution_text(steps: Mapping[str, Any]) -> str:
    """Recall of each chain step's decisive tokens, and the weight on the first erring relation of wrong
    responses against the later correct ones (``oar.analysis.results.step_attribution``)."""
    by_step = steps.get("by_step") or {}
    numbers = sorted({int(k) for s in by_step.values() for k in s}, key=int)
    if not numbers:
        return ""
    rows = [[METHOD_NAMES.get(scorer, scorer)] + [fmt_interval(s.get(str(k)) or {}) for k in numbers]
            for scorer, s in by_step.items()]
    gate = steps.get("gate") or {}
    erring = steps.get("erring") or {}
    erring_rows = [[METHOD_NAMES.get(scorer, scorer), fmt_interval(e.get("erring_weight") or {}),
                    fmt_interval(e.get("later_correct_weight") or {}),
                    fmt_num((e.get("share_erring_heavier") or {}).get("mean"), 0, 100), e.get("responses")]
                   for scorer, e in erring.items()]
    pct = round(100 * float(steps.get("fraction", 0.1)))
    return (f"\n### Per chain step\n\nShare of step k's decisive tokens in each scorer's top {pct}% of the response "
            "(mean [95% interval] over responses):\n\n"
            + markdown_table(["Scorer"] + [f"step {k}" for k in numbers], rows)
            + f"\n\nWrong responses whose first sloppy step (`~`) is followed by an exact one (`=`): the gate's weight "
            f"(tau {gate.get('tau')}, beta {gate.get('beta')}) on the erring relation and the mean on the later "
            "correct relations, and the share of responses where the erring one weighs more:\n\n"
            + markdown_table(["Scorer", "erring `~`", "later `=`", "erring heavier, %", "responses"], erring_rows)
            + "\n")


def gradient_share_table(summaries: Mapping[str, Mapping[str, Any]]) -> tuple[pd.DataFrame, str]:
    """Where each chain policy's gradient lies in its own sampled responses: per token class, the share of
    tokens and the share of the summed ||e_y - pi|| (the size of the push one unit of advantage gives a
    sampled token; oar.training.pretrain.GradientShare), from the pretraining check's samples."""
    rows, md_rows = [], []
    for model, summary in summaries.items():
        check = ((summary.get("pretrain") or {}).get("check") or {})
        share = check.get("gradient_share")
        if not share:
            raise ValueError(f"model {model!r}: its summary has no gradient share (pretrained before it was measured?)")
        for name, c in share["classes"].items():
            rows.append({"model": model, "token_class": name, "token_share": c["token_share"],
                         "gradient_share": c["gradient_share"], "mean_norm": c["mean_norm"],
                         "responses": share["responses"], "tokens": share["tokens"],
                         "mean_completion_tokens": check.get("mean_completion_tokens")})
            md_rows.append([model, name, fmt_num(c["token_share"], 1, 100), fmt_num(c["gradient_share"], 1, 100),
                            fmt_num(c["mean_norm"], 3)])
    md = markdown_table(["Policy", "token class", "tokens, %", "gradient, %", "mean ||e_y - pi||"], md_rows)
    note = ("\nOn each policy's own samples at the training temperature (its pretraining check). Classes: forced "
            "(copied operands and results, punctuation, markers), remark (a remark's first word), distractor (a "
            "note's words), relation (`=` / `~`), result (a step's result digits), template (the concluding "
            "sentence and answer). GRPO gives every token of a response the same advantage; the gradient share "
            "says which tokens that credit actually moves, and so what any reshaping can move.\n")
    return pd.DataFrame(rows), "## Gradient share by token class\n\n" + md + note


def fidelity_table(fidelity: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    rows = []
    for probe, result in fidelity["probes"].items():
        for scorer, s in result["summary"].items():
            rows.append({"probe": probe, "scorer": scorer, "spearman_mean": s["spearman"]["mean"],
                         "spearman_ci_low": s["spearman"].get("ci_low"), "spearman_ci_high": s["spearman"].get("ci_high"),
                         "spearman_std": s["spearman"]["std"], "topk_overlap_mean": s["topk_overlap"]["mean"],
                         "topk_overlap_ci_low": s["topk_overlap"].get("ci_low"),
                         "topk_overlap_ci_high": s["topk_overlap"].get("ci_high"),
                         "topk_overlap_std": s["topk_overlap"]["std"], "n": s["spearman"]["n"],
                         "n_undefined": s["spearman"]["n_undefined"],
                         "scoring_wall_s": (result.get("wall_s") or {}).get(scorer)})
    frame = pd.DataFrame(rows)
    ref = METHOD_NAMES.get(fidelity["reference"], fidelity["reference"])
    md = markdown_table(
        ["Probe", "Scorer", f"Spearman with {ref} [95%]", "top-10% overlap [95%]", "n", "undefined", "scoring s"],
        [[PROBE_NAMES.get(r["probe"], r["probe"]), METHOD_NAMES.get(r["scorer"], r["scorer"]),
          fmt_cell(r["spearman_mean"], r["spearman_ci_low"], r["spearman_ci_high"], scale=1.0, digits=3),
          fmt_cell(r["topk_overlap_mean"], r["topk_overlap_ci_low"], r["topk_overlap_ci_high"], scale=1.0, digits=3),
          r["n"], r["n_undefined"], fmt_num(r["scoring_wall_s"], 1)] for r in rows],
        align="llrrrrr")
    return frame, (f"## Proxy fidelity (against {ref})\n\n" + md +
                   "\nMean over held-out responses with a 95% t-interval; n responses with a defined value.\n")


def cost_table(cost: pd.DataFrame, train_threads: int | None = None) -> tuple[pd.DataFrame, str]:
    """Median step times per method. With ``train_threads`` (threads of one training job) the table says
    when its times compare across methods: only when the training steps ran alone."""
    cost = cost.copy()
    cost["label"] = [METHOD_NAMES.get(m, m) for m in cost["method"]]
    cost = cost.sort_values(["model", "method"], key=lambda s: s.map(
        lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99) if s.name == "method" else s)
    parts = ["## Training cost\n"]
    for model, g in cost.groupby("model", sort=False):
        parts.append(f"\n### {model}\n\n" + markdown_table(
            ["Method", "step s (median)", "x GRPO", "generate s", "score s", "update s", "peak MiB",
             "scoring peak MiB", "steps"],
            [[r["label"], fmt_num(r["step_time_s"], 2), fmt_num(r["ratio_to_grpo"], 2) + "x",
              fmt_num(r["time_generate_s"], 2), fmt_num(r["time_score_s"], 2), fmt_num(r["time_update_s"], 2),
              fmt_num(r["peak_memory_mb"], 0), fmt_num(r["score_peak_memory_mb"], 0),
              r["steps"]] for r in g.to_dict("records")]))
    if train_threads is not None:
        parts.append(f"\nTraining jobs ran with {train_threads} thread(s). **Step times compare across methods only "
                     "if no other job ran beside a training job**, which holds when a training job takes all of "
                     "Snakemake's `--cores` (resources.train.threads = cores) or runs "
                     "on a node of its own; otherwise use bench/step_time.py for ratios.")
    parts.append("\nMedians over every logged training step of every run of the method. The paper reports "
                 "1.4x (OAR-G) and 4.2x (OAR-P) on GPUs. Peak memory is the largest over the method's runs: "
                 "CUDA allocator peak on GPU, resident set on CPU; the scoring peak is the peak within the "
                 "importance-scoring phase alone.\n")
    return cost.reset_index(drop=True), "".join(parts)


def threshold_rule(reward_threshold: float | None, reward_gain: float | None) -> str:
    """How the reward threshold of "steps to threshold" was set, for a table's note."""
    if reward_gain is not None:
        return f"the model's starting reward (mean first-step reward of its runs) + {reward_gain:g}"
    return f"{reward_threshold:g}" if reward_threshold is not None else "the threshold"


def _threshold_of(frame: pd.DataFrame, model: str) -> str:
    values = frame.loc[frame["model"] == model, "threshold"].dropna() if "threshold" in frame else []
    return f" (reward threshold {values.iloc[0]:.3f})" if len(values) else ""


def _steps_cell(median: Any, steps: Any) -> str:
    """A Kaplan-Meier median; ``> N`` when half the runs had not reached the threshold by their last step N."""
    if _isnan(median):
        return "not reached" if _isnan(steps) else f"> {int(steps)}"
    return f"{median:g}"


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
    from oar.analysis.results import PAIRED_METRICS

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
                             _holm_interval(r) if primary_row else "–",
                             fmt_num(r.get("sd_diff"), 1, 100.0), mde_cell, int(r["n_seeds"]), int(r["wins"])])
            s = m[m["metric"] == "steps_to_threshold"]
            if len(s):
                r = s.iloc[0]
                n, steps = int(r["n_seeds"]), r.get("steps")
                step_rows.append([label, f"{int(r['method_reached'])}/{n} vs {int(r['baseline_reached'])}/{n}",
                                  f"{_steps_cell(r['method_mean'], steps)} vs {_steps_cell(r['baseline_mean'], steps)}",
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


def _holm_interval(r: Mapping[str, Any]) -> str:
    low, high = r.get("ci_low_holm", math.nan), r.get("ci_high_holm", math.nan)
    if _isnan(low) or _isnan(high):
        return "–"
    return f"[{fmt_num(low, 1, 100.0)}, {fmt_num(high, 1, 100.0)}]"


PAIRED_METRICS_SHORT = {"final_accuracy": "final accuracy", "reward_auc": "reward AUC",
                        "steps_to_threshold": "steps to threshold"}


def length_sweep_table(outcomes: pd.DataFrame, rule: str | None = None,
                       base: Mapping[str, float] | None = None,
                       lengths: Mapping[str, float] | None = None) -> tuple[pd.DataFrame, str]:
    """The length sweep: per method and policy (one per response length), final held-out accuracy (%)
    ``mean [95% t-interval]`` over seeds, and steps to the reward threshold as censored data: the
    Kaplan-Meier median and restricted mean, with how many seeds reached the threshold. ``base``
    (model -> accuracy, 0-1) adds the untrained policy's row and
    ``lengths`` (model -> mean response tokens) a row of response lengths."""
    models = list(dict.fromkeys(outcomes["model"]))
    rows_out = []
    for (model, method), g in outcomes.groupby(["model", "method"], sort=False):
        acc = seed_interval(list(g["final_accuracy"] * 100))
        km = censored_steps(g)
        rows_out.append({"model": model, "method": method, "n_seeds": len(g),
                         "accuracy": acc[0], "accuracy_ci_low": acc[1], "accuracy_ci_high": acc[2],
                         "seed_sd": _seed_sd(g["final_accuracy"] * 100),
                         "steps_median_km": km["median"], "steps_rmst": km["rmst"],
                         "reached": km["reached"], "steps": int(g["steps"].max())})
    frame = pd.DataFrame(rows_out)
    headers = ["Method", *[f"{m}: accuracy, %" for m in models], *[f"{m}: steps to threshold" for m in models]]
    rows = []
    if lengths:
        rows.append(["response tokens (base policy)", *[fmt_num(lengths.get(m), 0) for m in models], *[""] * len(models)])
    if base:
        rows.append([METHOD_NAMES["base"], *[fmt_num(base.get(m), 1, 100.0) for m in models], *["–"] * len(models)])
    if "threshold" in outcomes:
        thresholds = outcomes.groupby("model", sort=False)["threshold"].first()
        rows.append(["reward threshold", *[""] * len(models), *[fmt_num(thresholds.get(m), 3) for m in models]])
    for method in sorted(frame["method"].unique(), key=lambda m: _sort_key({"method": m})):
        cells = [METHOD_NAMES.get(method, method)]
        acc_cells, step_cells = [], []
        for m in models:
            r = frame[(frame["model"] == m) & (frame["method"] == method)]
            if r.empty:
                acc_cells.append("–")
                step_cells.append("–")
                continue
            r = r.iloc[0]
            acc_cells.append(fmt_cell(r["accuracy"], r["accuracy_ci_low"], r["accuracy_ci_high"], scale=1.0)
                             + f" ({r['n_seeds']})")
            step_cells.append(f"{_steps_cell(r['steps_median_km'], r['steps'])}; {fmt_num(r['steps_rmst'], 1)}"
                              + f" ({r['reached']}/{r['n_seeds']})")
        rows.append(cells + acc_cells + step_cells)
    what = rule or "the threshold"
    md = ("## Length sweep\n\n" + markdown_table(headers, rows)
          + "\nOne policy per response length (the same task with more remarks that cannot change the answer). "
            "Accuracy: held-out accuracy after training, mean [95% t-interval] over seeds (seeds). Steps to "
            f"threshold: first step whose trailing mean reward reaches {what}; a run that never reaches it is "
            "censored at its last step, so the cell is the Kaplan-Meier median (\"> N\": half the runs had not "
            "reached it by step N); the restricted mean to the last step (runs that reached it / seeds). No "
            "t-interval on censored steps. Each method minus GRPO over paired seeds, with p-values and the "
            "minimum detectable effect: the paired differences table.\n")
    return frame, md


def decisive_table(readings: pd.DataFrame, trends: pd.DataFrame, baseline: str = "grpo") -> tuple[pd.DataFrame, str]:
    """The decisive run read by its rules (:mod:`oar.analysis.decisive`): per distractor level, each arm
    minus the baseline with the raw and Holm-level intervals, Holm p, the MDE, its share of the better
    truth gate's gain and the reading; then each arm's change from the lowest level to the highest."""
    base = METHOD_NAMES.get(baseline, baseline)
    rows = []
    for r in readings.to_dict("records"):
        share = "–" if _isnan(r["share_of_upper_bound"]) else f"{100 * r['share_of_upper_bound']:.0f}%"
        primary = r["role"] == "primary"
        rows.append([f"{r['model']} ({r['level']})", METHOD_NAMES.get(r["method"], r["method"]),
                     "primary" if primary else "secondary",
                     fmt_cell(r["diff_mean"], r["ci_low"], r["ci_high"]) + (" *" if r["beats"] else ""),
                     _holm_interval(r) if primary else "–", fmt_p(r["p_holm"] if primary else r["p"]),
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
        f"{base} where no truth gate beats it was added after the truth gates' results had been read. A truth gate scores the parsed decisive tokens through the paper's gate: "
        f"the best a scorer could do through it. Where the better truth gate does not beat {base}, reshaping "
        f"through the gate does not help at that level by more than the MDE, and a scorer's difference there says "
        f"nothing about its scoring, unless it falls below {base}: then its scores cost accuracy that right scores "
        f"through the same gate do not. Where a truth gate wins and a scorer does not, that scorer fails. Share: the "
        f"scorer's mean difference over the better truth gate's, where that gate wins. Beats: Holm p below 5% "
        f"with a positive mean for a primary comparison (`analysis.primary`), the raw interval above 0 otherwise "
        f"(`*`). A truth gate's gain that grows with the level is the paper's mechanism holding where its premise "
        f"does. Interval at Holm's level and MDE: as in the paired differences table.\n")
    return pd.concat([readings.assign(kind="level"), trends.assign(kind="trend")], ignore_index=True), "".join(parts)


def write_table(frame: pd.DataFrame, markdown: str, csv_path: str | os.PathLike, md_path: str | os.PathLike) -> None:
    """Write the CSV and the Markdown, each to a temporary name first and then renamed."""
    for path, write in ((csv_path, lambda f: frame.to_csv(f, index=False, float_format="%.6g")),
                        (md_path, lambda f: f.write(markdown))):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with open(fd, "w", encoding="utf-8", newline="") as f:
                write(f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def upper_bound_table(reading: Mapping[str, Any], design: Mapping[str, Any], planned: Mapping[str, Any] | None = None,
                      declared: str = "") -> tuple[pd.DataFrame, str]:
    """The upper-bound test (:mod:`oar.analysis.upper_bound`) at each declared look: pairs, the boundary and
    its nominal level, the mean gain with its repeated one-sided upper limit, the t-test's one-sided p, the
    decision, and the declared sensitivity analysis (Wilcoxon p, Hodges-Lehmann estimate and upper limit);
    then the derailment outcome per arm; then the planned power and time; then where the rules were
    declared (``declared``: :func:`oar.analysis.provenance.declarations_text`)."""
    arm, base = METHOD_NAMES.get(design["arm"], design["arm"]), METHOD_NAMES.get(design["baseline"], design["baseline"])
    margin = 100 * float(design["margin"])
    rows, frame_rows = [], []
    for r in reading["looks"]:
        frame_rows.append({"kind": "look", **r})
        if "mean" not in r:
            rows.append([r["look"], r["pairs"], f"{r['boundary_z']:.3f} ({r['nominal_alpha']:.4f})", "–", "–", "–",
                         r["status"], "–", "–"])
            continue
        rows.append([r["look"], r["pairs"], f"{r['boundary_z']:.3f} ({r['nominal_alpha']:.4f})",
                     f"{fmt_num(r['mean'], 2, 100.0)} (SD {fmt_num(r['sd'], 2, 100.0)})",
                     f"< {fmt_num(r['upper'], 2, 100.0)}", fmt_p(r["p"]), r["status"], fmt_p(r["wilcoxon_p"]),
                     f"{fmt_num(r['hl_estimate'], 2, 100.0)} (< {fmt_num(r['hl_upper'], 2, 100.0)})"])
    parts = [f"## The upper-bound test: {arm} minus {base} on {design['model']}\n\n",
             f"Non-superiority: H0 the gain in final accuracy is at least +{margin:.1f} points, one-sided alpha "
             f"{design['alpha']}, {reading['seeds_run']} of {reading['seeds_declared']} declared seeds run.\n\n",
             markdown_table(["look", "pairs", "boundary Z (nominal level)", "mean gain, points",
                             "repeated upper limit", "p (one-sided)", "decision", "Wilcoxon p",
                             "Hodges-Lehmann (upper limit)"], rows, align="rrrrrrlrr")]
    excluded = [p["seed"] for p in reading["pairs"] if p["excluded"]]
    rule = (design.get("derailment") or {}).get("exclude")
    parts.append("\nExclusion rule: " + ("none declared." if not rule else
                 f"`{rule['metric']}` at step {rule['step']} "
                 + (f"below {rule['below']}" if rule.get("below") is not None else f"above {rule['above']}")
                 + f"; seeds excluded from both arms: {excluded or 'none'}.") + "\n")
    d = reading["derailment"]
    below = 100 * float(design["derailment"]["outcome"]["below_base"])
    frame_rows.append({"kind": "derailment", **{k: v for k, v in d.items()}})
    if d["n"]:
        parts.append(f"\nDerailment (an outcome, not an exclusion): a run whose final accuracy falls more than "
                     f"{below:.1f} points below the untrained policy's ({fmt_num(reading['base_accuracy'], 1, 100.0)}%). "
                     + markdown_table(["arm", "derailed runs", "rate"],
                                      [[arm, f"{d[design['arm']]}/{d['n']}", f"{100 * d[design['arm']] / d['n']:.0f}%"],
                                       [base, f"{d[design['baseline']]}/{d['n']}",
                                        f"{100 * d[design['baseline']] / d['n']:.0f}%"]])
                     + f"\nSeeds where only {arm} derailed: {d['arm_only']}; only {base}: {d['baseline_only']}; "
                     f"exact McNemar p {fmt_p(d['p_mcnemar'])}.\n")
    if planned:
        scen = "; ".join(f"SD {100 * s['sd']:.2f} points: power {s['power']:.2f}, expected {s['expected_pairs']:.0f} pairs"
                         for s in planned["scenarios"])
        hours = ", ".join(f"{h:.1f} h" for h in planned["hours_at_look"])
        parts.append(f"\nPlanned at a true gain of {100 * design['planning']['assumed_gain']:.1f} points: {scen}. "
                     f"Time to each look on {design['planning']['cores']} cores at "
                     f"{design['planning']['minutes_per_pair']:g} job-minutes a pair: {hours}; "
                     f"{planned['pairs_in_budget']} pairs fit in {design['planning']['max_hours']:g} hours.\n")
    parts.append(
        "\nEach look reads the first `pairs` declared seeds. Boundary: O'Brien-Fleming by "
        + ("Lan-DeMets alpha spending" if design["spending"] == "lan_demets" else "O'Brien and Fleming's constant")
        + ", on the Z scale, with the nominal one-sided level the look's paired t-test must reach. Repeated "
        "upper limit: the one-sided upper confidence limit at that level (below the margin exactly when the "
        "look stops the test; valid over all looks together). A look that stops the test decides the gain is "
        f"below +{margin:.1f} points; a final look that does not leaves a gain of +{margin:.1f} or more "
        "possible. Wilcoxon p: the signed-rank test of the differences minus the margin, one-sided; "
        "Hodges-Lehmann: the median of the Walsh averages with its upper limit at the same level (declared "
        "sensitivity analysis: where it disagrees with the t-test, say so).\n")
    parts.append(declared)
    return pd.DataFrame(frame_rows), "".join(parts)


CONTRAST_CLAIMS = {"greater": "above", "less": "below", "two-sided": "different from 0",
                   "equivalent": "equivalent within the margin"}


def mechanism_table(contrasts: pd.DataFrame, design: Mapping[str, Any], declared: str = "") -> tuple[pd.DataFrame, str]:
    """The declared contrasts (:func:`oar.analysis.mechanism.read_contrasts`): each with its mean and 95%
    interval (points), the declared test, its p and Holm p over the family, and what is decided. An
    equivalence is claimed only where its TOST decides it."""
    rows = []
    for r in contrasts.to_dict("records"):
        margin = r.get("margin")
        what = CONTRAST_CLAIMS[r["test"]]
        if r["test"] in ("greater", "less"):
            what += f" {fmt_num(margin or 0.0, 1, 100.0)}"
        elif r["test"] == "equivalent":
            what = f"equivalent within ±{fmt_num(margin, 1, 100.0)}"
        if r["decided"]:
            verdict = f"decided: {what}"
        elif r["test"] == "equivalent":
            verdict = "not shown equivalent (no claim either way)"
        else:
            verdict = "not decided"
        interval = fmt_cell(r["mean"], r["ci_low"], r["ci_high"])
        if r["test"] == "equivalent":
            interval += f"; 90% [{fmt_num(r['tost_low'], 1, 100.0)}, {fmt_num(r['tost_high'], 1, 100.0)}]"
        rows.append([r["name"], f"{r['plus']} - {r['minus']}", r["test"], interval, fmt_p(r["p"]),
                     fmt_p(r["p_holm"]), fmt_num(r["mde"], 1, 100.0), int(r["n_seeds"]), verdict])
    md = (f"## Declared contrasts on {design['model']}\n\n"
          + markdown_table(["contrast", "arms", "test", "mean, points [95%]", "p", "Holm p", "MDE 80%", "seeds",
                            "decision"], rows, align="lllrrrrrl")
          + f"\nEach contrast is the sum of the plus arms' final accuracies minus the minus arms' on the same seed, "
            f"declared with its test before the runs. greater/less: one-sided paired t-test against the margin; "
            f"two-sided: paired t-test of 0; equivalent: two one-sided tests within ±margin (its 90% interval "
            f"inside the margins), the only test by which a table claims equivalence. Holm p: over the "
            f"{len(contrasts)} declared contrasts at alpha {design.get('alpha', 0.05)}; a contrast that is not "
            f"decided says only that this design did not detect it (MDE 80%: two-sided 5%).\n" + declared)
    return contrasts, md
