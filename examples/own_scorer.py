"""A scorer of your own, registered and trained with through OAR's gate.

    python examples/own_scorer.py --model Qwen/Qwen2.5-0.5B-Instruct --max-steps 20

The scorer below credits each reasoning token by the policy's surprise at it, -log p(token | prefix): a
token the policy found unlikely is where the response took its own turn. A scorer takes the call's
ScoringBatch and returns one non-negative score per reasoning token of each probe (the contract:
oar/method/scorer_contract.py); `needs` says what it reads (here the model).
"""

import argparse

import torch

from oar import ScoringBatch, register_scorer

import train_with_trl  # noqa: E402  (the same dataset, reward and trainer settings)


@register_scorer("surprise", needs=("model",), description="-log p of each reasoning token under the policy")
def surprise(batch: ScoringBatch) -> list[torch.Tensor]:
    device = next(batch.model.parameters()).device
    scores = []
    for probe in batch.probes:
        ids = torch.tensor([list(probe.prompt_ids) + list(probe.response_ids[: probe.reasoning_len])], device=device)
        with torch.no_grad():
            logits = batch.model(input_ids=ids).logits[0, :-1].float()
        taken = ids[0, 1:, None]
        surprisal = -torch.log_softmax(logits, dim=-1).gather(-1, taken).squeeze(-1)
        scores.append(surprisal[-probe.reasoning_len:])  # the reasoning tokens' own
    return scores


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--output-dir", default="oar-surprise")
    args = parser.parse_args(argv)
    return train_with_trl.main(["--model", args.model, "--method", "surprise", "--max-steps", str(args.max_steps),
                                "--output-dir", args.output_dir])


if __name__ == "__main__":
    main()
