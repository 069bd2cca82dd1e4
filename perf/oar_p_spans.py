"""OAR-P over spans and with a local window against exact OAR-P on the testbed: fidelity, decisive-token
recall and cost.

Exact OAR-P substitutes one reasoning token at a time and reruns the suffix after it: about R^2 / 2
token-forwards per response. With ``training.oar.span_tokens`` w it substitutes w consecutive tokens at
once and gives each the span's divergence: about R^2 / (2 w). This scores the held-out responses of a
workflow run (sampled at the training temperature from the pretrained chain policy) with exact OAR-P, with
every width of ``--widths`` and with the reasoning's own sentences as spans (each ends at a ``.`` or a
line break), and with every window of ``--windows`` (``training.oar.window_tokens`` K: after each
one-token substitution only K reasoning tokens and the conclusion are recomputed, about R x (K + tail)
token-forwards), and reports per variant:

- the Spearman correlation of each response's scores with exact OAR-P's (median and mean over responses;
  responses whose variant scores are constant have none and are counted);
- recall@10% of the parsed decisive tokens (each step's relation and result), as oar.analysis.causal_recall
  computes it for the causal-recall table (ties, which spans create, go to the earlier token);
- the ceiling of any span scorer on the same spans (windows: none, their scores are not tied): the Spearman of exact OAR-P's scores max-pooled over
  each span (constant within a span, as every span score is) with exact OAR-P's own;
- the cost: tokens run in clean-forward equivalents (``span_forward_equivalents``) and the measured
  scoring time (median over repeats, in this process), both relative to exact;
- the token-forwards of one response at R = 1,024 and 3,072 reasoning tokens for each width and window.

    PYTHONPATH=$PWD .venv/bin/python perf/oar_p_spans.py --model results/models/chain_f1 \\
        --responses results/analysis/heldout/responses.jsonl --substitute .
"""  # noqa: E501

from __future__ import annotations

import argparse
import math
import statistics

import torch

from harness import add_model, add_out, add_repeats, add_threads, markdown_table, timed
from oar.analysis.chain_truth import ground_truth_tokens
from oar.files import atomic_write_json, read_jsonl
from oar.method.substitution import (reasoning_spans, span_forward_equivalents, span_substitution_scores,
                                     window_substitution_scores)
from oar.method.metrics import default_k, recall_at_k, spearman
from oar.method.probes import build_probes, resolve_probe_kind
from oar.models.loading import load_model

# conclude + answer tokens after the reasoning in the token-forward counts at long lengths (the testbed's
# own conclusion and a short answer: about this many)
TAIL_TOKENS = 16


def sentence_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """The reasoning's own sentences as spans: a span ends after a token that ends with '.', '!', '?' or
    holds a line break; the rest of the reasoning is the last span."""
    spans, a = [], 0
    for j, t in enumerate(tokens):
        if "\n" in t or t.rstrip().endswith((".", "!", "?")):
            spans.append((a, j + 1))
            a = j + 1
    if a < len(tokens):
        spans.append((a, len(tokens)))
    return spans


def suffix_token_forwards(r: int, width: int, tail: int = TAIL_TOKENS) -> int:
    """Token-forwards of the substituted suffixes of one response with R = ``r`` reasoning tokens: each
    span runs from its start to the probe's end (the shared prefix comes from the clean KV cache)."""
    return sum(r - a + tail for a, _ in reasoning_spans(r, width))


def window_token_forwards(r: int, window: int, tail: int = TAIL_TOKENS) -> int:
    """Token-forwards of the windowed copies of one response: each runs its window (cut at the end of the
    reasoning) and the tail."""
    return sum(min(window, r - a) + tail for a in range(r))


def window_forward_equivalents(probe, kind: str, window: int) -> float:
    """Tokens the windowed scorer runs for one probe (clean forward included), in clean-forward
    equivalents, as ``span_forward_equivalents`` counts exact OAR-P's (padding left out)."""
    total = len(probe.ids(kind))
    tail = total - probe.reasoning_start - probe.reasoning_len
    return (total + window_token_forwards(probe.reasoning_len, window, tail)) / total


