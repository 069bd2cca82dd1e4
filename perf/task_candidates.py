"""Which training task can the packaged model learn from? Pass rate and mixed groups per candidate.

GRPO learns only from groups whose G rewards are not all equal (mixed groups): every other group has
advantage 0. For each candidate task this samples G completions per prompt from the base model at the
training settings (temperature 1, a completion budget) and reports the sampled pass rate, the share of
mixed groups, the share of completions that finished within the budget and their mean length.

    .venv/bin/python perf/task_candidates.py --model results/models/smollm2 --prompts 12 --group 8 \
        --max-new-tokens 160 --out results/perf/task_candidates.md

Candidates: the easiest GSM8K train problems (one calculation in the reference solution, shortest
question first), MATH train level 1, and the generated problems of ``oar.data.synthetic`` (bare expressions,
one- and two-operation word problems); ``--temperatures`` measures each at several sampling temperatures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from harness import add_model, add_out, add_threads, markdown_table, write_table
from oar.data import synthetic
from oar.data.datasets import load_dataset_records
from oar.data.sources import iter_jsonl, packaged_path
from oar.evaluation.generation import TransformersGenerator
from oar.grading.grader import grade
from oar.prompting import build_prompts


def gsm8k_easy(n: int) -> list[dict]:
    """GSM8K train problems whose reference solution has one calculation, shortest question first."""
    raw = {row.data["question"]: row.data["answer"] for row in iter_jsonl(packaged_path("gsm8k_train"))}
    records = load_dataset_records("gsm8k_train").records
    easy = [r for r in records if raw[r["problem"]].count("<<") == 1]
    return sorted(easy, key=lambda r: len(r["problem"]))[:n]


def math_level1(n: int) -> list[dict]:
    records = load_dataset_records("math_train", skip_bad_rows=True).records
    return [r for r in records if r["level"] == 1][:n]


def generated(n: int, level: int) -> list[dict]:
    return [{"problem": p.problem, "answer": str(p.answer)} for p in synthetic.generate(1000 + level, n, (level,))]


CANDIDATES = {
    "gsm8k_easy": gsm8k_easy,
    "math_level1": math_level1,
    "arith_facts": lambda n: generated(n, 0),  # single-digit facts (drawn with repeats)
    "arith_1op": lambda n: generated(n, 1),
    "arith_2op": lambda n: generated(n, 2),
}


def measure(gen: TransformersGenerator, problems: list[dict], group: int, max_new_tokens: int, seed: int,
            temperature: float = 1.0) -> dict:
    prompts = build_prompts([p["problem"] for p in problems], gen.tokenizer, gen.chat)
    start = time.perf_counter()
    outs = gen.generate(prompts, n=group, temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    wall = time.perf_counter() - start
    rewards, finished, lengths = [], [], []
    for problem, samples in zip(problems, outs):
        rewards.append([float(grade(s.text, problem["answer"]).correct) for s in samples])
        finished += [s.finish_reason == "stop" for s in samples]
        lengths += [s.num_tokens for s in samples]
    mixed = [0 < sum(r) < len(r) for r in rewards]
    return {
        "prompts": len(problems),
        "pass_rate": sum(map(sum, rewards)) / sum(map(len, rewards)),
        "mixed_groups": sum(mixed) / len(mixed),
        "finished": sum(finished) / len(finished),
        "mean_tokens": sum(lengths) / len(lengths),
        "tokens_per_s": sum(lengths) / wall,
        "wall_s": wall,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model(p)
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    p.add_argument("--prompts", type=int, default=12)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=32)
    add_threads(p, 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperatures", type=float, nargs="+", default=[1.0], help="sampling temperatures to measure")
    add_out(p, "Markdown table (also printed); a .json beside it holds the raw numbers")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = TransformersGenerator(args.model, batch_size=args.batch_size, device="cpu", dtype="float32")
    rows = {}
    for name in args.candidates:
        for temperature in args.temperatures:
            key = f"{name} (T {temperature:g})"
            rows[key] = measure(gen, CANDIDATES[name](args.prompts), args.group, args.max_new_tokens, args.seed,
                                temperature)
            print(key, json.dumps(rows[key]), file=sys.stderr, flush=True)
    table = (f"G = {args.group} samples per prompt, at most {args.max_new_tokens} new tokens, "
             f"{args.prompts} prompts per candidate, seed {args.seed}.\n\n" + markdown_table(
                 ["candidate", "pass rate", "mixed groups", "finished", "mean tokens", "tokens/s"],
                 [[name, f"{r['pass_rate']:.3f}", f"{r['mixed_groups']:.2f}", f"{r['finished']:.2f}",
                   f"{r['mean_tokens']:.0f}", f"{r['tokens_per_s']:.0f}"] for name, r in rows.items()]))
    print(table)
    if args.out:
        write_table(args.out, table, rows)


if __name__ == "__main__":
    main()
