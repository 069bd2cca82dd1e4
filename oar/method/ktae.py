"""KTAE, key-token advantage estimation (Sun et al., arXiv 2505.16826), in the form its authors released:
how strongly a token type goes with a group's responses being right or wrong. It reads no model.

For one prompt's group of G responses, split by reward into the correct ones (reward > 0) and the others,
every token type t of the group gets a 2x2 contingency table of responses::

                     correct   incorrect
    contain t           a          b
    do not contain t    c          d            (a + b + c + d = G)

and from it

- the association's significance: ``F = exp(-2 p)``, p the two-sided p-value of Fisher's exact test of the
  table (the probability, under fixed margins, of the tables at most as likely as the observed one);
  ``F = 0`` when ``p = 1``. Both are computed exactly (integer hypergeometric weights): ``p = 1`` exactly
  when the observed table is a most likely one, with no float rounding deciding ties;
- the information the token's presence gives about correctness, in bits:
  ``IG = H(Y) - (a + b) / G H(a / (a + b)) - (c + d) / G H(c / (c + d))``, H the binary entropy;
- the direction ``x = h + T_c / (T_w + 1e-5) - T_w / (T_c + 1e-5)``: Cohen's
  ``h = asin sqrt(a / (a + c)) - asin sqrt(b / (b + d))`` (presence), plus the term-frequency refinement
  the released code always applies (its switch is fixed on): ``T_c`` is the BM25 saturation of the token's
  share of all the correct responses' tokens, ``f / L (k1 + 1) / (f / L + k1 (1 - b + b L / Lbar))`` with
  ``f`` its occurrences, ``L`` their total length, ``Lbar`` the mean of the two sides' totals, ``k1 = 2``,
  ``b = 0.5``; ``T_w`` the same over the incorrect responses. A token of one side only gets a ratio near
  ``T / 1e-5``, so its value saturates;

and the key-token value ``v = 2 (sigmoid((F + IG) / 2 * x) - 1/2)`` in (-1, 1), positive for a token that
goes with correctness. KTAE adds ``v`` of a token's type to the GRPO advantage of every completion token
(``A_{i,t} = A_i + v``, :func:`rule_advantages`). As a scorer for OAR's gate, whose scores are
non-negative importances, a token scores ``|v|`` (:func:`ktae_scores`); :func:`ktae_values` gives ``v``
itself. A group with only correct or only incorrect responses tells nothing: its tokens get 0. The tables
count each response's whole completion as given (the benchmark's responses end before their end-of-sequence
token, training's include it); the tokenizer's pad token gets 0, as the released code zeroes its
tokenizer's (Qwen2.5's ``<|endoftext|>``).

``frequency=False`` drops the refinement (``x = h``): the presence-only form, registered as
``ktae_presence``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Sequence
from fractions import Fraction

import torch
from torch import Tensor

K1, LENGTH_B = 2.0, 0.5  # the released BM25 constants: term-frequency saturation and length normalisation
RATIO_GUARD = 1e-5  # the released guard in T_c / (T_w + guard): it sets how far a one-sided token saturates


def fisher_two_sided(a: int, b: int, c: int, d: int) -> Fraction:
    """Exact two-sided p-value of Fisher's exact test of [[a, b], [c, d]]: the hypergeometric mass (fixed
    margins) of every table at most as likely as the observed one. The weights C(col, x) C(n - col, row - x)
    share one denominator, so they are compared and summed as integers: ties are exact."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"a contingency table holds counts >= 0, got {(a, b, c, d)}")
    row, col, n = a + b, a + c, a + b + c + d

    def weight(x: int) -> int:
        return math.comb(col, x) * math.comb(n - col, row - x)

    observed = weight(a)
    tail = sum(w for x in range(max(0, row + col - n), min(row, col) + 1) if (w := weight(x)) <= observed)
    return Fraction(tail, math.comb(n, row))


def significance(a: int, b: int, c: int, d: int) -> float:
    """F = exp(-2 p), and exactly 0 where p = 1 (no table is less likely than the observed one)."""
    p = fisher_two_sided(a, b, c, d)
    return 0.0 if p == 1 else math.exp(-2 * float(p))


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
    """Cohen's h: asin sqrt(share of correct responses holding the token) - the same of the incorrect ones."""
    return math.asin(math.sqrt(a / (a + c))) - math.asin(math.sqrt(b / (b + d)))


def saturated_frequency(count: int, length: int, other_length: int) -> float:
    """BM25's saturated term frequency of a token seen ``count`` times in one side's ``length`` tokens, the
    other side holding ``other_length`` (the module's ``T``); 0 for a side without tokens."""
    if length == 0:
        return 0.0
    share, mean_length = count / length, (length + other_length) / 2
    return share * (K1 + 1) / (share + K1 * (1 - LENGTH_B + LENGTH_B * length / mean_length))


def frequency_term(t_correct: float, t_wrong: float) -> float:
    """The refinement added to the direction: T_c / (T_w + guard) - T_w / (T_c + guard)."""
    return t_correct / (t_wrong + RATIO_GUARD) - t_wrong / (t_correct + RATIO_GUARD)


