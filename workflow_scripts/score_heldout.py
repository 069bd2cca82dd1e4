r"""Score every reasoning token of the held-out responses with one scorer and outcome probe.

Shell::

    python workflow_scripts/score_heldout.py --model results/models/smollm2 \
        --responses results/analysis/heldout/responses.jsonl --scorer oar_p --probe as_mean \
        --scores results/analysis/heldout/scores/oar_p-as_mean.jsonl

One JSON line per response: ``index``, ``scores`` (one per reasoning token, from
``oar.method.importance.score``), whether the outcome fell back to LT-Logits, and the scoring time.
"""

import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import model_script_parser, run_cli  # noqa: E402

from oar.files import read_jsonl, write_jsonl  # noqa: E402
from oar.models.loading import load_model  # noqa: E402

from oar.method.scorer_config import ScorerConfig  # noqa: E402  (torch-free: --help stays fast)

FLAGS = ("no_fallback_last_number", "no_answer_statement", "appended_conclusion")


DESCRIPTION = 'Score every reasoning token of the held-out responses with one scorer and outcome probe.'  # __doc__ is None under Snakemake's script: (its preamble comes first)


def parse_args(argv):
    p = model_script_parser(__doc__, DESCRIPTION)
    p.add_argument("--responses", required=True, help="held-out responses (JSONL from heldout.py)")
    p.add_argument("--scores", required=True, help="output JSONL")
    p.add_argument("--scorer", required=True,
                   help="oar_p, oar_g, grad_norm, entropy, position or random (oar.method.importance)")
    p.add_argument("--probe", default=ScorerConfig.probe, help="outcome probe: lt_logits, as_mean or as_joint")
    p.add_argument("--noise-sigma", type=float, default=ScorerConfig.noise_sigma,
                   help="OAR-G's Gaussian noise on the embeddings")
    p.add_argument("--chunk-tokens", type=int, default=ScorerConfig.chunk_tokens, help="token budget of one scoring forward")
    p.add_argument("--grad-chunk-tokens", type=int, default=ScorerConfig.grad_chunk_tokens,
                   help="token budget of one OAR-G / grad_norm micro-batch with grad (0: --chunk-tokens)")
    p.add_argument("--span-tokens", type=int, default=ScorerConfig.span_tokens,
                   help="OAR-P substitutes this many consecutive reasoning tokens at once (1: exact OAR-P)")
    p.add_argument("--window-tokens", type=int, default=ScorerConfig.window_tokens,
                   help="OAR-P recomputes only this many reasoning tokens after a substitution (0: exact OAR-P)")
    p.add_argument("--seed", type=int, default=ScorerConfig.seed,
                   help="seed of OAR-G's noise and the random scorer (each response draws its own from it)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from oar.method.importance import score
    from oar.method.probes import build_probes

    rows = read_jsonl(args.responses)
    model, tokenizer = load_model(args.model, dtype="float32", device="auto", threads=args.threads)
    probes = build_probes(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows],
                          fallback_last_number=not args.no_fallback_last_number,
                          own_conclusion=not args.appended_conclusion, substitute=args.substitute,
                          answer_statement=not args.no_answer_statement)
    config = ScorerConfig(probe=args.probe, noise_sigma=args.noise_sigma, chunk_tokens=args.chunk_tokens,
                          grad_chunk_tokens=args.grad_chunk_tokens,
                          span_tokens=args.span_tokens, window_tokens=args.window_tokens, seed=args.seed)
    out = []
    total = 0.0
    for row, probe in zip(rows, probes):
        started = time.perf_counter()
        # each response its own draw of the random scores and OAR-G's noise (one seed for all would give
        # every response of a fixed layout the same random ranking of positions), reproducible per index
        seeded = dataclasses.replace(config, seed=args.seed * 1_000_003 + int(row["index"]))
        result = score(args.scorer, model, [probe], seeded)
        wall = time.perf_counter() - started
        total += wall
        out.append({"index": row["index"], "reasoning_len": probe.reasoning_len,
                    "scores": result.scores[0, : probe.reasoning_len].tolist(),
                    "lt_fallback": bool(result.lt_fallback[0]), "wall_s": wall})
    write_jsonl(args.scores, out)
    print(f"{args.scorer} ({args.probe}) on {len(out)} responses in {total:.1f} s -> {args.scores}")


if __name__ == "__main__":
    run_cli(main, globals(), FLAGS)
