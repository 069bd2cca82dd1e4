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

from _script_io import MODEL_SCRIPT_FLAGS, model_script_parser, probe_options, run_cli  # noqa: E402

from oar.files import read_jsonl, write_jsonl  # noqa: E402
from oar.models.loading import load_model  # noqa: E402

from oar.method.scorer_config import ScorerConfig  # noqa: E402  (torch-free: --help stays fast)


# __doc__ is None under Snakemake's script: (its preamble comes first)
DESCRIPTION = 'Score every reasoning token of the held-out responses with one scorer and outcome probe.'


def parse_args(argv):
    p = model_script_parser(__doc__, DESCRIPTION)
    p.add_argument("--responses", required=True, help="held-out responses (JSONL from heldout.py)")
    p.add_argument("--scores", required=True, help="output JSONL")
    p.add_argument("--scorer", required=True,
                   help="a registered scorer (oar_p, oar_g, grad_norm, entropy, position, random, ...) or an import "
                        "path package.module:function (oar.method.scorer_registry)")
    # one option per scorer setting (oar.method.scorer_config.ScorerConfig: default, type and help)
    for setting in dataclasses.fields(ScorerConfig):
        kind = {"int": int, "float": float, "str": str}[setting.type]
        p.add_argument("--" + setting.name.replace("_", "-"), type=kind, default=setting.default,
                       help=setting.metadata["help"])
    p.add_argument("--seed", type=int, default=0,
                   help="seed of OAR-G's noise and the random scorer (each response draws its own from it)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from oar.method.importance import score

    rows = read_jsonl(args.responses)
    model, tokenizer = load_model(args.model, dtype="float32", device="auto", threads=args.threads)
    probes = probe_options(args).build(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows])
    config = ScorerConfig.of(vars(args))
    out = []
    total = 0.0
    for row, probe in zip(rows, probes):
        started = time.perf_counter()
        # each response its own draw of the random scores and OAR-G's noise (one seed for all would give
        # every response of a fixed layout the same random ranking of positions), reproducible per index
        result = score(args.scorer, model, [probe], config, seed=args.seed * 1_000_003 + int(row["index"]))
        wall = time.perf_counter() - started
        total += wall
        out.append({"index": row["index"], "reasoning_len": probe.reasoning_len,
                    "scores": result.scores[0, : probe.reasoning_len].tolist(),
                    "lt_fallback": bool(result.lt_fallback[0]), "wall_s": wall})
    write_jsonl(args.scores, out)
    print(f"{args.scorer} ({args.probe}) on {len(out)} responses in {total:.1f} s -> {args.scores}")


if __name__ == "__main__":
    run_cli(main, globals(), MODEL_SCRIPT_FLAGS)
