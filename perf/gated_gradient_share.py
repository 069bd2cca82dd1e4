"""Where the gradient lies after a gate reweights it: the truth gate's reach on a testbed policy.

For responses sampled from a chain policy at the training temperature, each token's policy-gradient push
is ||e_y - pi|| times its advantage weight. This prints the share of that push by token class under
uniform credit (GRPO) and under two ground-truth scorings through oar.method.gate.gate at the gate settings
given: the truth gate's (the parsed decisive tokens 1, every other reasoning token 0) and a graded one
(decisive 1, the tokens that cannot change the answer 0, the rest 0.5). With binary scores the zeros tie
at the gate's quantile, so nothing falls in its suppression band; the graded scoring shows what the same
gate does when the reward-irrelevant tokens rank lowest, as a continuous scorer's can.

    python perf/gated_gradient_share.py --model results-decisive/models/chain_d8 \
        --dataset results-decisive/data/chain5_test.jsonl --problems 32 --gates 0.4:2.0 1.0:2.0
"""

from __future__ import annotations

import argparse

import torch

from harness import add_model
from oar.data import chains
from oar.files import read_jsonl
from oar.method.gate import gate
from oar.models.loading import load_model
from oar.prompting import build_prompt
from oar.training.pretrain import token_pushes


DECISIVE = ("relation", "result")


def sampled_tokens(model, tokenizer, problems, group: int, temperature: float, max_new_tokens: int):
    """Per response sampled for each problem: its tokens' classes and ||e_y - pi|| (``token_pushes``)."""
    for text_in in problems:
        prompt = tokenizer(build_prompt(text_in, tokenizer), add_special_tokens=False, return_tensors="pt")
        ids = prompt["input_ids"].repeat(group, 1)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                             top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        yield from token_pushes(model, tokenizer, out, ids.shape[1], temperature)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model(parser)
    parser.add_argument("--dataset", required=True, help="a chain test split (jsonl with 'problem')")
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--gates", nargs="+", default=["0.4:2.0"], help="tau:beta pairs (floor 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_grad_enabled(False)
    model, tokenizer = load_model(args.model)  # transformers' default dtype
    problems = [row["problem"] for row in read_jsonl(args.dataset)][: args.problems]

    settings = [("GRPO (uniform)", None)] + [
        (f"{name} tau {t} beta {b}", (float(t), float(b), graded))
        for t, b in (g.split(":") for g in args.gates)
        for name, graded in (("truth gate", False), ("graded truth", True))]
    mass = {label: {c: 0.0 for c in chains.TOKEN_CLASSES} for label, _ in settings}
    count = {c: 0 for c in chains.TOKEN_CLASSES}
    for classes, norm in sampled_tokens(model, tokenizer, problems, args.group, args.temperature,
                                        args.max_new_tokens):
        reasoning = torch.tensor([c != "template" for c in classes])
        binary = torch.tensor([1.0 if c in DECISIVE else 0.0 for c in classes])
        graded = torch.tensor([1.0 if c in DECISIVE else 0.0 if c in chains.IRRELEVANT_CLASSES else 0.5
                               for c in classes])
        for c in classes:
            count[c] += 1
        for label, setting in settings:
            if setting is None:
                weights = torch.ones(len(classes))
            else:
                scores = graded if setting[2] else binary
                weights = gate(scores[None], reasoning[None], tau=setting[0], beta=setting[1], floor=0.1)[0]
            for c, push in zip(classes, (weights * norm).tolist()):
                mass[label][c] += push

    total_tokens = sum(count.values())
    print(f"{args.model}: {total_tokens / (args.problems * args.group):.0f} tokens a response, "
          f"{args.problems} x {args.group} samples at T={args.temperature}")
    print("| credit | " + " | ".join(chains.TOKEN_CLASSES) + " |")
    print("| --- |" + " ---: |" * len(chains.TOKEN_CLASSES))
    print("| tokens, % | " + " | ".join(f"{100 * count[c] / total_tokens:.1f}" for c in chains.TOKEN_CLASSES) + " |")
    for label, _ in settings:
        total = sum(mass[label].values())
        print(f"| {label}: gradient, % | "
              + " | ".join(f"{100 * mass[label][c] / total:.1f}" for c in chains.TOKEN_CLASSES) + " |")


if __name__ == "__main__":
    main()
