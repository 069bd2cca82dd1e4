"""Where trained chain policies err, step by step: read from a workflow's cached evaluation samples.

For every evaluated run of the given policies, each sampled response's equations are judged against their
own written operands (``oar.analysis.step_errors``): a sloppy step (``~``) or an exact-looking wrong
one (``=`` with a wrong result). Prints, per policy and method, the share of each step that is wrong in
each way, as the mean over the method's seeds (each seed's share over its own samples), beside the
number of seeds. Nothing is trained or sampled: it reads ``<results>/eval/<model>/<run>/<benchmark>/samples.jsonl``.
The mechanism run's report (``mechanism.md``) has the same counts with intervals and their declared tests.

    PYTHONPATH=$PWD .venv/bin/python perf/step_errors.py --results results-decisive \\
        --models chain_d0 chain_d8 --benchmark chain5_test
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from oar.analysis.step_errors import read_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results-decisive")
    parser.add_argument("--models", nargs="+", default=["chain_d0", "chain_d8"])
    parser.add_argument("--benchmark", default="chain5_test")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    for model in args.models:
        by_method: dict[str, list[dict[str, float]]] = defaultdict(list)
        runs = sorted(Path(args.results, "eval", model).glob(f"*/{args.benchmark}/samples.jsonl"))
        if not runs:
            raise SystemExit(f"no evaluation samples under {Path(args.results, 'eval', model)}")
        for samples in runs:
            method = samples.parent.parent.name.split("-")[0]  # <method>[-<settings>]-seed<seed>: variants pooled
            by_method[method].append(read_run(samples, args.steps))
        header = " | ".join(f"step {k}" for k in range(1, args.steps + 1))
        print(f"\n{model}: wrong `=` % (sloppy `~` %) per step, mean over seeds\n")
        print(f"| method | seeds | {header} | wrong `=`, all steps | sloppy `~`, all steps |")
        print("| --- | ---: |" + " ---: |" * (args.steps + 2))

        def mean(shares, column):
            return statistics.mean(s[column] for s in shares) * 100

        for method, shares in by_method.items():
            cells = [f"{mean(shares, f'wrong_{k}'):.1f} ({mean(shares, f'sloppy_{k}'):.1f})"
                     for k in range(1, args.steps + 1)]
            print(f"| {method} | {len(shares)} | " + " | ".join(cells)
                  + f" | {mean(shares, 'wrong_all'):.1f} | {mean(shares, 'sloppy_all'):.1f} |")


if __name__ == "__main__":
    main()
