"""Where trained chain policies err, step by step: read from a workflow's cached evaluation samples.

For every evaluated run of the given policies, each sampled response's equations are judged against their
own written operands (``oar.data.chains.step_errors``): a sloppy step (``~``) or an exact-looking wrong
one (``=`` with a wrong result). Prints, per policy and method, the share of each step that is wrong in
each way, as the mean over the method's seeds (each seed's share over its own samples), beside the
number of seeds. Nothing is trained or sampled: it reads ``<results>/eval/<model>/<run>/<benchmark>/samples.jsonl``.

    PYTHONPATH=$PWD .venv/bin/python bench/step_errors.py --results results-decisive \\
        --models chain_d0 chain_d8 --benchmark chain5_test
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from oar.data.chains import FINAL, step_errors


def run_shares(samples: Path, steps: int) -> dict[str, list[float]]:
    """One run's share of responses whose step k is sloppy / wrong, k = 1..steps (over responses that
    have a step k)."""
    counts = {kind: [0] * steps for kind in ("sloppy", "wrong")}
    present = [0] * steps
    conclusion = FINAL.split("\\")[0].rstrip()
    with samples.open() as f:
        for line in f:
            response = json.loads(line)["response"]
            for k, error in enumerate(step_errors(response.split(conclusion)[0])[:steps]):
                present[k] += 1
                if error:
                    counts[error][k] += 1
    return {kind: [c / n if n else float("nan") for c, n in zip(row, present)] for kind, row in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results-decisive")
    parser.add_argument("--models", nargs="+", default=["chain_d0", "chain_d8"])
    parser.add_argument("--benchmark", default="chain5_test")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    for model in args.models:
        by_method: dict[str, list[dict[str, list[float]]]] = defaultdict(list)
        runs = sorted(Path(args.results, "eval", model).glob(f"*/{args.benchmark}/samples.jsonl"))
        if not runs:
            raise SystemExit(f"no evaluation samples under {Path(args.results, 'eval', model)}")
        for samples in runs:
            method = samples.parent.parent.name.split("-")[0]
            by_method[method].append(run_shares(samples, args.steps))
        header = " | ".join(f"step {k + 1}" for k in range(args.steps))
        print(f"\n{model}: wrong `=` % (sloppy `~` %) per step, mean over seeds\n")
        print(f"| method | seeds | {header} | wrong `=`, all steps | sloppy `~`, all steps |")
        print("| --- | ---: |" + " ---: |" * (args.steps + 2))
        for method, shares in by_method.items():
            cells = []
            for k in range(args.steps):
                wrong = statistics.mean(s["wrong"][k] for s in shares) * 100
                sloppy = statistics.mean(s["sloppy"][k] for s in shares) * 100
                cells.append(f"{wrong:.1f} ({sloppy:.1f})")
            wrong_all, sloppy_all = (statistics.mean(statistics.mean(s[kind]) for s in shares) * 100
                                     for kind in ("wrong", "sloppy"))
            print(f"| {method} | {len(shares)} | " + " | ".join(cells) + f" | {wrong_all:.1f} | {sloppy_all:.1f} |")


if __name__ == "__main__":
    main()
