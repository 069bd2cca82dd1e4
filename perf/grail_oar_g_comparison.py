"""OAR-G as the GRAIL codebase computes it against the project's OAR-G, weight by weight, on the same
responses: each difference switched on alone (``oar.method.oar_g_grail.Differences``), then all of them.

The responses are a frozen policy's benchmark response set (``--policy``, default ``chain_f1``), its first
``--problems`` problems (16 x 8 responses: one training step), scored by the frozen policy. The project's
weights are ``score("oar_g", ...)`` through ``oar.method.gate.gate`` (tau 0.4, beta 2, the call's seed 0);
every variant's come from ``oar.method.oar_g_grail.oar_g_weights`` with one switch on. Difference 5 (weights
recomputed at every iteration) is measured twice: the project's weights from another seed (the fresh noise
of a recomputation with the same policy: the first iteration, ``num_iterations`` 1, which the testbed
trains with) and from another seed after one AdamW step (lr 1e-4, the testbed's) of the GRPO loss with the
project's token advantages on these responses (the second iteration when ``num_iterations`` is 2).

Per variant, against the project's weights: the mean and largest absolute weight difference over every
response token; the mean per-response Spearman correlation of the reasoning tokens' weights (responses where
both weightings vary); and the share of reasoning tokens whose membership of the boost band (at or above the
tau cut) changes. The first row checks the harness: the variant with every switch off against the
project's scorer (float rounding only).

    python perf/grail_oar_g_comparison.py                      # chain_f1, 16 problems (about a minute)
    python perf/grail_oar_g_comparison.py --out results/perf/grail_oar_g.json
"""

from __future__ import annotations

import argparse
import copy
import sys

import numpy as np
import torch
from scipy.stats import spearmanr

from harness import add_out, add_threads, markdown_table
from oar.files import atomic_write_json
from oar.method.gate import gate
from oar.method.importance import score
from oar.method.oar_g_grail import Differences, oar_g_weights, project_gate
from oar.method.scorer_config import ScorerConfig

TAU, BETA, LEARNING_RATE = 0.4, 2.0, 1e-4
SWITCHES = (
    ("1. noise and scores over the whole completion", "whole_completion"),
    ("2. the first box as the answer, read on the response", "first_box"),
    ("3. a nearest-rank tau cut", "nearest_rank"),
    ("4. weight 1 where no box is found", "no_box_weight_one"),
    ("6. noise and scores one position earlier (also in the code)", "shifted"),
    ("7. gradient times the noised embedding (also in the code)", "noised_input"),
)


