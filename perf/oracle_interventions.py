"""Which oracle intervention keeps the model on task? Flip rate, position bias and a null check per intervention.

The oracle marks reasoning position j causal when an intervention at j, followed by greedy re-decoding,
changes the final answer. A good intervention changes the answer at some positions and not at others,
for reasons of content; a bad one derails the model wherever it lands (high flip rate, strongly tied to
position). The null intervention (token j kept) must flip nothing: it checks the re-decoding itself.

    .venv/bin/python perf/oracle_interventions.py --model results/models/smollm2 \
        --responses results/analysis/heldout/responses.jsonl --out results/perf/oracle_interventions.md

The responses file is the workflow's held-out set (``workflow_scripts/heldout.py``).
"""

from __future__ import annotations

import argparse
import sys
import time

from harness import add_model, add_out, add_threads, markdown_table, write_table
from oar.analysis.causal_recall import oracle_sanity
from oar.analysis.oracle import INTERVENTIONS, causal_tokens
from oar.files import read_jsonl
from oar.method.probes import build_probes
from oar.models.loading import load_model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model(p)
    p.add_argument("--responses", required=True, help="held-out responses JSONL (workflow_scripts/heldout.py)")
    p.add_argument("--interventions", nargs="+", default=list(INTERVENTIONS), choices=INTERVENTIONS)
    p.add_argument("--slack-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=32)
    add_threads(p, 1)
    add_out(p, "Markdown table (also printed); a .json beside it holds the raw numbers")
    args = p.parse_args(argv)
    model, tokenizer = load_model(args.model, dtype="float32", threads=args.threads)
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
    per = {name: r["flip_rate_per_response"] for name, r in results.items()}
    table = (f"{len(rows)} held-out responses ({first['responses_correct']} correct, {first['responses_incorrect']} "
             f"incorrect), {first['positions']} reasoning positions; greedy re-decoding, slack {args.slack_tokens} "
             "tokens.\n\n" + markdown_table(
                 ["intervention", "flip rate", "flip rate per response [95%]", "Spearman(membership, position)", "s"],
                 [[name, f"{r['flip_rate']:.3f}",
                   f"{per[name]['mean']:.3f} [{per[name]['ci_low']:.3f}, {per[name]['ci_high']:.3f}]",
                   f"{r['position_spearman']:.2f}", f"{r['wall_s']:.0f}"] for name, r in results.items()]))
    print(table)
    if args.out:
        write_table(args.out, table, results)


if __name__ == "__main__":
    main()
