"""The project's KTAE (``oar.method.ktae``) against the authors' released function on the same groups.

The authors' code is not shipped: pass the path of their ``compute_key_tokens.py`` (in their repository,
``verl/workers/actor/compute_key_tokens.py``). It is loaded from that path, with ``transformers`` stubbed
if it is not importable (the file imports it and uses none of it), and run as their trainer runs it (every
weight 1, the term-frequency refinement on), one group at a time: the group's responses right-padded with
the tokenizer's pad id, the mask over each response's tokens, the rewards. Their function zeroes token id
151643 (Qwen2.5's pad), so its vector is made at least that long; the project's gives the policy's pad
token 0 likewise.

Compared over every reasoning token of the first ``--problems`` groups of a shipped response set: the
largest absolute difference of the signed value, Spearman's rank correlation of the two, and how many
token types differ by more than ``--tolerance`` (with their tables, where the exact ``p = 1`` rule and
the float32 one disagree)::

    python perf/ktae_released_check.py /tmp/KTAE/compute_key_tokens.py --policy chain_f1 --problems 200
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import types
from pathlib import Path

RELEASED_PAD = 151643  # the token id the released function zeroes (Qwen2.5's <|endoftext|>)


def load_released(path: Path):
    """The authors' module from ``path``; transformers stubbed where it is not installed."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        stub = types.ModuleType("transformers")
        for name in ("AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoTokenizer", "GenerationConfig",
                     "PreTrainedModel", "PreTrainedTokenizerBase", "Trainer", "TrainerCallback"):
            setattr(stub, name, type(name, (), {}))
        stub.is_wandb_available = lambda: False
        sys.modules["transformers"] = stub
    spec = importlib.util.spec_from_file_location("released_ktae", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def released_values(module, responses: list[list[int]], rewards: list[float], pad: int):
    """The released function's value per token id for one group (their trainer's weights: all 1)."""
    import torch

    width = max(len(r) for r in responses)
    ids = torch.full((len(responses), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(responses):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    computer = module.ComputeKeyTokens(alpha=1.0, beta_ig=1.0, gamma_tf=1.0, top=1.0, bottom=-1.0, responses_ids=ids,
                                       mask=mask, rewards=torch.tensor(rewards, dtype=torch.float32),
                                       max_token_num=max(int(ids.max()), RELEASED_PAD))
    return computer.get_key_tokens()


def released_p_is_one(module, table: list[int]) -> bool:
    """Whether the released float32 Fisher test rounds this table's p-value to exactly 1.0 (its F = 0 rule)."""
    import torch

    return bool(module.fisher_exact_test(torch.tensor([table], dtype=torch.float32))[0] == 1.0)


def value_under_released_rule(ktae, responses, correct, token: int, p_is_one: bool) -> float:
    """The project's value of ``token`` with F decided as the released float32 test decides it (F = 0 only
    where its p rounds to 1.0): what is left of the difference once the exact p = 1 rule is set aside."""
    from collections import Counter

    a = sum(token in r for r, c in zip(responses, correct) if c)
    b = sum(token in r for r, c in zip(responses, correct) if not c)
    table = (a, b, sum(correct) - a, len(correct) - sum(correct) - b)
    lengths = [sum(len(r) for r, c in zip(responses, correct) if c == side) for side in (True, False)]
    counts = [sum(Counter(r)[token] for r, c in zip(responses, correct) if c == side) for side in (True, False)]
    refinement = ktae.frequency_term(ktae.saturated_frequency(counts[0], lengths[0], lengths[1]),
                                     ktae.saturated_frequency(counts[1], lengths[1], lengths[0]))
    f = 0.0 if p_is_one else math.exp(-2 * float(ktae.fisher_two_sided(*table)))
    strength = (f + ktae.information_gain(*table)) / 2
    return 2.0 * (ktae._sigmoid(strength * (ktae.direction(*table) + refinement)) - 0.5)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("released", type=Path, help="path of the authors' compute_key_tokens.py")
    p.add_argument("--policy", default="chain_f1", help="the shipped response set (default chain_f1)")
    p.add_argument("--problems", type=int, default=200, help="groups compared, from the first (default 200)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="a difference above this is listed")
    p.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = p.parse_args(argv)

    import numpy as np
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer

    from oar.bench import response_set
    from oar.method import ktae
    from oar.models.frozen import policy_dir

    module = load_released(args.released)
    pad = AutoTokenizer.from_pretrained(policy_dir(args.policy)).pad_token_id
    rows = response_set.load(args.policy).subset(args.problems).rows
    by_group: dict[int, list[dict]] = {}
    for r in rows:
        by_group.setdefault(int(r["problem"]), []).append(r)
    ours_all, theirs_all, mirrored_all, listed = [], [], [], []
    for problem, group in by_group.items():
        responses = [list(r["response_ids"]) for r in group]
        rewards = [float(r["correct"]) for r in group]
        correct = [x > 0 for x in rewards]
        ours = ktae.group_values(responses, correct, excluded=(pad,))
        theirs = released_values(module, responses, rewards, pad)
        mirrored = {}
        for token, value in ours.items():
            mirrored[token] = value
            if abs(value - float(theirs[token])) > args.tolerance:
                a = sum(token in r for r, c in zip(responses, correct) if c)
                b = sum(token in r for r, c in zip(responses, correct) if not c)
                table = [a, b, sum(correct) - a, len(correct) - sum(correct) - b]
                if token != pad:
                    mirrored[token] = value_under_released_rule(ktae, responses, correct, token,
                                                                released_p_is_one(module, table))
                listed.append({"problem": problem, "token": token, "table": table,
                               "released_p_is_one": released_p_is_one(module, table),
                               "exact_p": str(ktae.fisher_two_sided(a, b, sum(correct) - a,
                                                                    len(correct) - sum(correct) - b)),
                               "ours": value, "released": float(theirs[token])})
        for r in group:
            for t in r["response_ids"][: r["reasoning_len"]]:
                ours_all.append(ours[t])
                theirs_all.append(float(theirs[t]))
                mirrored_all.append(mirrored[t])
    ours_np, theirs_np = np.array(ours_all), np.array(theirs_all)
    result = {"policy": args.policy, "groups": len(by_group), "reasoning_tokens": len(ours_all),
              "max_abs_difference": float(np.abs(ours_np - theirs_np).max()),
              "spearman": float(spearmanr(ours_np, theirs_np).statistic),
              "spearman_of_magnitudes": float(spearmanr(np.abs(ours_np), np.abs(theirs_np)).statistic),
              "token_types_over_tolerance": len(listed), "tolerance": args.tolerance,
              # the same with F decided as the released float32 test decides p = 1: the rest of the form
              "max_abs_difference_under_released_rule": float(np.abs(np.array(mirrored_all) - theirs_np).max()),
              "spearman_under_released_rule": float(spearmanr(np.array(mirrored_all), theirs_np).statistic),
              "tables_where_the_rules_differ": sorted({tuple(x["table"]) for x in listed
                                                       if x["exact_p"] == "1" and not x["released_p_is_one"]}),
              "listed": listed[:5]}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
