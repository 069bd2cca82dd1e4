"""Median training-step time of the testbed's own runs, GRPO beside the OAR methods, in one script.

Trains each method a few steps from the settings of a `make run` run (``--settings``: a run's
``settings.yaml``; the model and training file given here), each in its own process with ``--threads``
torch threads, and prints the median step time over steps 2.. with its generation and scoring parts and
the ratio to GRPO's. Repeats alternate the methods, so slow spells of a shared machine fall on all.

    PYTHONPATH=$PWD .venv/bin/python perf/testbed_step_time.py \\
        --settings results/runs/chain_f1/oar_g-tau0.4-beta2.0-as_mean-seed0/settings.yaml \\
        --model results/models/chain_f1 --train-file results/data/chain_train.jsonl --methods grpo oar_g
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from harness import add_repeats, add_threads, markdown_table

PARTS = ("step_time_s", "time_generate_s", "time_score_s")


def one_run(settings: dict, out: str, threads: int) -> None:
    import torch

    from oar.training.run import train_run

    torch.set_num_threads(threads)
    train_run(settings, out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=Path, help="a testbed run's settings.yaml")
    p.add_argument("--model")
    p.add_argument("--train-file")
    p.add_argument("--methods", nargs="+", default=["grpo", "oar_g"])
    p.add_argument("--steps", type=int, default=8)
    add_repeats(p, 2, "runs of each method, the methods alternating")
    add_threads(p, 1)
    p.add_argument("--one-run", nargs=2, metavar=("SETTINGS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_run:
        one_run(json.loads(args.one_run[0]), args.one_run[1], args.threads)
        return

    base = yaml.safe_load(args.settings.read_text())
    base |= {"model": str(Path(args.model).resolve()), "train_file": str(Path(args.train_file).resolve())}
    base["trainer"] = {**base["trainer"], "max_steps": args.steps, "save_steps": 10**6}
    medians: dict[str, list[dict[str, float]]] = {m: [] for m in args.methods}
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.repeats):
            for method in args.methods:
                out = Path(work) / f"{method}-{rep}"
                settings = {**base, "method": method, "run_id": f"perf/{method}-{rep}"}
                subprocess.run([sys.executable, __file__, "--one-run", json.dumps(settings), str(out),
                                "--threads", str(args.threads)], check=True, capture_output=True)
                lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
                medians[method].append({k: statistics.median(row.get(k) or 0.0 for row in lines) for k in PARTS})
                print(f"{method} repeat {rep + 1}: "
                      + ", ".join(f"{k} {v:.3f}" for k, v in medians[method][-1].items()),
                      file=sys.stderr, flush=True)
    grpo = [r["step_time_s"] for r in medians.get("grpo", [])]
    print(f"\nmedian over steps 2..{args.steps}, {args.threads} thread(s); per repeat, then their mean\n")
    table_rows = []
    for method, rows in medians.items():
        ratios = [r["step_time_s"] / g for r, g in zip(rows, grpo)] if grpo else []
        cells = [" / ".join(f"{r[k]:.2f}" for r in rows) for k in PARTS]
        ratio = " / ".join(f"{x:.2f}" for x in ratios) + (f" (mean {statistics.mean(ratios):.2f})" if ratios else "")
        table_rows.append([method, *cells, ratio])
    print(markdown_table(["method", "step s", "generate s", "score s", "step / GRPO (same repeat)"], table_rows,
                         "lrrrr"))


if __name__ == "__main__":
    main()