def span_pooled(scores: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
    """Exact scores made constant within each span (the span's largest): what the best span scorer
    could give, so its Spearman to exact bounds any span variant's."""
    pooled = scores.clone()
    for a, b in spans:
        pooled[a:b] = scores[a:b].max()
    return pooled


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(p, "the pretrained chain policy (results/models/chain_f1)")
    p.add_argument("--responses", required=True, help="held-out responses (results/analysis/heldout/responses.jsonl)")
    p.add_argument("--substitute", default=".", help="what replaces a reasoning token (the testbed's: '.')")
    p.add_argument("--probe", default="as_mean")
    p.add_argument("--widths", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    p.add_argument("--windows", type=int, nargs="*", default=[8, 16, 32],
                   help="local windows K (training.oar.window_tokens) to compare, one-token substitution")
    p.add_argument("--no-sentences", action="store_true", help="leave out the sentence spans")
    p.add_argument("--chunk-tokens", type=int, default=512)
    add_repeats(p, 3)
    add_threads(p, 1)
    add_out(p, "optional JSON file for the results")
    args = p.parse_args()

    model, tokenizer = load_model(args.model, dtype="float32", threads=args.threads)
    rows = read_jsonl(args.responses)
    probes = build_probes(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows],
                          own_conclusion=True, substitute=args.substitute)
    keep = [i for i, pr in enumerate(probes) if pr.reasoning_len > 1]
    probes = [probes[i] for i in keep]
    kinds = [resolve_probe_kind(pr, args.probe) for pr in probes]
    tokens = [[tokenizer.decode([t]) for t in pr.response_ids[: pr.reasoning_len]] for pr in probes]
    truth = ground_truth_tokens([{"index": i, "reasoning_len": len(t), "reasoning_tokens": t}
                                 for i, t in enumerate(tokens)])

    variants: dict[str, list[list[tuple[int, int]]]] = {
        f"w={w}": [reasoning_spans(pr.reasoning_len, w) for pr in probes] for w in args.widths}
    if not args.no_sentences:
        variants["sentences"] = [sentence_spans(t) for t in tokens]
    if "w=1" not in variants:
        variants = {"w=1": [reasoning_spans(pr.reasoning_len, 1) for pr in probes], **variants}

    windows = {f"K={k}": k for k in args.windows}
    for name in windows:
        variants[name] = variants["w=1"]

    def run(spans_of, window=0):
        if window:
            return [window_substitution_scores(model, pr, k, s, window, args.chunk_tokens, pr.pad_id)
                    for pr, k, s in zip(probes, kinds, spans_of)]
        return [span_substitution_scores(model, pr, k, s, args.chunk_tokens, pr.pad_id)
                for pr, k, s in zip(probes, kinds, spans_of)]

    run(variants["w=1"][:4])  # warm-up
    exact_s, exact = timed(lambda: run(variants["w=1"]), args.repeats)
    report = {"responses": len(probes), "reasoning_tokens_mean": statistics.mean(pr.reasoning_len for pr in probes),
              "threads": args.threads, "variants": {}}
    exact_fe = sum(span_forward_equivalents(pr, k, args.chunk_tokens, s)
                   for pr, k, s in zip(probes, kinds, variants["w=1"]))
    for name, spans_of in variants.items():
        window = windows.get(name, 0)
        seconds, scores = (exact_s, exact) if name == "w=1" else timed(lambda: run(spans_of, window), args.repeats)
        rho = [spearman(s.tolist(), e.tolist()) for s, e in zip(scores, exact)]
        defined = [r for r in rho if not math.isnan(r)]
        recall = [recall_at_k(s.tolist(), t["causal"], default_k(len(s))) for s, t in zip(scores, truth) if t["causal"]]
        ceiling = [] if window else [spearman(span_pooled(e, s).tolist(), e.tolist()) for e, s in zip(exact, spans_of)]
        ceiling = [c for c in ceiling if not math.isnan(c)]
        if window:
            fe = sum(window_forward_equivalents(pr, k, window) for pr, k in zip(probes, kinds))
        else:
            fe = sum(span_forward_equivalents(pr, k, args.chunk_tokens, s) for pr, k, s in zip(probes, kinds, spans_of))
        report["variants"][name] = {
            "spearman_median": statistics.median(defined) if defined else math.nan,
            "spearman_mean": statistics.mean(defined) if defined else math.nan,
            "share_spearman_ge_0.9": sum(r >= 0.9 for r in defined) / len(defined) if defined else math.nan,
            "spearman_undefined": len(rho) - len(defined),
            "ceiling_spearman_median": statistics.median(ceiling) if ceiling else math.nan,
            "recall_at_10": statistics.mean(recall) if recall else math.nan,
            "spans_per_response": statistics.mean(len(s) for s in spans_of),
            "forward_equivalents_vs_exact": fe / exact_fe,
            "seconds": seconds,
            "seconds_vs_exact": seconds / exact_s,
        }
    report["token_forwards"] = {
        str(r): {**{f"w={w}": suffix_token_forwards(r, w) for w in args.widths},
                 **{f"K={k}": window_token_forwards(r, k) for k in (*args.windows, 64, 128)}}
        for r in (1024, 3072)}

    print(f"{len(probes)} responses, mean R {report['reasoning_tokens_mean']:.1f}, {args.threads} thread(s), "
          f"timing medians of {args.repeats}\n")
    print(markdown_table(
        ["spans", "Spearman to exact, median", "mean", "share >= 0.9", "undefined",
         "ceiling (span-max of exact), median",
         "recall@10% decisive", "spans / response", "tokens run / exact", "time / exact"],
        [[name, f"{v['spearman_median']:.3f}", f"{v['spearman_mean']:.3f}", f"{v['share_spearman_ge_0.9']:.2f}",
          v["spearman_undefined"], f"{v['ceiling_spearman_median']:.3f}", f"{v['recall_at_10']:.3f}",
          f"{v['spans_per_response']:.1f}", f"{v['forward_equivalents_vs_exact']:.3f}", f"{v['seconds_vs_exact']:.3f}"]
         for name, v in report["variants"].items()], "l" + "r" * 9))
    print(f"\nsuffix token-forwards of one response (R reasoning tokens + {TAIL_TOKENS} conclude/answer tokens; "
          "the clean prefix comes from the KV cache):\n")
    columns = list(next(iter(report["token_forwards"].values())))
    print(markdown_table(["R", *columns], [[f"{int(r):,}", *(f"{c:,}" for c in counts.values())]
                                           for r, counts in report["token_forwards"].items()],
                         "r" * (len(columns) + 1)))
    if args.out:
        atomic_write_json(args.out, report)


if __name__ == "__main__":
    main()
