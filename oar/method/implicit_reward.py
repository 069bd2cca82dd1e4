"""A PRIME-style implicit process reward (Cui et al., arXiv 2502.01456) as a token scorer.

PRIME's implicit process reward model is a language model pi_phi trained from a reference pi_ref on outcome
labels only; the reward of token y_t of a response is ``r_t = beta * log(pi_phi(y_t | y_<t) /
pi_ref(y_t | y_<t))`` (beta 0.05 in the paper). Here pi_phi is a policy trained from the frozen one by
GRPO on outcome rewards (the call's ``reference_model``: a second, frozen model) and pi_ref the policy the
call scores (``model``: in the ground-truth track the frozen policy itself, so the reward is PRIME's
exactly). The reward is signed (positive where training raised the token's probability); as a scorer for
OAR's gate, whose scores are non-negative importances, a token scores ``|r_t|``: how far outcome training
moved the probability of the token the response chose, whichever way.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

BETA = 0.05  # the paper's beta


def implicit_rewards(trained_logps: Sequence[Tensor], reference_logps: Sequence[Tensor],
                     beta: float = BETA) -> list[Tensor]:
    """``beta * (log pi_phi - log pi_ref)`` per token, row by row."""
    if len(trained_logps) != len(reference_logps):
        raise ValueError(f"{len(trained_logps)} rows of the trained policy's log-probabilities, "
                         f"{len(reference_logps)} of the reference's")
    return [beta * (t.double() - r.double()) for t, r in zip(trained_logps, reference_logps)]


@torch.no_grad()
def reasoning_logprobs(model, probes: Sequence, chunk_tokens: int) -> list[Tensor]:
    """log pi(y_t | prompt, y_<t) of every reasoning token of every probe (float32, on the host): rows of
    prompt + reasoning, right-padded into forwards of at most ``chunk_tokens`` tokens (a causal model's
    real positions never see the padding after them)."""
    from oar.method.scoring_batches import micro_batches, model_device

    device = model_device(model)
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    out: list[Tensor | None] = [None] * len(probes)
    for group in micro_batches([len(s) for s in seqs], chunk_tokens):
        width = max(len(seqs[i]) for i in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        for row, i in enumerate(group):
            ids[row, : len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
        logp = F.log_softmax(model(input_ids=ids.to(device)).logits.float(), dim=-1)
        for row, i in enumerate(group):
            start, count = len(probes[i].prompt_ids), probes[i].reasoning_len
            # token t of the reasoning sits at start + t and was predicted at start + t - 1
            targets = ids[row, start : start + count].to(device)
            out[i] = logp[row, start - 1 : start - 1 + count].gather(1, targets[:, None]).squeeze(1).cpu()
    return out  # type: ignore[return-value]


def implicit_reward_scores(model, trained_model, probes: Sequence, chunk_tokens: int,
                           beta: float = BETA) -> list[Tensor]:
    """``|beta log(pi_trained / pi_model)|`` of every reasoning token (see the module)."""
    rewards = implicit_rewards(reasoning_logprobs(trained_model, probes, chunk_tokens),
                               reasoning_logprobs(model, probes, chunk_tokens), beta)
    return [r.abs().float() for r in rewards]
