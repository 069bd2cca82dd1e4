"""Surprisal, a trivial baseline of the token-credit benchmark: a reasoning token scores ``-log p`` of itself
under the distribution the policy sampled it from (the policy's own logits one position earlier).

It reads one forward of the policy and nothing about the outcome. It is here to be read against: on the
chain testbed a step's relation is ``=`` or the sloppy ``~``, and the policy pretrained on solutions where a
step is an estimate with a small probability gives ``~`` that small probability wherever it stands (on the
shipped response sets every sampled ``~`` has -log p of at least 1.34 on ``chain_f1`` and 2.16 on
``chain_d8``, and every sampled ``=`` lies below that but 0.03% of ``chain_f1``'s). So surprisal ranks an erring ``~``
above every later right ``=`` without knowing the step was wrong: the erring column rewards ranking the
rarer relation first, and a method that scores no better than surprisal there has shown nothing about
blame. The ``~`` is not a response's most surprising token (a remark's first word or a result's digit is
drawn from a wider distribution), which is why surprisal's recall is low.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import (batch_pad_id, flat_ids, gather_rows, mask_format, micro_batches, model_device,
                                        piece_starts, row_inputs, row_table, to_host)


@torch.no_grad()
def surprisal_scores(model, probes: Sequence[Probe], config: ScorerConfig) -> list[Tensor]:
    """Per probe, ``-log pi(y_t | prompt, y_<t)`` of each reasoning token ``y_t`` (nats), the prompt and
    reasoning run as the entropy control runs them (left-padded micro-batches of ``config.chunk_tokens``)."""
    device = model_device(model)
    fmt = mask_format(model)
    pad_id = batch_pad_id(probes)
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    flat, flat_starts = flat_ids(seqs, device)
    reasoning = [p.reasoning_len for p in probes]
    dest = piece_starts(reasoning)
    groups = micro_batches([len(s) for s in seqs], config.chunk_tokens)
    order = [i for g in groups for i in g]
    table = row_table([(i, 0, len(seqs[i]), 0, 0, 0, 0, 0, 0) for i in order], device)
    per_row = torch.tensor([[dest[i], reasoning[i]] for i in order], dtype=torch.long).reshape(-1, 2).to(device)
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
        # the tokens the last keep - 1 logits predict are the last keep - 1 ids (a row's reasoning at its end)
        sampled = ids[:, ids.shape[1] - (keep - 1) :]
        gather_rows(out, -logp.gather(-1, sampled[..., None]).squeeze(-1), keep - 1 - row_count, row_count, row_dest)
    return to_host(list(out[:-1].split(reasoning)))
