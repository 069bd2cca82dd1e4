r"""Oracle causal tokens of every held-out response (``oar.analysis.oracle``): an intervention + greedy re-decoding.

Shell::

    python workflow_scripts/oracle_tokens.py --model results/models/smollm2 \
        --responses results/analysis/heldout/responses.jsonl --oracle results/analysis/heldout/oracle.jsonl

One JSON line per response: ``index``, ``reasoning_len``, ``causal`` (positions), the intervention, the
answer after each intervention, the reference answer, tokens generated and wall time.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import MODEL_SCRIPT_FLAGS, model_script_parser, probe_options, run_cli  # noqa: E402

from oar.files import read_jsonl, write_jsonl  # noqa: E402
from oar.models.loading import load_model  # noqa: E402

# oar.analysis.oracle.INTERVENTIONS, spelled out so that --help answers without importing torch (a test keeps
# the two equal).
INTERVENTIONS = ("pad", "space", "alternative", "delete", "none")


# __doc__ is None under Snakemake's script: (its preamble comes first)
DESCRIPTION = ('Oracle causal tokens of every held-out response (``oar.analysis.oracle``): '
               'an intervention + greedy re-decoding.')


def parse_args(argv):
    p = model_script_parser(__doc__, DESCRIPTION)
    p.add_argument("--responses", required=True, help="held-out responses (JSONL from heldout.py)")
    p.add_argument("--oracle", required=True, help="output JSONL")
    p.add_argument("--slack-tokens", type=int, default=16,
                   help="re-decoding budget beyond the original response's remaining length")
    p.add_argument("--max-new-tokens", type=int, default=256, help="hard cap of one re-decode")
    p.add_argument("--batch-size", type=int, default=32, help="re-decodes per generate call")
    p.add_argument("--reference", default="response", choices=("response", "clean"),
                   help="compare with the response's own answer, or with a greedy re-decode of the clean prefix")
    p.add_argument("--intervention", default="space", choices=INTERVENTIONS,
                   help="what replaces each reasoning token before re-decoding (oar.analysis.oracle.INTERVENTIONS)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from oar.analysis.oracle import causal_tokens

    started = time.perf_counter()
    fallback = not args.no_fallback_last_number
    rows = read_jsonl(args.responses)
    model, tokenizer = load_model(args.model, dtype="float32", device="auto", threads=args.threads)
    probes = probe_options(args).build(tokenizer, [r["prompt_ids"] for r in rows], [r["response_ids"] for r in rows])
    out = []
    for n, (row, probe) in enumerate(zip(rows, probes), start=1):
        if probe.reasoning_len != row["reasoning_len"]:
            raise ValueError(f"{args.responses}: response {row['index']} has {probe.reasoning_len} reasoning tokens "
                             f"now, {row['reasoning_len']} when it was written (other tokenizer or grading?)")
        res = causal_tokens(model, tokenizer, probe, reference=args.reference, slack_tokens=args.slack_tokens,
                            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                            fallback_last_number=fallback, intervention=args.intervention,
                            answer_statement=not args.no_answer_statement)
        out.append({"index": row["index"], "reasoning_len": res.reasoning_len, "causal": res.causal,
                    "intervention": res.intervention, "correct": row.get("correct"),
                    "reference_answer": res.reference_answer, "answers": res.answers,
                    "clean_answers": res.clean_answers, "tokens_generated": res.tokens_generated,
                    "wall_s": res.wall_s})
        print(f"[{n}/{len(rows)}] response {row['index']}: {len(res.causal)}/{res.reasoning_len} causal tokens "
              f"({res.tokens_generated} tokens re-decoded in {res.wall_s:.1f} s)", flush=True)
    write_jsonl(args.oracle, out)
    print(f"oracle of {len(out)} responses in {time.perf_counter() - started:.1f} s -> {args.oracle}")


if __name__ == "__main__":
    run_cli(main, globals(), MODEL_SCRIPT_FLAGS)
