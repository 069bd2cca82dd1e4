"""How does accuracy change with the reshaping strength? The tau x beta grid: the average accuracy of
every (tau, beta) cell, each cell minus GRPO on paired seeds, and the trend tests of accuracy on log2(beta)
and on tau with the seed and the other setting as blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from oar.analysis.accuracy import (
    PAIRED_NOTE,
    accuracy_wide,
    join_paired,
    p_mde_cell,
    paired_accuracy_differences,
    paired_cell,
)
from oar.analysis.formatting import fmt_cell, fmt_p, is_missing, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.run_outputs import variant_seed_averages
from oar.analysis.statistics import blocked_trend


def strength_trends(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The grid's trend tests: per model and method, the slope of accuracy (averaged over ``benchmarks``)
    on each reshaping strength with the other setting and the seed as blocks
    (:func:`oar.analysis.statistics.blocked_trend`): on log2(beta), the gate's sharpness, per doubling
    (blocks: seed x tau), and on tau, the share of tokens pushed down (blocks: seed x beta). A negative
    slope with p < 0.05 is the tested form of "the stronger the reshaping, the lower the accuracy"."""
    columns = ["model", "method", "strength", "slope", "ci_low", "ci_high", "p", "n", "blocks"]
    rows = []
    by_variant = variant_seed_averages(acc, benchmarks) if not acc.empty else {}
    for (model, method) in dict.fromkeys((k[0], k[1]) for k in by_variant):
        cells = [(float(k[2]), float(k[3]), seed, v) for k, seeds in by_variant.items()
                 if k[:2] == (model, method) and not is_missing(k[2]) and not is_missing(k[3])
                 for seed, v in seeds.items()]
        if not cells:
            continue
        tau, beta, seed, value = map(list, zip(*cells))
        for name, x, block in (("log2(beta), per doubling", [math.log2(b) for b in beta], zip(seed, tau)),
                               ("tau, per unit", tau, zip(seed, beta))):
            t = blocked_trend(x, value, list(block))
            rows.append({"model": model, "method": method, "strength": name, **{k: t[k] for k in columns[3:]}})
    return pd.DataFrame(rows, columns=columns)


def strength_trends_text(acc: pd.DataFrame, benchmarks: Sequence[str]) -> str:
    """The grid's trend tests (:func:`strength_trends`) as a Markdown section."""
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


def grid_table(acc: pd.DataFrame, benchmarks: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """tau x beta grid: CSV one row per (model, method, tau, beta) with every benchmark and the average;
    Markdown one matrix of the average accuracy (%) per model and method, tau down, beta across."""
    wide = accuracy_wide(acc[acc["method"] != "base"] if not acc.empty else acc, benchmarks, ("tau", "beta"))
    if wide.empty:
        return wide, "## tau x beta grid\n\nNo results.\n"
    wide = wide[wide["method"] != "grpo"].reset_index(drop=True)
    diffs = paired_accuracy_differences(acc, benchmarks)
    paired = {(r["model"], r["method"], r["tau"], r["beta"]): r for r in diffs.to_dict("records")}
    wide, _ = join_paired(wide, diffs)
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
                                    cell["average_ci_high"].iloc[0], scale=1.0)
                           if len(cell) and "average" in cell else "–")
            rows.append(row)
        parts.append(f"\n### {model}, {METHOD_NAMES.get(method, method)}\n\n" + markdown_table(headers, rows))
        if paired:
            rows = [[f"{t:g}", *[paired_cell(paired.get((model, method, t, b))) for b in betas]] for t in taus]
            parts.append("\nMinus GRPO, paired:\n\n" + markdown_table(headers, rows))
            rows = [[f"{t:g}", *[p_mde_cell(paired.get((model, method, t, b))) for b in betas]] for t in taus]
            parts.append("\nMinus GRPO, paired: p (raw) and MDE 80%, points:\n\n" + markdown_table(headers, rows))
    parts.append("\nAverage accuracy over the benchmarks in % (95% interval over seeds where there are >= 2).\n")
    if paired:
        parts.append(PAIRED_NOTE)
    parts.append(strength_trends_text(acc, benchmarks))
    return wide, "".join(parts)