def key_token_value(a: int, b: int, c: int, d: int, frequency: float = 0.0) -> float:
    """KTAE's value of a token type with table [[a, b], [c, d]] and term-frequency refinement ``frequency``
    (:func:`frequency_term`; 0 for the presence-only form), in (-1, 1) (0 without association)."""
    if a + c == 0 or b + d == 0:
        return 0.0
    strength = (significance(a, b, c, d) + information_gain(a, b, c, d)) / 2
    return 2.0 * (_sigmoid(strength * (direction(a, b, c, d) + frequency)) - 0.5)


def _sigmoid(z: float) -> float:
    # a one-sided token's refinement is ~1e3-1e5: exp of its negative overflows, so the form never takes it
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def group_values(responses: Sequence[Sequence[int]], correct: Sequence[bool], frequency: bool = True,
                 excluded: Collection[int] = ()) -> dict[int, float]:
    """KTAE's value of every token type in one group's responses (token ids); ``frequency`` applies the
    released term-frequency refinement, ``excluded`` token ids (the pad token) get 0."""
    holding = [set(r) for r in responses]
    right = sum(bool(c) for c in correct)
    wrong = len(responses) - right
    if right == 0 or wrong == 0:
        return {token: 0.0 for token in set().union(*holding)}
    counts: list[Counter[int]] = [Counter(), Counter()]  # occurrences over the correct, the incorrect responses
    lengths = [0, 0]
    for r, c in zip(responses, correct):
        counts[0 if c else 1].update(r)
        lengths[0 if c else 1] += len(r)
    values = {}
    for token in sorted(set().union(*holding)):
        if token in excluded:
            values[token] = 0.0
            continue
        a = sum(token in h for h, c in zip(holding, correct) if c)
        b = sum(token in h for h, c in zip(holding, correct) if not c)
        refinement = frequency_term(saturated_frequency(counts[0][token], lengths[0], lengths[1]),
                                    saturated_frequency(counts[1][token], lengths[1], lengths[0])) if frequency else 0.0
        values[token] = key_token_value(a, b, right - a, wrong - b, refinement)
    return values


def _by_group(responses: Sequence[Sequence[int]], groups: Sequence[int], rewards: Sequence[float],
              frequency: bool, excluded: Collection[int]) -> dict[int, dict[int, float]]:
    if not len(responses) == len(groups) == len(rewards):
        raise ValueError(f"{len(responses)} responses, {len(groups)} groups and {len(rewards)} rewards: one each "
                         "per response")
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    return {g: group_values([responses[i] for i in rows], [rewards[i] > 0 for i in rows], frequency, excluded)
            for g, rows in members.items()}


def ktae_values(responses: Sequence[Sequence[int]], reasoning_lens: Sequence[int], groups: Sequence[int],
                rewards: Sequence[float], frequency: bool = True, excluded: Collection[int] = ()) -> list[Tensor]:
    """Per response, the signed value ``v`` of each reasoning token's type in its group (:func:`group_values`);
    the tables are built over each response's whole token list (``responses``), correct meaning reward > 0."""
    if len(reasoning_lens) != len(responses):
        raise ValueError(f"{len(responses)} responses and {len(reasoning_lens)} reasoning lengths")
    values = _by_group(responses, groups, rewards, frequency, excluded)
    return [torch.tensor([values[g][t] for t in list(r)[:n]], dtype=torch.float32)
            for r, n, g in zip(responses, reasoning_lens, groups)]


def ktae_scores(responses: Sequence[Sequence[int]], reasoning_lens: Sequence[int], groups: Sequence[int],
                rewards: Sequence[float], frequency: bool = True, excluded: Collection[int] = ()) -> list[Tensor]:
    """``|v|`` of each reasoning token (:func:`ktae_values`): an importance for OAR's gate."""
    return [v.abs() for v in ktae_values(responses, reasoning_lens, groups, rewards, frequency, excluded)]


def rule_advantages(advantages: Tensor, completion_ids: Tensor, completion_mask: Tensor, groups: Sequence[int],
                    rewards: Sequence[float], excluded: Collection[int] = ()) -> Tensor:
    """KTAE's own token advantages [B, T]: ``(A_i + v_{i,t}) * mask``, GRPO's advantage ``A_i`` [B] plus the
    released key-token value of each completion token's type in its group (``v`` unscaled, as released: the
    authors add it to the group-standardised advantage, which TRL's default ``scale_rewards="group"``
    computes). A row with ``A_i = 0`` in a mixed group still gets ``v``; an all-right or all-wrong group
    gets 0 everywhere."""
    if advantages.dim() != 1 or completion_ids.shape != completion_mask.shape or \
            completion_ids.shape[0] != advantages.shape[0]:
        raise ValueError(f"advantages {tuple(advantages.shape)} must be [B] for completions "
                         f"{tuple(completion_ids.shape)} and mask {tuple(completion_mask.shape)}")
    ids, mask = completion_ids.cpu(), completion_mask.cpu().bool()
    responses = [row[m].tolist() for row, m in zip(ids, mask)]
    values = _by_group(responses, groups, rewards, True, excluded)
    v = torch.zeros(ids.shape, dtype=torch.float32)
    for i, (row, g) in enumerate(zip(ids.tolist(), groups)):
        v[i] = torch.tensor([values[g].get(t, 0.0) for t in row])
    v = v.to(advantages.device)
    return (advantages[:, None].to(v.dtype) + v) * completion_mask.to(v.dtype)
