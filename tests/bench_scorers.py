"""Scorers that break the benchmark's rules, named by import path in tests (``bench_scorers:...``)."""

from __future__ import annotations

import torch


def global_generator(batch):
    """Draws from torch's global generator: other scores for the same seed every call."""
    return [torch.rand(p.reasoning_len) for p in batch.probes]


def not_finite(batch):
    return [torch.full((p.reasoning_len,), float("nan")) for p in batch.probes]


def reads_the_answer_key(batch):
    """A plain function (it declares the policy only) that scores the parsed decisive tokens 1: what a
    scorer that could read the answer key would score. It is handed no parsed positions."""
    rows = []
    for p in batch.probes:
        row = torch.zeros(p.reasoning_len)
        row[list(p.decisive)] = 1.0
        rows.append(row)
    return rows


def hooks_the_model(batch):
    """Leaves a forward hook on the policy's head that flattens every later forward's logits: no weight
    changes, so the per-call fingerprint cannot see it; every later entry on the model would be void."""
    head = batch.model.get_output_embeddings()
    if not head._forward_hooks:
        head.register_forward_hook(lambda module, inputs, output: output * 0.05)
    return [torch.ones(p.reasoning_len) for p in batch.probes]


def halves_rotary_frequencies(batch):
    """Changes a buffer in place (the rotary frequencies): no parameter changes."""
    rotary = batch.model.model.rotary_emb
    if not getattr(rotary, "_halved", False):
        rotary.inv_freq.mul_(0.5)
        rotary._halved = True
    return [torch.ones(p.reasoning_len) for p in batch.probes]


def raises(batch):
    raise RuntimeError("no such feature\nsecond line of the message")


def nan_on_last_row_of_call_1(batch):
    """NaN on the last row it is handed in the call seeded 1 (the second call of seed 0), finite elsewhere."""
    rows = [torch.ones(p.reasoning_len) for p in batch.probes]
    if batch.seed == 1:
        rows[-1] = torch.full_like(rows[-1], float("nan"))
    return rows
