"""Attention from the answer back to the reasoning as a token scorer: how much the answer's tokens attend
to each reasoning token, averaged over every layer and head.

A probe's sequence is ``prompt | reasoning | conclusion | answer`` (``oar.method.probes``). Its queries
are the answer span's tokens (the last token of the sequence where a row has no answer span); reasoning
token t scores the mean, over layers, heads and those queries, of the attention weight on its position.
The weights are the model's own softmax rows (``output_attentions=True``, which eager attention returns).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def answer_span_attention(attentions: Sequence[Tensor], queries: Sequence[int], keys: Sequence[int]) -> Tensor:
    """Mean over layers, heads and ``queries`` of the attention weight on each of ``keys``: ``attentions``
    holds one [heads, T, T] (or [1, heads, T, T]) weight tensor per layer, query rows by key columns."""
    if not attentions or not queries:
        raise ValueError("answer_span_attention needs at least one layer and one query")
    stacked = torch.stack([a.reshape(a.shape[-3:]).double() for a in attentions])  # [layers, heads, T, T]
    return stacked[:, :, list(queries)][..., list(keys)].mean(dim=(0, 1, 2))


def query_positions(probe, kind: str) -> list[int]:
    """The answer span's positions in the probe's sequence for ``kind``; its last position without one."""
    ids = probe.ids(kind)
    if kind != "lt_logits" and probe.answer_ids:
        return list(range(len(ids) - len(probe.answer_ids), len(ids)))
    return [len(ids) - 1]


@torch.no_grad()
def answer_attention_scores(model, probes: Sequence, kinds: Sequence[str]) -> list[Tensor]:
    """Each probe's reasoning scores (see the module); one forward per probe, the model's attention
    implementation returning its weights (eager)."""
    from oar.method.scoring_batches import model_device

    device = model_device(model)
    out = []
    for probe, kind in zip(probes, kinds):
        ids = torch.tensor([probe.ids(kind)], dtype=torch.long, device=device)
        attentions = model(input_ids=ids, output_attentions=True).attentions
        if not attentions or any(a is None for a in attentions):
            raise ValueError("the model returned no attention weights: run it with eager attention "
                             "(model.set_attn_implementation('eager'))")
        start = probe.reasoning_start
        keys = range(start, start + probe.reasoning_len)
        out.append(answer_span_attention([a[0] for a in attentions], query_positions(probe, kind), keys).float().cpu())
    return out
