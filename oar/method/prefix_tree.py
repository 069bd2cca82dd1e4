"""TEMPO-style prefix-tree credit (Tree-Estimated Mean Prefix Value for Policy Optimization, arXiv
2509.18314): a token's credit is how much taking it changed the value of its prefix in the tree of its
group's responses. It reads each row's group and reward, no model.

TEMPO's Prefix-to-Tree (P2T) merges one prompt's responses into a prefix tree of token ids: a node is a
prefix, its value ``V(s)`` the mean outcome of the responses that pass through it. TEMPO adds to GRPO's
advantage a temporal-difference term at each token, ``V(s_{t+1}) - V(s_t)`` (the node after the token minus
the node before it), which is zero except where the node before branches (responses that shared the
prefix part there). As a token scorer:

- ``tempo_signed`` (signed): ``V(s_{t+1}) - V(s_t)``, positive where the token took its response into the
  better-scoring branch;
- ``tempo``: its magnitude, for OAR's gate (non-negative importances).

Choices taken: the tree is built over every response's whole token list (its reasoning, conclusion and
answer; a response ends in a leaf whose value is its reward), ``V`` averages the raw rewards (TEMPO's
values of group-normalised rewards differ by the group's standard deviation, a factor the same for every
token of a response, which neither a ranking nor the gate's per-response normalisation reads), and the
TD term is taken alone, without GRPO's response-level advantage (the same for every token of a response).
A group of one response, or whose responses all score alike, gives 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def prefix_values(responses: Sequence[Sequence[int]], rewards: Sequence[float]) -> list[list[float]]:
    """Per response of one group, ``V`` of each of its prefixes ``s_0 .. s_n`` (``s_0`` the empty one: the
    group's mean reward), ``V`` the mean reward of the group's responses that share the prefix."""
    totals: dict[tuple[int, ...], list[float]] = {}
    for response, reward in zip(responses, rewards):
        for t in range(len(response) + 1):
            entry = totals.setdefault(tuple(response[:t]), [0.0, 0])
            entry[0] += float(reward)
            entry[1] += 1
    return [[totals[tuple(r[:t])][0] / totals[tuple(r[:t])][1] for t in range(len(r) + 1)] for r in responses]


def tempo_scores(responses: Sequence[Sequence[int]], reasoning_lens: Sequence[int], groups: Sequence[int],
                 rewards: Sequence[float], signed: bool = False) -> list[Tensor]:
    """Per response, ``V(s_{t+1}) - V(s_t)`` of each reasoning token in its group's prefix tree (its
    magnitude unless ``signed``)."""
    if not len(responses) == len(reasoning_lens) == len(groups) == len(rewards):
        raise ValueError(f"{len(responses)} responses, {len(reasoning_lens)} reasoning lengths, {len(groups)} "
                         f"groups and {len(rewards)} rewards: one each per response")
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    values: dict[int, list[float]] = {}
    for rows in members.values():
        for i, v in zip(rows, prefix_values([list(responses[i]) for i in rows], [rewards[i] for i in rows])):
            values[i] = v
    out = []
    for i, n in enumerate(reasoning_lens):
        prefix = torch.tensor(values[i], dtype=torch.float64)
        td = (prefix[1 : n + 1] - prefix[:n]).float()
        out.append(td if signed else td.abs())
    return out
