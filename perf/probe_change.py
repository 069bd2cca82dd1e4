"""What the probe's construction changes: the authors' probe against the project's, on the same responses.

The authors' probe runs the reasoning up to the box and appends "Therefore, the final answer is \\boxed{"
after it, and substitutes the pad id; the project's continues the response's own concluding statement
and substitutes a token the policy has seen (docs/method.md, sections 2 and 4). This scores the held-out
responses of a workflow run three ways (the authors' probe; the response's own conclusion with the pad
id; the project's) with one scorer and reports:

- the gate's mean weight on each chain step's relation token (``=`` or ``~``), step by step;
- recall@10% of the parsed decisive tokens (against each probe's own reasoning);
- the token that most often holds a response's highest score.

    .venv/bin/python perf/probe_change.py --model results/models/chain_f1 \\
        --responses results/analysis/heldout/responses.jsonl --substitute .
"""

from __future__ import annotations

import argparse
import json
import statistics

from harness import add_model, add_threads
from oar.analysis.chain_truth import ground_truth_tokens, step_tokens
from oar.files import read_jsonl
from oar.method.gate import gate
from oar.method.importance import score
from oar.method.scorer_config import ScorerConfig
from oar.method.metrics import default_k, recall_at_k
from oar.method.probes import build_probes
from oar.models.loading import load_model


def weights_of(model, tokenizer, rows, scorer, own: bool, substitute: str, tau: float, beta: float):
    probes = build_probes(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows],
                          own_conclusion=own, substitute=substitute)
    out = []
    for probe in probes:
        s = score(scorer, model, [probe], ScorerConfig(probe="as_mean"))
        w = gate(s.scores, s.reasoning_mask, tau, beta)[0, : probe.reasoning_len]
        out.append((probe, s.scores[0, : probe.reasoning_len], w))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(p)
    p.add_argument("--responses", required=True, help="held-out responses (results/analysis/heldout/responses.jsonl)")
    p.add_argument("--scorer", default="oar_p")
    p.add_argument("--substitute", default=".", help="the project's substitute (the authors' is the pad id)")
    p.add_argument("--tau", type=float, default=0.4)
    p.add_argument("--beta", type=float, default=2.0)
    add_threads(p, 1)
    args = p.parse_args()

    model, tokenizer = load_model(args.model, dtype="float32", threads=args.threads)
    rows = read_jsonl(args.responses)
    variants = {"authors (template appended, pad)": (False, "pad"),
                "own conclusion, pad": (True, "pad"),
                f"project (own conclusion, {args.substitute!r})": (True, args.substitute)}
    report = {}
    for name, (own, substitute) in variants.items():
        by_step: dict[int, list[float]] = {}
        recall, top = [], []
        for probe, s, w in weights_of(model, tokenizer, rows, args.scorer, own, substitute, args.tau, args.beta):
            tokens = [tokenizer.decode([t]) for t in probe.response_ids[: probe.reasoning_len]]
            _, relations = step_tokens(tokens)
            for k, (_, pos) in enumerate(relations, start=1):
                if pos is not None:
                    by_step.setdefault(k, []).append(float(w[pos]))
            [truth] = ground_truth_tokens([{"index": 0, "reasoning_len": len(tokens), "reasoning_tokens": tokens}])
            if truth["causal"]:
                recall.append(recall_at_k(s.tolist(), truth["causal"], default_k(len(tokens))))
            top.append(tokens[int(s.argmax())])
        report[name] = {
            "relation_weight_by_step": {k: round(statistics.mean(v), 3) for k, v in sorted(by_step.items())},
            "recall_at_10": round(statistics.mean(recall), 3) if recall else None,
            "most_common_top_token": max(set(top), key=top.count) if top else None,
            "responses": len(recall),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
