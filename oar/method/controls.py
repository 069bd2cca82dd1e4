"""The controls that read no outcome (method.md section 7): ``entropy`` (the policy's entropy where each
reasoning token was sampled, a GTPO-style control), ``position`` (recency: the token's index) and
``random`` (uniform random scores: is a gain the signal or any reshaping?). The gradient-norm control,
which reads the outcome, is in ``oar.method.gradient_scorers``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import (batch_pad_id, flat_ids, gather_rows, mask_format, micro_batches, model_device,
                                        piece_starts, row_inputs, row_table, to_host)


@torch.no_grad()
def entropy_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Policy entropy of the distribution each reasoning token was sampled from (GTPO-style control); with
    ``config.entropy_top_fraction`` below 1, only each response's highest-entropy fraction of tokens keeps
    its entropy and the rest score 0 (:func:`top_fraction`)."""
    rows = reasoning_token_statistic(model, probes, config, lambda logp, sampled: -(logp.exp() * logp).sum(dim=-1))
    return rows if config.entropy_top_fraction == 1 else [top_fraction(r, config.entropy_top_fraction) for r in rows]


def reasoning_token_statistic(model, probes: Sequence[Probe], config: ScorerConfig,
                              statistic: Callable[[Tensor, Tensor], Tensor]) -> list[Tensor]:
    """Per probe, ``statistic(log_probs, sampled)`` at each reasoning token: ``log_probs`` the policy's
    log-distributions the tokens were drawn from (``[rows, positions, vocabulary]``) and ``sampled`` the
    tokens drawn (``[rows, positions]``), the statistic one value a position. The prompt and reasoning run
    as left-padded micro-batches of ``config.chunk_tokens``; the entropy and surprisal entries share it."""
    device = model_device(model)
    fmt = mask_format(model)
    pad_id = batch_pad_id(probes)
    # The real sequence prompt | reasoning; position t's token was drawn from the logits one earlier.
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    flat, flat_starts = flat_ids(seqs, device)
    reasoning = [p.reasoning_len for p in probes]
    dest = piece_starts(reasoning)
    groups = micro_batches([len(s) for s in seqs], config.chunk_tokens)
    order = [i for g in groups for i in g]
    table = row_table([(i, 0, len(seqs[i]), 0, 0, 0, 0, 0, 0) for i in order], device)
    per_row = torch.tensor([[dest[i], reasoning[i]] for i in order], dtype=torch.long).reshape(-1, 2)
    per_row = per_row.to(device, non_blocking=True)
    out = torch.zeros(sum(reasoning) + 1, dtype=torch.float32, device=device)
    begin = 0
    for group in groups:
        rows = table[begin : begin + len(group)]
        row_dest, row_count = per_row[begin : begin + len(group)].unbind(1)
        begin += len(group)
        ids, positions, mask = row_inputs(rows, len(seqs[group[0]]), 0, flat, flat_starts, pad_id, fmt)
        keep = max(reasoning[i] for i in group) + 1
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        logp = F.log_softmax(logits[:, : keep - 1].float(), dim=-1)
        # the rows are left-padded and end together: logit column c predicts the token one column later, so
        # the tokens the last keep - 1 logits predict are the last keep - 1 ids (a row's reasoning at its end,
        # the last R_r of these positions for row r)
        sampled = ids[:, ids.shape[1] - (keep - 1) :]
        gather_rows(out, statistic(logp, sampled), keep - 1 - row_count, row_count, row_dest)
    return to_host(list(out[:-1].split(reasoning)))


def top_fraction(scores: Tensor, fraction: float) -> Tensor:
    """``scores`` where they are among the row's ceil(fraction x R) highest (ties at the boundary kept), 0
    elsewhere: the 80/20 rule's high-entropy tokens of one response."""
    kept = max(1, math.ceil(fraction * scores.numel() - 1e-9))
    threshold = torch.topk(scores, kept).values[-1]
    return torch.where(scores >= threshold, scores, torch.zeros_like(scores))


def position_scores(probes: Sequence[Probe]) -> list[Tensor]:
    """Recency control: the token's index in the response."""
    return [torch.arange(p.reasoning_len, dtype=torch.float32) for p in probes]


def random_scores(probes: Sequence[Probe], seed: int) -> list[Tensor]:
    """Random control: the same gate on uniform random scores (is the gain the signal or any reshaping?),
    drawn from a generator of its own seeded with ``seed``."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.rand(p.reasoning_len, generator=generator) for p in probes]
