"""The wait for the slowest rank, measured: a two-process training run on CPU (gloo, ``accelerate launch``)
with only the rows of mixed groups scored, its logged ``time_score_max_s`` / ``time_score_s`` against
``oar.planning.rank_wait.slowest_rank_factor`` at the run's own scored share.

A tiny random model never answers, so the reward is a parity of the completion text (as
tests/test_multiprocess_training.py does): each of a group's two completions is rewarded 0 or 1 at about
even odds, so about half the groups are mixed and scored, whole, and the ranks score different numbers of
rows. A wrapper records, per rank and step, the rows it scored and the seconds its scoring call took.

    PYTHONPATH=$PWD .venv/bin/python perf/rank_wait.py --steps 30 --out results/perf/rank_wait.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from harness import add_out, markdown_table, write_table
from oar.planning.rank_wait import logged_ratio, slowest_rank_factor
from oar.models.sources import prepare_model

RANKS = 2
WRAPPER = """
import json, os, runpy, sys, time, zlib
from oar.training import grpo_trainer, run

record_dir = sys.argv[1]
sys.argv = sys.argv[2:]  # train.py and its arguments, as if launched directly

def parity_reward(*grading, **more_grading):
    def parity(completions, **kwargs):
        return [float(zlib.crc32(c[-1]["content"].encode()) % 2) for c in completions]
    return parity
run.correctness_reward = parity_reward

token_weights = grpo_trainer.OARTrainer._token_weights
def recorded(self, output):
    started = time.perf_counter()
    weights, counts = token_weights(self, output)
    line = {"step": self.state.global_step, "rows": counts["rows"], "scored": counts["scored"],
            "seconds": time.perf_counter() - started}
    with open(os.path.join(record_dir, f"rank{self.accelerator.process_index}.jsonl"), "a") as handle:
        handle.write(json.dumps(line) + "\\n")
    return weights, counts
grpo_trainer.OARTrainer._token_weights = recorded
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def launch(work: Path, settings: Path, out: Path, records: Path, port: int) -> None:
    wrapper = work / "recording_train.py"
    wrapper.write_text(WRAPPER)
    accelerate = Path(sys.executable).with_name("accelerate")
    command = [str(accelerate), "launch", "--multi_gpu", "--num_processes", str(RANKS), "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
               str(wrapper), str(records), str(Path(__file__).resolve().parents[1] / "workflow_scripts" / "train.py"),
               "--settings", str(settings), "--out-dir", str(out)]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the two-process run failed ({done.returncode}):\n{done.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="oar_p", choices=("oar_p", "oar_g"))
    parser.add_argument("--steps", type=int, default=30, help="training steps (the first is left out as warm-up)")
    parser.add_argument("--batch", type=int, default=8, help="completions per process and step")
    parser.add_argument("--num-generations", type=int, default=2, help="G: completions per prompt (a group)")
    parser.add_argument("--max-completion-length", type=int, default=24)
    parser.add_argument("--port", type=int, default=29531)
    parser.add_argument("--work", type=Path, default=Path("results/perf/rank_wait"))
    add_out(parser, "Markdown table to write", type=Path)
    args = parser.parse_args()
    if args.batch % args.num_generations:
        parser.error("--batch must be a multiple of --num-generations: each rank holds whole groups")
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / "tiny"
    if not (model / "config.json").exists():
        prepare_model("tiny", model)
    train_file = args.work / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + {2 * i}?", "answer": str(3 * i)})
                                  + "\n" for i in range(64)))
    settings = args.work / "settings.yaml"
    settings.write_text(yaml.safe_dump({
        "run_id": f"rank-wait-{args.method}", "method": args.method, "model": str(model), "seed": 0,
        "train_file": str(train_file), "oar": {"score_all": False},
        "trainer": {"max_steps": args.steps, "save_steps": 10 * args.steps, "num_generations": args.num_generations,
                    "per_device_train_batch_size": args.batch, "max_completion_length": args.max_completion_length},
    }))
    out, records = args.work / "run", args.work / "records"
    for stale in (out, records):
        subprocess.run(["rm", "-rf", str(stale)], check=True)
    records.mkdir()
    launch(args.work, settings, out, records, args.port)

    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]  # step 1: warm-up
    ranks = [{r["step"]: r for r in map(json.loads, (records / f"rank{k}.jsonl").read_text().splitlines())}
             for k in range(RANKS)]
    steps = sorted(set(ranks[0]) & set(ranks[1]))[1:]
    share = statistics.mean(line["frac_scored"] for line in logged)
    groups = args.batch // args.num_generations
    rows_max = sum(max(r[s]["scored"] for r in ranks) for s in steps)
    rows_mean = sum(statistics.mean(r[s]["scored"] for r in ranks) for s in steps)
    recorded_max = sum(max(r[s]["seconds"] for r in ranks) for s in steps)
    recorded_mean = sum(statistics.mean(r[s]["seconds"] for r in ranks) for s in steps)
    # the run's own scoring time of a call: fixed + per row x rows, fitted over the calls that scored rows
    called = [(r[s]["scored"], r[s]["seconds"]) for s in steps for r in ranks if r[s]["scored"] > 0]
    slope, intercept = statistics.linear_regression([x for x, _ in called], [t for _, t in called])
    fixed_groups = intercept / (slope * args.num_generations)  # the fixed time in groups' time
    table = [
        ["predicted: E[most groups a rank scores] / E[groups a rank scores] (binomial, at the run's share)",
         f"{slowest_rank_factor(groups, share, RANKS):.3f}"],
        [f"predicted for the time: the same with the run's fixed time a call ({intercept * 1e3:.0f} ms beside "
         f"{slope * 1e3:.1f} ms a row)", f"{slowest_rank_factor(groups, share, RANKS, fixed_groups):.3f}"],
        ["rows: the most-scoring rank's rows over the mean rank's, summed over the steps",
         f"{rows_max / rows_mean:.3f}"],
        ["logged: time_score_max_s / time_score_s, summed over the steps (metrics.jsonl)",
         f"{logged_ratio(logged):.3f}"],
        ["recorded: the slowest rank's scoring seconds over the mean rank's, summed (the wrapper's clock)",
         f"{recorded_max / recorded_mean:.3f}"],
    ]
    head = (f"{args.method}, {RANKS} processes (gloo, CPU, 1 thread each), {groups} groups of "
            f"{args.num_generations} a process, {len(logged)} steps after the first; mean scored share "
            f"{share:.3f} (frac_scored)")
    text = head + "\n\n" + markdown_table(["ratio", "value"], table, "lr") + "\n"
    print(text)
    if args.out:
        write_table(args.out, text, {"share": share, "groups_per_rank": groups, "ranks": RANKS, "steps": len(logged),
                                     "rows": [[ranks[k][s] for k in range(RANKS)] for s in steps],
                                     "logged": logged})


if __name__ == "__main__":
    main()
