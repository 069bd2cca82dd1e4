"""Explain one response: the token importance of every reasoning token under several scorers.

Generates a greedy response to one GSM8K test problem with the packaged SmolLM2-135M-Instruct (or any
model folder), grades it, builds its outcome probe from the response's own token ids, scores it with
OAR-P, OAR-G and entropy, and prints one line per reasoning token with the OAR-P gate's weights.

    python -m oar.analysis.explain                       # packaged model, first GSM8K test problem
    python -m oar.analysis.explain --model results/models/qwen --problem-index 7 --scorers oar_p oar_g grad_norm
"""

from __future__ import annotations

import argparse
import time

import torch

from oar.data.datasets import load_dataset_records
from oar.grading.grader import grade
from oar.method.gate import gate
from oar.method.importance import score
from oar.method.scorer_registry import registered
from oar.method.scorer_config import ScorerConfig
from oar.method.probes import build_probes
from oar.models.sources import load_packaged, load_pretrained
from oar.prompting import build_prompt, encode_prompts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="packaged", help="'packaged' or a model folder / hub id")
    parser.add_argument("--problem-index", type=int, default=0, help="row of the packaged GSM8K test set")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--scorers", nargs="+", default=["oar_p", "oar_g", "entropy"],
                        choices=registered(lambda spec: spec.heldout))
    parser.add_argument("--probe", default="as_mean", choices=["lt_logits", "as_mean", "as_joint"])
    parser.add_argument("--tau", type=float, default=0.4)
    parser.add_argument("--beta", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"loading model {args.model!r} ...", flush=True)
    model, tokenizer = load_packaged() if args.model == "packaged" else load_pretrained(args.model)
    model.eval()
    problem = load_dataset_records("gsm8k_test", source="packaged").records[args.problem_index]
    prompt = build_prompt(problem["problem"], tokenizer)
    (prompt_ids,) = encode_prompts(tokenizer, [prompt])

    print(f"\nproblem {problem['id']}: {problem['problem']}\nreference answer: {problem['answer']}", flush=True)
    started = time.perf_counter()
    with torch.no_grad():
        output = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=args.max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    response_ids = output[0, len(prompt_ids) :].tolist()
    text = tokenizer.decode(response_ids, skip_special_tokens=True)
    result = grade(text, problem["answer"])
    print(f"\nresponse ({len(response_ids)} tokens, {time.perf_counter() - started:.1f} s):\n{text}")
    extracted = result.answer.text if result.answer else None
    print(f"\nextracted answer: {extracted!r} ({result.answer.kind if result.answer else 'none'}), "
          f"correct: {result.correct}")

    (probe,) = build_probes(tokenizer, [prompt_ids], [response_ids])
    config = ScorerConfig(probe=args.probe)
    if probe.reasoning_len == 0:
        print("no reasoning tokens to score")
        return
    columns: dict[str, torch.Tensor] = {}
    for name in args.scorers:
        started = time.perf_counter()
        result_scores = score(name, model, [probe], config)
        columns[name] = result_scores.scores[0, : probe.reasoning_len]
        used = "lt_logits (no answer span)" if result_scores.lt_fallback[0] else args.probe
        print(f"{name}: {time.perf_counter() - started:.1f} s (outcome probe: {used})", flush=True)
    first = args.scorers[0]
    weights = gate(columns[first][None], torch.ones(1, probe.reasoning_len, dtype=torch.bool), args.tau, args.beta)[0]

    print(f"\n{'t':>4s}  {'token':16s}" + "".join(f"{n:>11s}" for n in columns)
          + f"  w({first}, tau={args.tau}, beta={args.beta})")
    for t in range(probe.reasoning_len):
        token = repr(tokenizer.decode([probe.response_ids[t]]))[1:-1][:16]
        values = "".join(f"{columns[n][t].item():11.3g}" for n in columns)
        bar = "#" * int(round(weights[t].item() * 10))
        print(f"{t:4d}  {token:16s}{values}  {weights[t].item():5.2f} {bar}")
    top = torch.topk(columns[first], k=min(10, probe.reasoning_len)).indices.tolist()
    print(f"\ntop tokens by {first}: " + ", ".join(repr(tokenizer.decode([probe.response_ids[t]])) for t in top))


if __name__ == "__main__":
    main()
