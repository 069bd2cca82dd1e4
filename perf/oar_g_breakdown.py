"""Where OAR-G's scoring time goes on the testbed, beside a GRPO step's own work, in one process.

Samples a generation batch like a training step's from the pretrained chain policy: ``--prompts``
prompts (those of a workflow run's held-out responses) x ``--group`` completions each at the training
temperature 1.0 (the testbed trains on 16 x 8 a step), and times, as medians over ``--repeats`` runs:

- probe building from TRL-style padded tensors (``probes_from_padded``);
- OAR-G's scoring (``score("oar_g", ...)``), whole, and split by torch.profiler into the named phases of
  ``oar.method.gradient_scorers._embedding_gradients`` (inputs: padding, embeddings and noise; prefix: the
  prompts' KV cache, where the implementation has one; clean forward; noisy forward with its outcome and
  objective; backward), as shares of the profiled scoring time;
- a GRPO update on the same batch: a forward of prompt + completion with gradients on the weights, the
  per-token log-probabilities of the completion, a policy-gradient loss, backward and an AdamW step on a
  copy of the policy (TRL's update does this plus bookkeeping, so this is a lower bound of its cost);
  also timed right after a scoring run, to see whether scoring slows the update that follows it;
- sampling the batch's completions (``model.generate`` at temperature 1.0, up to 96 tokens), the rest
  of a GRPO step.

It prints scoring / update and the OAR-G step against the GRPO step estimated from the parts
((generate + update + probes + scoring) / (generate + update)).

    PYTHONPATH=$PWD .venv/bin/python perf/oar_g_breakdown.py --model results/models/chain_f1 \\
        --responses results/analysis/heldout/responses.jsonl --prompts 2 16
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

from harness import add_model, add_out, add_repeats, add_threads, markdown_table, median_seconds
from oar.files import atomic_write_json, read_jsonl
from oar.method.importance import score
from oar.method.scorer_config import ScorerConfig
from oar.method.probes import probes_from_padded
from oar.models.loading import load_model

PHASES = ("inputs", "prefix", "clean_forward", "noisy_forward", "backward")


def sample_batch(model, prompts: list[list[int]], group: int, pad_id: int, eos_ids: set[int]):
    """``group`` completions of each prompt at temperature 1.0 (up to 96 tokens), each cut after its
    first end-of-sequence token, as rows of ``prompt_ids`` and ``response_ids``."""
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (longest - len(p)) + p for p in prompts]).repeat_interleave(group, dim=0)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts]).repeat_interleave(group, dim=0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                             max_new_tokens=96, pad_token_id=pad_id)
    rows = []
    for r, seq in enumerate(out[:, longest:].tolist()):
        end = next((t + 1 for t, x in enumerate(seq) if x in eos_ids), len(seq))
        rows.append({"prompt_ids": prompts[r // group], "response_ids": seq[:end]})
    return rows, ids, mask


def padded_batch(rows, pad_id: int):
    """TRL's layout: prompts left-padded, completions right-padded, with masks."""
    longest_p = max(len(r["prompt_ids"]) for r in rows)
    longest_c = max(len(r["response_ids"]) for r in rows)
    prompt = torch.full((len(rows), longest_p), pad_id)
    prompt_mask = torch.zeros((len(rows), longest_p), dtype=torch.long)
    completion = torch.full((len(rows), longest_c), pad_id)
    completion_mask = torch.zeros((len(rows), longest_c), dtype=torch.long)
    for i, r in enumerate(rows):
        p, c = r["prompt_ids"], r["response_ids"]
        prompt[i, longest_p - len(p):] = torch.tensor(p)
        prompt_mask[i, longest_p - len(p):] = 1
        completion[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
    return prompt, prompt_mask, completion, completion_mask


def phase_seconds(model, probes, config) -> dict[str, float]:
    """CPU time of each named phase of one profiled scoring run, and the profiled total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        score("oar_g", model, probes, config)
        total = time.perf_counter() - started
    out = {name: 0.0 for name in PHASES}
    for event in prof.key_averages():
        if event.key.startswith("embedding_gradients:"):
            out[event.key.split(":", 1)[1]] = event.cpu_time_total / 1e6
    out["profiled_total"] = total
    return out


def update_step(policy, optimizer, prompt, prompt_mask, completion, completion_mask):
    """One policy-gradient update on the batch (what a GRPO step's update costs, at least)."""
    ids = torch.cat([prompt, completion], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    positions = (mask.cumsum(dim=1) - 1).clamp_min(0)
    t = completion.shape[1]
    logits = policy(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=t + 1).logits[:, :-1]
    logp = F.log_softmax(logits.float(), dim=-1).gather(-1, completion[..., None]).squeeze(-1)
    advantages = torch.linspace(-1, 1, len(ids))[:, None]
    per_token = -(torch.exp(logp - logp.detach()) * advantages) * completion_mask
    loss = (per_token.sum(dim=1) / completion_mask.sum(dim=1).clamp_min(1)).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(p, "the pretrained chain policy (results/models/chain_f1)")
    p.add_argument("--responses", required=True, help="held-out responses (results/analysis/heldout/responses.jsonl)")
    p.add_argument("--prompts", type=int, nargs="+", default=[2, 16], help="prompts per step (one batch each)")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--substitute", default=".")
    p.add_argument("--chunk-tokens", type=int, default=512)
    add_repeats(p, 5)
    add_threads(p, 1)
    p.add_argument("--no-generate", action="store_true", help="skip timing the sampling of the batch")
    add_out(p, "optional JSON file for the results")
    args = p.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_model(args.model, dtype="float32", threads=args.threads)
    policy = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    rows_all = read_jsonl(args.responses)
    config = ScorerConfig(probe="as_mean", chunk_tokens=args.chunk_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    report = {"threads": args.threads, "chunk_tokens": args.chunk_tokens, "batches": {}}
    eos_ids = {tokenizer.eos_token_id, *([model.generation_config.eos_token_id]
                                         if isinstance(model.generation_config.eos_token_id, int)
                                         else model.generation_config.eos_token_id or [])} - {None}
    for n_prompts in args.prompts:
        batch = n_prompts * args.group
        prompts = [rows_all[i % len(rows_all)]["prompt_ids"] for i in range(n_prompts)]
        rows, prompt_ids, prompt_attention = sample_batch(model, prompts, args.group, pad, eos_ids)
        tensors = padded_batch(rows, pad)

        def build():
            return probes_from_padded(tokenizer, *tensors, own_conclusion=True, substitute=args.substitute)

        probes = build()
        score("oar_g", model, probes[: min(4, batch)], config)  # warm-up
        r = {"responses": batch, "response_tokens_mean": statistics.mean(len(x["response_ids"]) for x in rows),
             "probe_tokens_mean": statistics.mean(len(pr.ids("as_mean")) for pr in probes),
             "prompt_tokens_mean": statistics.mean(len(pr.prompt_ids) for pr in probes),
             "probes_s": median_seconds(build, args.repeats),
             "scoring_s": median_seconds(lambda: score("oar_g", model, probes, config), args.repeats)}
        profiled = [phase_seconds(model, probes, config) for _ in range(max(1, args.repeats // 2))]
        phases = {k: statistics.median(pr[k] for pr in profiled) for k in (*PHASES, "profiled_total")}
        r["phase_share"] = {k: phases[k] / phases["profiled_total"] for k in PHASES}
        r["phase_share"]["other"] = 1 - sum(r["phase_share"].values())
        update_step(policy, optimizer, *tensors)  # warm-up (optimizer state)
        r["update_s"] = median_seconds(lambda: update_step(policy, optimizer, *tensors), args.repeats)
        # The same update timed right after a scoring run (whether scoring leaves the update slower:
        # caches, the allocator), the scoring itself untimed.
        after = []
        for _ in range(args.repeats):
            score("oar_g", model, probes, config)
            after.append(median_seconds(lambda: update_step(policy, optimizer, *tensors), 1))
        r["update_after_scoring_s"] = statistics.median(after)
        if not args.no_generate:
            with torch.no_grad():
                r["generate_s"] = median_seconds(lambda: model.generate(
                    input_ids=prompt_ids, attention_mask=prompt_attention, do_sample=True, temperature=1.0, top_p=1.0,
                    max_new_tokens=96, pad_token_id=pad), max(1, args.repeats // 2))
        r["scoring_over_update"] = (r["probes_s"] + r["scoring_s"]) / r["update_s"]
        if "generate_s" in r:
            grpo = r["generate_s"] + r["update_s"]
            r["oar_g_step_over_grpo_step"] = (grpo + r["probes_s"] + r["scoring_s"]) / grpo
        report["batches"][batch] = r

    print(f"{args.threads} thread(s), chunk_tokens {args.chunk_tokens}, medians of {args.repeats}; "
          + "; ".join(f"{b} responses: {r['response_tokens_mean']:.0f} response tokens, {r['probe_tokens_mean']:.0f} "
                      f"probe tokens ({r['prompt_tokens_mean']:.0f} prompt) on average"
                      for b, r in report["batches"].items()) + "\n")
    columns = ["responses", "probes s", "scoring s", *PHASES, "other", "update s", "update after scoring s",
               "generate s", "(probes + scoring) / update", "OAR-G step / GRPO step"]
    print(markdown_table(columns, [
        [batch, f"{r['probes_s']:.3f}", f"{r['scoring_s']:.3f}",
         *(f"{100 * r['phase_share'][k]:.0f}%" for k in (*PHASES, "other")), f"{r['update_s']:.3f}",
         f"{r['update_after_scoring_s']:.3f}", f"{r.get('generate_s', float('nan')):.3f}",
         f"{r['scoring_over_update']:.2f}", f"{r.get('oar_g_step_over_grpo_step', float('nan')):.2f}"]
        for batch, r in report["batches"].items()], "r" * len(columns)))
    if args.out:
        atomic_write_json(args.out, report)


if __name__ == "__main__":
    main()
