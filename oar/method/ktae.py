"""KTAE, key-token advantage estimation (Sun et al., arXiv 2505.16826), as a token scorer: how strongly the
presence of a token in a group's responses goes with their being right or wrong. It reads no model.

For one prompt's group of G responses, split by reward into the correct ones (reward > 0) and the others,
every token type t that occurs in the group gets a 2x2 contingency table of responses::

                     correct   incorrect
    contain t           a          b
    do not contain t    c          d            (a + b + c + d = G)

and from it

- the association's significance: ``F = exp(-2 p)``, p the two-sided p-value of Fisher's exact test of
  the table (the probability, under fixed margins, of tables no more likely than the observed one); ``F``
  is 0 when ``p = 1`` (no association at all);
- the information the token's presence gives about correctness, in bits:
  ``IG = H(Y) - (a + b) / G H(a / (a + b)) - (c + d) / G H(c / (c + d))``, H the binary entropy;
- the direction: ``h = arcsin sqrt(a / (a + c)) - arcsin sqrt(b / (b + d))``, positive when the token is
  more common among the correct responses;

and the key-token value ``v = 2 (sigmoid((F + IG) / 2 * h) - 1/2)`` in (-1, 1), the paper's association
strength (the weights of F and IG equal) times its direction, squashed. KTAE adds ``v`` to the token's
rollout advantage; as a scorer for OAR's gate, whose scores are non-negative importances, a token scores
``|v|`` of its type: how much its presence tells about the outcome, whichever way. A group with only
correct or only incorrect responses tells nothing: its tokens score 0.

The paper builds the tables over the whole completion; so does :func:`ktae_scores` (each response's tokens
up to its last non-special token), and it returns the reasoning tokens' values. The paper's optional
term-frequency refinement of the direction is not used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor


def fisher_two_sided(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test of the table [[a, b], [c, d]]: the sum of the
    hypergeometric probabilities (fixed margins) of every table at most as likely as the observed one
    (a relative tolerance of 1e-9 keeps ties of equal probability together)."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"a contingency table holds counts >= 0, got {(a, b, c, d)}")
    row, col, n = a + b, a + c, a + b + c + d

    def probability(x: int) -> float:
        return math.comb(col, x) * math.comb(n - col, row - x) / math.comb(n, row)

    observed = probability(a)
    low, high = max(0, row + col - n), min(row, col)
    return min(1.0, sum(p for x in range(low, high + 1) if (p := probability(x)) <= observed * (1 + 1e-9)))


def _binary_entropy(p: float) -> float:
    return 0.0 if p <= 0.0 or p >= 1.0 else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def information_gain(a: int, b: int, c: int, d: int) -> float:
    """Bits of information the token's presence gives about a response's correctness (see the module)."""
    n = a + b + c + d
    if n == 0:
        return 0.0
    given = sum((part / n) * _binary_entropy(right / part) for right, part in ((a, a + b), (c, c + d)) if part)
    return _binary_entropy((a + c) / n) - given


def direction(a: int, b: int, c: int, d: int) -> float:
    """arcsin sqrt(share of correct responses holding the token) - the same of the incorrect ones."""
    return math.asin(math.sqrt(a / (a + c))) - math.asin(math.sqrt(b / (b + d)))


def key_token_value(a: int, b: int, c: int, d: int) -> float:
    """KTAE's value of a token type with table [[a, b], [c, d]], in (-1, 1) (0 without association)."""
    if a + c == 0 or b + d == 0:
        return 0.0
    p = fisher_two_sided(a, b, c, d)
    strength = ((math.exp(-2 * p) if p < 1.0 else 0.0) + information_gain(a, b, c, d)) / 2
    return 2.0 * (1.0 / (1.0 + math.exp(-strength * direction(a, b, c, d))) - 0.5)


def group_values(responses: Sequence[Sequence[int]], correct: Sequence[bool]) -> dict[int, float]:
    """KTAE's value of every token type in one group's responses (token ids), by its contingency table."""
    holding = [set(r) for r in responses]
    right = sum(bool(c) for c in correct)
    wrong = len(responses) - right
    values = {}
    for token in sorted(set().union(*holding)) if holding else ():
        a = sum(token in h for h, c in zip(holding, correct) if c)
        b = sum(token in h for h, c in zip(holding, correct) if not c)
        values[token] = key_token_value(a, b, right - a, wrong - b)
    return values


def ktae_scores(responses: Sequence[Sequence[int]], reasoning_lens: Sequence[int], groups: Sequence[int],
                rewards: Sequence[float]) -> list[Tensor]:
    """Per response, ``|v|`` of each reasoning token's type in its group (:func:`group_values`); the
    tables are built over each response's whole token list (``responses``), correct meaning reward > 0."""
    if not len(responses) == len(reasoning_lens) == len(groups) == len(rewards):
        raise ValueError(f"{len(responses)} responses, {len(reasoning_lens)} reasoning lengths, {len(groups)} "
                         f"groups and {len(rewards)} rewards: one each per response")
    members: Mapping[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)  # type: ignore[attr-defined]
    values: dict[int, dict[int, float]] = {
        g: group_values([responses[i] for i in rows], [rewards[i] > 0 for i in rows]) for g, rows in members.items()}
    return [torch.tensor([abs(values[g][t]) for t in list(r)[:n]], dtype=torch.float32)
            for r, n, g in zip(responses, reasoning_lens, groups)]