def project_weights(model, probes, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The project's OAR-G weights of every response token and the reasoning tokens' boost band."""
    result = score("oar_g", model, probes, ScorerConfig(), seed=seed)
    full = gate(result.scores, result.reasoning_mask, TAU, BETA)
    weights, bands = [], []
    for i, p in enumerate(probes):
        weights.append(full[i, : len(p.response_ids)].float())
        band = torch.zeros(len(p.response_ids), dtype=torch.bool)
        band[: p.reasoning_len] = project_gate(result.scores[i, : p.reasoning_len], TAU, BETA)[1]
        bands.append(band)
    return weights, bands


def grpo_step(model, probes, rewards, groups, token_weights):
    """A copy of ``model`` after one AdamW step of GRPO's loss (beta 0, on-policy ratio 1) with the token
    advantages ``A_i w_it`` over every response token."""
    import torch.nn.functional as F

    updated = copy.deepcopy(model).train()
    rewards_t = torch.tensor(rewards, dtype=torch.float32)
    advantages = torch.zeros(len(probes))
    for g in set(groups):
        members = [i for i, x in enumerate(groups) if x == g]
        r = rewards_t[members]
        advantages[members] = (r - r.mean()) / (r.std() + 1e-4)  # TRL's scale_rewards: group
    optimizer = torch.optim.AdamW(updated.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    loss = 0.0
    for i, p in enumerate(probes):
        ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids)])
        logp = F.log_softmax(updated(input_ids=ids).logits[0, len(p.prompt_ids) - 1 : -1].float(), dim=-1)
        token = logp.gather(-1, ids[0, len(p.prompt_ids):, None]).squeeze(-1)
        loss = loss - (advantages[i] * token_weights[i] * token).mean() / len(probes)
    loss.backward()
    optimizer.step()
    return updated.eval()


def compare(base, other, probes) -> dict:
    (w0, b0), (w1, b1) = base, other
    diffs = torch.cat([(a - b).abs() for a, b in zip(w0, w1)])
    rhos, band_changed, reasoning = [], 0, 0
    for a, b, ba, bb, p in zip(w0, w1, b0, b1, probes):
        r = p.reasoning_len
        x, y = a[:r].numpy(), b[:r].numpy()
        if r > 1 and np.ptp(x) > 0 and np.ptp(y) > 0:
            rhos.append(spearmanr(x, y).statistic)
        band_changed += int((ba[:r] != bb[:r]).sum())
        reasoning += r
    return {"mean_abs": float(diffs.mean()), "max_abs": float(diffs.max()),
            "spearman": float(np.mean(rhos)) if rhos else float("nan"), "spearman_rows": len(rhos),
            "band_changed": band_changed / max(reasoning, 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="chain_f1")
    parser.add_argument("--problems", type=int, default=16)
    add_threads(parser)
    add_out(parser, "write the figures here as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from oar.bench import response_set
    from oar.method.grail import first_box_tokens
    from oar.models.frozen import policy_dir
    from oar.models.loading import load_model

    responses = response_set.load(args.policy).subset(args.problems)
    model, tokenizer = load_model(policy_dir(args.policy), dtype="float32", device="cpu", threads=args.threads)
    probes = responses.probes(tokenizer)
    rows = responses.rows
    no_box = sum(first_box_tokens(tokenizer, p.response_ids) is None for p in probes)
    print(f"{args.policy}: {len(probes)} responses of {args.problems} problems, {no_box} without a box, "
          f"{sum(p.answer_kind != 'boxed' for p in probes)} whose project probe reads no box", flush=True)

    base = project_weights(model, probes, seed=0)
    results = []
    check = oar_g_weights(model, probes, tokenizer, Differences(), tau=TAU, beta=BETA, seed=0)
    results.append(("every switch off (the harness against the project's scorer)", compare(base, check, probes)))
    for label, name in SWITCHES:
        variant = oar_g_weights(model, probes, tokenizer, Differences.only(name), tau=TAU, beta=BETA, seed=0)
        results.append((label, compare(base, variant, probes)))
        print(f"{label}: done", flush=True)
    results.append(("5a. recomputed with fresh noise, the same policy (num_iterations 1)",
                    compare(base, project_weights(model, probes, seed=1), probes)))
    stepped = grpo_step(model, probes, [1.0 if r["correct"] else 0.0 for r in rows],
                        [int(r["problem"]) for r in rows], base[0])
    results.append(("5b. recomputed after one AdamW step, fresh noise (iteration 2 of num_iterations 2)",
                    compare(base, project_weights(stepped, probes, seed=1), probes)))
    everything = oar_g_weights(model, probes, tokenizer, Differences.grail(), tau=TAU, beta=BETA, seed=1)
    results.append(("all: OAR-G as the GRAIL codebase computes it (1-4, 6, 7; fresh noise)",
                    compare(base, everything, probes)))

    table = markdown_table(
        ["difference switched on", "mean abs weight difference", "largest", "Spearman of reasoning weights",
         "reasoning tokens changing band"],
        [(label, f"{r['mean_abs']:.4f}", f"{r['max_abs']:.3f}", f"{r['spearman']:.3f} ({r['spearman_rows']} rows)",
          f"{100 * r['band_changed']:.1f}%") for label, r in results], align="lrrrr")
    print(table)
    if args.out:
        atomic_write_json(args.out, {"policy": args.policy, "problems": args.problems, "responses": len(probes),
                                     "without_box": no_box, "tau": TAU, "beta": BETA,
                                     "rows": [{"difference": label, **r} for label, r in results]})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
