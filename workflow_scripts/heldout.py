r"""Sample the fixed held-out responses of the analysis once from a base model.

Shell::

    python workflow_scripts/heldout.py --model results/models/smollm2 --problems results/data/gsm8k_test.jsonl \
        --responses results/analysis/heldout/responses.jsonl --offset 100 --num-problems 8

One response per problem (greedy by default), kept when it ended with eos (a response cut at the token
limit would make the oracle's re-decoding compare answers of unfinished texts), has an answer span and at
least ``--min-reasoning-tokens`` reasoning tokens; at most ``--max-responses`` are kept. Each JSON line holds the token ids of the prompt and the
response (what every scorer and the oracle read, never re-tokenised), the decoded reasoning tokens, the
extracted answer, the reference and whether it is correct. Every method compared reads this file.
"""  # noqa: E501

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import MODEL_SCRIPT_FLAGS, model_script_parser, probe_options, run_cli  # noqa: E402

from oar.files import write_jsonl  # noqa: E402
from oar.models.loading import load_model  # noqa: E402

FLAGS = (*MODEL_SCRIPT_FLAGS, "keep_unanswered", "keep_truncated")


# __doc__ is None under Snakemake's script: (its preamble comes first)
DESCRIPTION = 'Sample the fixed held-out responses of the analysis once from a base model.'


def parse_args(argv):
    p = model_script_parser(__doc__, DESCRIPTION)
    p.add_argument("--problems", required=True, help="prepared dataset (JSONL)")
    p.add_argument("--responses", required=True, help="output JSONL")
    p.add_argument("--offset", type=int, default=0, help="first problem of the file used")
    p.add_argument("--num-problems", type=int, default=8, help="problems sampled, from --offset on")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--max-new-tokens", type=int, default=96, help="token budget of one response")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (temperature > 0)")
    p.add_argument("--min-reasoning-tokens", type=int, default=4,
                   help="responses with fewer reasoning tokens are left out")
    p.add_argument("--keep-unanswered", action="store_true", help="keep responses without an answer span")
    p.add_argument("--keep-truncated", action="store_true",
                   help="keep responses cut at --max-new-tokens (default: only those that ended with eos)")
    p.add_argument("--max-responses", type=int, help="keep at most this many (the first ones that qualify)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import torch

    from oar.data.records import read_records
    from oar.evaluation.generation import eos_token_ids
    from oar.grading.grader import grade
    from oar.prompting import build_prompt, encode_prompts
    from oar.sdpa_kernels import without_cudnn_attention

    started = time.perf_counter()
    fallback = not args.no_fallback_last_number
    problems = read_records(args.problems)[args.offset : args.offset + args.num_problems]
    if not problems:
        raise ValueError(f"{args.problems}: no problems at offset {args.offset}")
    model, tokenizer = load_model(args.model, dtype="float32", device="auto", threads=args.threads)
    device = next(model.parameters()).device
    prompt_ids = encode_prompts(tokenizer, [build_prompt(p["problem"], tokenizer) for p in problems])
    eos = eos_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id
    responses, finished = [], []
    for start in range(0, len(problems), args.batch_size):
        batch = list(range(start, min(start + args.batch_size, len(problems))))
        width = max(len(prompt_ids[i]) for i in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, i in enumerate(batch):
            ids[r, width - len(prompt_ids[i]) :] = torch.tensor(prompt_ids[i])
            mask[r, width - len(prompt_ids[i]) :] = 1
        torch.manual_seed(args.seed + start)
        sampling = {"do_sample": False} if args.temperature == 0 else {
            "do_sample": True, "temperature": args.temperature, "top_p": 1.0, "top_k": 0}
        with torch.no_grad(), without_cudnn_attention():  # a graph per decoded length otherwise
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=args.max_new_tokens, pad_token_id=pad, eos_token_id=eos,
                                 repetition_penalty=1.0, **sampling)[:, width:].tolist()
        for r, i in enumerate(batch):
            seq = out[r]
            stop = next((k for k, t in enumerate(seq) if t in set(eos)), None)
            responses.append(seq if stop is None else seq[:stop])
            finished.append(stop is not None)
        print(f"generated {len(responses)}/{len(problems)} responses", flush=True)

    statement = not args.no_answer_statement
    probes = probe_options(args).build(tokenizer, prompt_ids, responses)
    rows, dropped = [], 0
    for i, (problem, probe, done) in enumerate(zip(problems, probes, finished)):
        text = tokenizer.decode(probe.response_ids, skip_special_tokens=True)
        g = grade(text, problem["answer"], fallback_last_number=fallback, answer_statement=statement)
        if ((not probe.has_answer and not args.keep_unanswered) or (not done and not args.keep_truncated)
                or probe.reasoning_len < args.min_reasoning_tokens
                or (args.max_responses is not None and len(rows) >= args.max_responses)):
            dropped += 1
            continue
        rows.append({
            "index": args.offset + i,
            "problem_id": problem["id"],
            "reference": problem["answer"],
            "prompt_ids": list(probe.prompt_ids),
            "response_ids": list(probe.response_ids),
            "reasoning_len": probe.reasoning_len,
            "reasoning_tokens": [tokenizer.decode([t]) for t in probe.response_ids[: probe.reasoning_len]],
            "text": text,
            "answer": g.answer.text if g.answer else None,
            "answer_kind": probe.answer_kind,
            "correct": bool(g.correct),
            "finished": done,
        })
    if not rows:
        raise ValueError(f"none of the {len(problems)} held-out responses has an answer and "
                         f">= {args.min_reasoning_tokens} reasoning tokens; raise analysis.heldout.num_problems "
                         "or max_new_tokens (or set analysis.heldout.require_answer / require_complete: false)")
    write_jsonl(args.responses, rows)
    print(f"{len(rows)} held-out responses ({dropped} left out: no answer, cut at the token limit, too short "
          f"or beyond --max-responses; {sum(r['correct'] for r in rows)} correct) "
          f"in {time.perf_counter() - started:.1f} s -> {args.responses}")


if __name__ == "__main__":
    run_cli(main, globals(), FLAGS)
