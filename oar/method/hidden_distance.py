"""A SHEAR-style hidden-state distance (Chen et al., "Hidden States Know Where Reasoning Diverges: Credit
Assignment via Span-Level Wasserstein Distance", arXiv 2604.23318) as a token scorer.

SHEAR's observation: within a GRPO group, the hidden states of the correct and the incorrect responses drift
apart where their reasoning diverges, and the Wasserstein distance between span-level distributions of the
two sides measures it; SHEAR scales each token's advantage by its span's distance from the opposing group.
Here, for a group with both right and wrong responses:

- a response's reasoning is cut into consecutive spans of :data:`SPAN_TOKENS` tokens (the last one shorter);
- span s of response i is the empirical distribution of its tokens' last-layer hidden states (the state at
  each token's own position, ``hidden_states[-1]``, prompt and reasoning run together);
- the opposing side's span s pools the states of span s of every response of the other outcome that
  reaches it;
- every token of span s scores ``W1(span s of i, the opposing span s)``, the exact 1-Wasserstein distance
  between the two uniform empirical distributions under the Euclidean cost (:func:`wasserstein_1`);
- a span no opposing response reaches, and every token of a group with one outcome only, scores 0.

Choices the paper's abstract leaves, as taken here (the method section was not available to the project):
the span length (4 tokens), spans aligned by their index in the reasoning (so identical prefixes score 0,
the pre-divergence spans of the paper's separation result), the last layer, W1 with the Euclidean cost, the
opposing side pooled, and the distance itself as the score (no normalisation: the gate and a ranking need
none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

SPAN_TOKENS = 4


def wasserstein_1(x: np.ndarray, y: np.ndarray) -> float:
    """Exact W1 between the uniform empirical distributions of the rows of ``x`` [n, d] and ``y`` [m, d]
    (Euclidean cost). With uniform weights an optimal plan of the transport problem scaled to lcm(n, m)
    units is integral, so it is an assignment between each point of x repeated lcm / n times and each of y
    repeated lcm / m times: solved exactly by ``scipy.optimize.linear_sum_assignment``."""
    from scipy.optimize import linear_sum_assignment

    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError(f"W1 of empty distributions ({n} and {m} points)")
    cost = np.sqrt(((x[:, None, :] - y[None, :, :]) ** 2).sum(-1))  # [n, m]
    units = n * m // math.gcd(n, m)
    big = np.repeat(np.repeat(cost, units // n, axis=0), units // m, axis=1)
    rows, cols = linear_sum_assignment(big)
    return float(big[rows, cols].sum() / units)


@torch.no_grad()
def reasoning_hidden_states(model, probes: Sequence, chunk_tokens: int = 512) -> list[np.ndarray]:
    """The last layer's hidden state at every reasoning token of every probe [R, hidden] (float64, host):
    rows of prompt + reasoning, right-padded in micro-batches of at most ``chunk_tokens`` tokens."""
    from oar.method.scoring_batches import micro_batches, model_device

    device = model_device(model)
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    out: list[np.ndarray | None] = [None] * len(probes)
    for group in micro_batches([len(s) for s in seqs], chunk_tokens):
        width = max(len(seqs[i]) for i in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        for row, i in enumerate(group):
            ids[row, : len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
        states = model(input_ids=ids.to(device), output_hidden_states=True).hidden_states[-1].float()
        for row, i in enumerate(group):
            start = len(probes[i].prompt_ids)
            out[i] = states[row, start : start + probes[i].reasoning_len].double().cpu().numpy()
    return out  # type: ignore[return-value]


def span_distances(states: Sequence[np.ndarray], groups: Sequence[int], rewards: Sequence[float],
                   span: int = SPAN_TOKENS) -> list[Tensor]:
    """Every row's token scores from its hidden states [R_i, d] (see the module), float32."""
    if span < 1:
        raise ValueError(f"span must be >= 1 token, got {span}")
    right = [float(r) > 0 for r in rewards]
    out = []
    for i, h in enumerate(states):
        scores = np.zeros(len(h))
        others = [j for j in range(len(states)) if groups[j] == groups[i] and right[j] != right[i]]
        for begin in range(0, len(h), span):
            pooled = [states[j][begin : begin + span] for j in others if len(states[j]) > begin]
            if pooled:
                scores[begin : begin + span] = wasserstein_1(h[begin : begin + span], np.concatenate(pooled))
        out.append(torch.tensor(scores, dtype=torch.float32))
    return out
