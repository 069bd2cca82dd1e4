"""Which oracle intervention keeps the model on task? Flip rate, position bias and a null check per intervention.

The oracle marks reasoning position j causal when an intervention at j, followed by greedy re-decoding,
changes the final answer. A good intervention changes the answer at some positions and not at others,
for reasons of content; a bad one derails the model wherever it lands (high flip rate, strongly tied to
position). The null intervention (token j kept) must flip nothing: it checks the re-decoding itself.

    .venv/bin/python bench/oracle_interventions.py --model results/models/smollm2 \
        --responses results/analysis/heldout/responses.jsonl --out results/bench/oracle_interventions.md

The responses file is the workflow's held-out set (``workflow_scripts/heldout.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from oar.analysis.causal_recall import oracle_sanity
from oar.analysis.oracle import INTERVENTIONS, causal_tokens
from oar.files import read_jsonl
from oar.method.probes import build_probes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--responses", required=True, help="held-out responses JSONL (workflow_scripts/heldout.py)")
    p.add_argument("--interventions", nargs="+", default=list(INTERVENTIONS), choices=INTERVENTIONS)
    p.add_argument("--slack-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="Markdown table (also printed); a .json beside it holds the raw numbers")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    rows = read_jsonl(args.responses)
    probes = build_probes(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows])
    results = {}
    for intervention in args.interventions:
        start = time.perf_counter()
        oracle = []
        for row, probe in zip(rows, probes):
            res = causal_tokens(model, tokenizer, probe, slack_tokens=args.slack_tokens, batch_size=args.batch_size,
                                intervention=intervention)
            oracle.append({"index": row["index"], "reasoning_len": res.reasoning_len, "causal": res.causal,
                           "correct": row.get("correct"), "intervention": intervention})
        sanity = oracle_sanity(oracle)
        sanity["wall_s"] = time.perf_counter() - start
        sanity["causal"] = {o["index"]: o["causal"] for o in oracle}
        results[intervention] = sanity
        print(intervention, {k: v for k, v in sanity.items() if k != "causal"}, file=sys.stderr, flush=True)
    first = next(iter(results.values()))
    lines = [
        f"{len(rows)} held-out responses ({first['responses_correct']} correct, {first['responses_incorrect']} "
        f"incorrect), {first['positions']} reasoning positions; greedy re-decoding, slack {args.slack_tokens} tokens.",
        "",
        "| intervention | flip rate | flip rate per response [95%] | Spearman(membership, position) | s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        per = r["flip_rate_per_response"]
        lines.append(f"| {name} | {r['flip_rate']:.3f} | {per['mean']:.3f} [{per['ci_low']:.3f}, {per['ci_high']:.3f}] | "
                     f"{r['position_spearman']:.2f} | {r['wall_s']:.0f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
