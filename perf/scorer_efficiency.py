"""How well each scorer uses the hardware: model calls, host synchronisations and achieved FLOP rate.

One scoring call of a GRPO group (``--responses`` responses of ``--response-tokens`` tokens to one prompt)
on a Qwen2 model of about 100M parameters with random weights (no download; ``--shape testbed``: the
widths of the testbed's 0.7M-parameter policy), on this machine's CPU threads. For each scorer (exact
OAR-P, OAR-P with a local window, OAR-G) it reports:

- model calls: forwards of the model (a forward hook), and for OAR-G its backward too;
- host synchronisations: ``aten::item``, ``aten::_local_scalar_dense`` and ``aten::nonzero`` events in a
  ``torch.profiler`` trace of the call (each one makes the host wait for the device on a GPU);
- seconds (median over ``--repeats`` calls, no profiler) and the achieved FLOP rate: the scorer's
  useful work by the cost plan's counters (``oar.planning.cost_model.forward_flops`` /
  ``backward_flops`` of each clean pass and each substituted copy's own suffix over its own prefix,
  padding not counted) over that time, and its ratio to the rate of one plain forward of
  ``--chunk-tokens`` tokens of the same model on the same threads (timed just before and just after the
  scorer, so that a busy spell of a shared machine hits both). The plain forward's attention is counted
  as the full n x n products, as the cost plan counts it, though a causal kernel computes about half:
  at 2,048 tokens that is about a sixth of its FLOPs, so the ratio is an underestimate.

    # calls and synchronisations of 8 responses of 256 tokens (a small model: the counts do not depend on it)
    PYTHONPATH=$PWD .venv/bin/python perf/scorer_efficiency.py --shape small --repeats 0
    # FLOP rates on the 100M shape (exact OAR-P is quadratic in the length: a shorter group)
    PYTHONPATH=$PWD .venv/bin/python perf/scorer_efficiency.py --responses 4 --response-tokens 96 --repeats 1

The bound the OAR-P schedule is held to: model calls at most ceil(copies' suffix tokens / chunk) +
ceil(clean tokens / chunk), printed beside the count.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from harness import add_out, add_repeats, add_threads, calls_and_syncs, host_waits, median_seconds
from oar.planning.cost_model import backward_flops, forward_flops
from oar.planning.shapes import shape_of
from oar.files import atomic_write_json
from oar.method.importance import score
from oar.method.scorer_config import ScorerConfig
from oar.method.probes import Probe

VOCAB = 32000
# Qwen2's layout (grouped-query attention, tied embeddings): about 100M parameters for the FLOP rates,
# and a small one for counting calls and synchronisations (the counts do not depend on the width).
SHAPES = {
    "100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=4096),
    "small": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=4096),
    # the testbed policy's widths (`make run`'s chain_f1: 0.7M parameters, a 416-token vocabulary)
    "testbed": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=4, vocab_size=416, tie_word_embeddings=True, max_position_embeddings=512),
}
PROMPT_TOKENS, CONCLUDE_TOKENS, ANSWER_TOKENS = 64, 12, 3


def build_model(shape: str, seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**SHAPES[shape])
    config._attn_implementation = "sdpa"
    return Qwen2ForCausalLM(config).eval(), config


def group_probes(responses: int, response_tokens: int, seed: int, vocab: int) -> list[Probe]:
    """One prompt, ``responses`` responses of about ``response_tokens`` tokens (lengths spread by +-12%,
    as sampled responses are), each ending with the conclusion and a 3-token answer."""
    g = torch.Generator().manual_seed(seed)
    prompt = tuple(torch.randint(5, vocab, (PROMPT_TOKENS,), generator=g).tolist())
    conclude = tuple(torch.randint(5, vocab, (CONCLUDE_TOKENS,), generator=g).tolist())
    probes = []
    for i in range(responses):
        n = int(response_tokens * (1 + 0.12 * (2 * i / max(1, responses - 1) - 1)))
        reasoning = n - ANSWER_TOKENS
        ids = torch.randint(5, vocab, (n,), generator=g).tolist()
        probes.append(Probe(prompt_ids=prompt, response_ids=tuple(ids), reasoning_len=reasoning,
                            conclude_ids=conclude, answer_ids=tuple(ids[reasoning:]), answer_kind="boxed",
                            pad_id=0))
    return probes


def useful_flops(method: str, shape, probes: list[Probe], config: ScorerConfig) -> tuple[float, int, int]:
    """(FLOPs of the definition's work, clean tokens, suffix tokens): each clean probe once and each
    substituted copy's own suffix over its own prefix (OAR-P), or the prompt once and the clean and noisy
    forwards and the input backward of the rest (OAR-G)."""
    flops, clean_tokens, suffix_tokens = 0.0, 0, 0
    for p in probes:
        n, start, r = len(p.ids(config.probe)), p.reasoning_start, p.reasoning_len
        keep = len(p.answer_ids) + 1
        tail = n - start - r
        if method == "oar_p":
            flops += forward_flops(shape, n, keep=keep)
            clean_tokens += n
            for a in range(r):
                if config.window_tokens:
                    new = min(config.window_tokens, r - a) + tail
                    flops += forward_flops(shape, new, start + r, keep)
                else:
                    new = n - start - a
                    flops += forward_flops(shape, new, start + a, keep)
                suffix_tokens += new
        else:
            suffix = n - start
            flops += 2 * forward_flops(shape, suffix, start, keep) + backward_flops(shape, suffix, start, keep,
                                                                                     weights=False)
            clean_tokens += suffix
    if method == "oar_g":
        flops += forward_flops(shape, probes[0].reasoning_start, keep=1)  # the shared prompt, once
    return flops, clean_tokens, suffix_tokens


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=8)
    parser.add_argument("--response-tokens", type=int, default=256)
    parser.add_argument("--chunk-tokens", type=int, default=2048)
    parser.add_argument("--window-tokens", type=int, default=32)
    add_repeats(parser, 3, "timed calls per scorer (0: count only)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="100m")
    add_threads(parser, torch.get_num_threads())
    parser.add_argument("--methods", nargs="+", default=["oar_p", "oar_p_window", "oar_g"])
    add_out(parser, "optional JSON file for the results", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    model, config = build_model(args.shape, 0)
    shape = shape_of(config)
    probes = group_probes(args.responses, args.response_tokens, 1, config.vocab_size)

    plain_ids = torch.randint(5, config.vocab_size, (1, args.chunk_tokens))
    with torch.no_grad():
        plain_s = median_seconds(lambda: model(input_ids=plain_ids, logits_to_keep=1), max(1, args.repeats))
    plain_rate = forward_flops(shape, args.chunk_tokens, keep=1) / plain_s
    print(f"Qwen2 shape, {shape.params / 1e6:.0f}M parameters, {args.threads} threads; {args.responses} responses "
          f"of ~{args.response_tokens} tokens to one {PROMPT_TOKENS}-token prompt; chunk_tokens {args.chunk_tokens}")
    print(f"plain forward of {args.chunk_tokens} tokens: {plain_s:.3f} s, {plain_rate / 1e9:.1f} GFLOP/s\n")
    print("| scorer | model calls | call bound | host syncs | seconds | GFLOP/s | of a plain forward |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = {"plain_forward_s": plain_s, "plain_gflops": plain_rate / 1e9, "threads": args.threads,
            "chunk_tokens": args.chunk_tokens, "responses": args.responses,
            "response_tokens": args.response_tokens, "scorers": {}}
    for name in args.methods:
        method = "oar_g" if name == "oar_g" else "oar_p"
        cfg = ScorerConfig(probe="as_mean", chunk_tokens=args.chunk_tokens,
                           window_tokens=args.window_tokens if name == "oar_p_window" else 0)
        flops, clean_tokens, suffix_tokens = useful_flops(method, shape, probes, cfg)

        def call():
            return score(method, model, probes, cfg)

        calls, events = calls_and_syncs(model, call)
        syncs = host_waits(events)
        seconds = median_seconds(call, args.repeats) if args.repeats else math.nan
        before_rate = plain_rate
        if args.repeats:  # the plain forward's rate just before and just after: a busy spell hits both
            with torch.no_grad():
                plain_s = median_seconds(lambda: model(input_ids=plain_ids, logits_to_keep=1), args.repeats)
            plain_rate = forward_flops(shape, args.chunk_tokens, keep=1) / plain_s
        reference = 0.5 * (before_rate + plain_rate)
        bound = (math.ceil(suffix_tokens / args.chunk_tokens) + math.ceil(clean_tokens / args.chunk_tokens)
                 if method == "oar_p" else None)
        rate = flops / seconds
        rows["scorers"][name] = {"model_calls": calls, "call_bound": bound, "host_syncs": syncs, "sync_events": events,
                                 "seconds": seconds, "useful_gflop": flops / 1e9, "gflops": rate / 1e9,
                                 "plain_gflops": reference / 1e9, "of_plain_forward": rate / reference}
        print(f"| {name} | {calls} | {bound if bound is not None else ''} | {syncs} | {seconds:.3f} | "
              f"{rate / 1e9:.1f} | {rate / reference:.2f} |")
    if args.out:
        atomic_write_json(args.out, rows)
    return rows


if __name__ == "__main__":
    main()
