"""Is the bi-level gate better than a one-sided one? The gating ablation's direct paired tests: per model
and method, the bi-level gate (a training tau neither 0 nor 1) minus boost-only (tau 0) and minus
suppress-only (tau 1) in accuracy averaged over the benchmarks, over the seeds both ran. Exploratory:
raw p-values. The gating ablation's accuracy table itself is :func:`oar.analysis.accuracy.accuracy_table`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, fmt_p, is_missing, markdown_table
from oar.analysis.labels import GATE_NAMES, METHOD_NAMES
from oar.analysis.run_outputs import variant_seed_averages
from oar.analysis.statistics import paired_t


def gate_comparisons(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The gating ablation's direct tests: per model and method, the bi-level gate (the training tau,
    neither 0 nor 1) minus boost-only (tau 0) and minus suppress-only (tau 1) in accuracy averaged over
    ``benchmarks``, paired over the seeds both ran (:func:`oar.analysis.statistics.paired_t`: mean,
    95% t-interval, p, SD of the differences, MDE at 80% power, wins). Exploratory: raw p-values."""
    columns = ["model", "method", "comparison", "n_seeds", "diff_mean", "ci_low", "ci_high", "p", "sd_diff",
               "mde", "wins"]
    rows = []
    by_variant = variant_seed_averages(acc, benchmarks) if not acc.empty else {}
    for (model, method) in dict.fromkeys((k[0], k[1]) for k in by_variant):
        gates = {float(k[2]): v for k, v in by_variant.items() if k[:2] == (model, method) and not is_missing(k[2])}
        bilevel = [t for t in gates if t not in GATE_NAMES]
        for other, name in GATE_NAMES.items():
            if len(bilevel) != 1 or other not in gates:
                continue
            a, b = gates[bilevel[0]], gates[other]
            seeds = sorted(set(a) & set(b))
            d = [a[s] - b[s] for s in seeds]
            t = paired_t(d)
            rows.append({"model": model, "method": method,
                         "comparison": f"bi-level (tau {bilevel[0]:g}) minus {name} (tau {other:g})",
                         "n_seeds": len(seeds), "diff_mean": t["mean"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                         "p": t["p"], "sd_diff": t["sd"], "mde": t["mde"], "wins": sum(x > 0 for x in d)})
    return pd.DataFrame(rows, columns=columns)


def gate_tests_text(acc: pd.DataFrame, benchmarks: Sequence[str]) -> str:
    """The gating ablation's direct paired tests (:func:`gate_comparisons`) as a Markdown section."""
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
