"""Paired differences between two trained arms of a workflow (neither of them the baseline), from its
cached accuracy table: per policy, arm A minus arm B in final accuracy on the seeds both ran, with the
paired t-interval, p, the SD of the differences, the MDE at 80% power and the seeds A won. Raw,
unadjusted: a secondary reading beside the workflow's tables, which compare each arm with the baseline.

    PYTHONPATH=$PWD .venv/bin/python perf/arm_differences.py --results results-decisive \\
        --arm truth_final --against truth truth_graded oar_p oar_g
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from oar.analysis.statistics import paired_t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results-decisive")
    parser.add_argument("--arm", required=True, help="method A (for example truth_final)")
    parser.add_argument("--against", nargs="+", required=True, help="methods B")
    args = parser.parse_args()
    table = Path(args.results, "analysis", "accuracy", "main.csv")
    if not table.exists():
        raise SystemExit(f"{table} is missing: run the workflow's accuracy rule first")
    accuracy = pd.read_csv(table)
    accuracy = accuracy[accuracy["method"] != "base"]
    for method in [args.arm, *args.against]:
        if method not in set(accuracy["method"]):
            raise SystemExit(f"{table} has no method {method!r} (it has {sorted(set(accuracy['method']))})")
    print("| policy | difference | points [95%] | p | SD | MDE | won |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for model, rows in accuracy.groupby("model"):
        by_seed = rows.pivot_table(index="seed", columns="method", values="pass@1") * 100
        for other in args.against:
            if args.arm not in by_seed or other not in by_seed:
                continue
            diff = (by_seed[args.arm] - by_seed[other]).dropna()
            t = paired_t(diff.tolist())
            print(f"| {model} | {args.arm} - {other} | {t['mean']:+.1f} [{t['ci_low']:+.1f}, {t['ci_high']:+.1f}] "
                  f"| {t['p']:.3f} | {t['sd']:.1f} | {t['mde']:.1f} | {int((diff > 0).sum())} of {t['n']} |")


if __name__ == "__main__":
    main()
