"""Scorers that break the benchmark's rules, named by import path in tests (``bench_scorers:...``)."""

from __future__ import annotations

import torch


def global_generator(batch):
    """Draws from torch's global generator: other scores for the same seed every call."""
    return [torch.rand(p.reasoning_len) for p in batch.probes]


def not_finite(batch):
    return [torch.full((p.reasoning_len,), float("nan")) for p in batch.probes]
