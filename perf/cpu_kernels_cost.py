"""What pinning the CPU kernels' instruction set costs: the testbed's step time at each level against none.

Trains each method a few steps from a `make run` run's settings (as perf/testbed_step_time.py does, one
process per run, one torch thread), once per level in ``--levels`` (``none``: what the CPU offers) and
repeat, the levels alternating, and prints the CPU seconds of each run (the process's own, so that
other work on a shared machine does not count; start-up, about the same at every level, included)
with its ratio to the unpinned run of the same repeat, and the median wall-clock step time.

    PYTHONPATH=$PWD .venv/bin/python perf/cpu_kernels_cost.py \\
        --settings results/runs/chain_f1/grpo-seed0/settings.yaml --model results/models/chain_f1 \\
        --train-file results/data/chain_train.jsonl --methods grpo oar_p --levels none avx2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from harness import add_model, add_repeats, markdown_table

STEP_TIME = Path(__file__).resolve().with_name("testbed_step_time.py")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=Path, required=True, help="a testbed run's settings.yaml")
    add_model(p)
    p.add_argument("--train-file", required=True)
    p.add_argument("--methods", nargs="+", default=["grpo", "oar_p"])
    p.add_argument("--levels", nargs="+", default=["none", "avx2"], help="OAR_CPU_KERNELS values; none: unset")
    p.add_argument("--steps", type=int, default=4)
    add_repeats(p, 2, "runs of each method and level, the levels alternating")
    args = p.parse_args()
    base = yaml.safe_load(args.settings.read_text())
    base |= {"model": str(Path(args.model).resolve()), "train_file": str(Path(args.train_file).resolve())}
    base["trainer"] = {**base["trainer"], "max_steps": args.steps, "save_steps": 10**6}
    times: dict[tuple[str, str], list[float]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.repeats):
            for method in args.methods:
                for level in args.levels:
                    env = {k: v for k, v in os.environ.items() if k != "OAR_CPU_KERNELS"}
                    if level != "none":
                        env["OAR_CPU_KERNELS"] = level
                    out = Path(work) / f"{method}-{level}-{rep}"
                    settings = {**base, "method": method, "run_id": f"perf/{method}-{level}-{rep}"}
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    subprocess.run([sys.executable, str(STEP_TIME), "--one-run", json.dumps(settings), str(out),
                                    "--threads", "1"], check=True, capture_output=True, env=env)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][1:]
                    step = statistics.median(line["step_time_s"] for line in lines)
                    times.setdefault((method, level), []).append(cpu)
                    walls.setdefault((method, level), []).append(step)
                    print(f"{method} {level} repeat {rep + 1}: {cpu:.1f} CPU s, {step:.3f} s a step",
                          file=sys.stderr, flush=True)
    print(f"\nCPU seconds of a {args.steps}-step run (start-up included), 1 thread, per repeat; their ratio to "
          f"the unpinned run of the same repeat; median wall-clock step time over steps 2..{args.steps}\n")
    table_rows = []
    for (method, level), cpus in times.items():
        ratios = [c / n for c, n in zip(cpus, times.get((method, "none"), []))]
        ratio = " / ".join(f"{r:.2f}" for r in ratios) + (f" (median {statistics.median(ratios):.2f})"
                                                          if ratios else "")
        table_rows.append([method, level, " / ".join(f"{c:.1f}" for c in cpus), ratio,
                      " / ".join(f"{w:.2f}" for w in walls[(method, level)])])
    print(markdown_table(["method", "level", "CPU s a run", "/ unpinned", "step s (wall)"], table_rows, "llrrr"))


if __name__ == "__main__":
    main()
