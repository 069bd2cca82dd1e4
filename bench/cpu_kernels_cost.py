"""What pinning the CPU kernels' instruction set costs: the testbed's step time at each level against none.

Trains each method a few steps from a `make run` run's settings (as bench/testbed_step_time.py does, one
process per run, one torch thread), once per level in ``--levels`` (``none``: what the CPU offers) and
repeat, the levels alternating so that slow spells of a shared machine fall on all, and prints the
median step time over steps 2.. and its ratio to the unpinned run of the same repeat.

    PYTHONPATH=$PWD .venv/bin/python bench/cpu_kernels_cost.py \\
        --settings results/runs/chain_f1/grpo-seed0/settings.yaml --model results/models/chain_f1 \\
        --train-file results/data/chain_train.jsonl --methods grpo oar_p --levels none avx2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

STEP_TIME = Path(__file__).resolve().with_name("testbed_step_time.py")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=Path, required=True, help="a testbed run's settings.yaml")
    p.add_argument("--model", required=True)
    p.add_argument("--train-file", required=True)
    p.add_argument("--methods", nargs="+", default=["grpo", "oar_p"])
    p.add_argument("--levels", nargs="+", default=["none", "avx2"], help="OAR_CPU_KERNELS values; none: unset")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    base = yaml.safe_load(args.settings.read_text())
    base |= {"model": str(Path(args.model).resolve()), "train_file": str(Path(args.train_file).resolve())}
    base["trainer"] = {**base["trainer"], "max_steps": args.steps, "save_steps": 10**6}
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.repeats):
            for method in args.methods:
                for level in args.levels:
                    env = {k: v for k, v in os.environ.items() if k != "OAR_CPU_KERNELS"}
                    if level != "none":
                        env["OAR_CPU_KERNELS"] = level
                    out = Path(work) / f"{method}-{level}-{rep}"
                    settings = {**base, "method": method, "run_id": f"bench/{method}-{level}-{rep}"}
                    subprocess.run([sys.executable, str(STEP_TIME), "--one-run", json.dumps(settings), str(out),
                                    "--threads", "1"], check=True, capture_output=True, env=env)
                    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
                    step = statistics.median(line["step_time_s"] for line in lines)
                    times.setdefault((method, level), []).append(step)
                    print(f"{method} {level} repeat {rep + 1}: {step:.3f} s a step", file=sys.stderr, flush=True)
    print(f"\nmedian step time over steps 2..{args.steps}, 1 thread; per repeat; ratio to the unpinned run "
          "of the same repeat\n")
    print("| method | level | step s | / unpinned |")
    print("|---|---|---:|---:|")
    for (method, level), steps in times.items():
        ratios = [s / n for s, n in zip(steps, times.get((method, "none"), []))]
        ratio = " / ".join(f"{r:.2f}" for r in ratios) + (f" (median {statistics.median(ratios):.2f})" if ratios else "")
        print(f"| {method} | {level} | {' / '.join(f'{s:.2f}' for s in steps)} | {ratio} |")


if __name__ == "__main__":
    main()
