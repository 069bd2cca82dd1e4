"""KTAE as its authors released it (oar.method.ktae): the exact p = 1 rule, the term-frequency refinement
and KTAE's own advantage rule, each on a worked example by hand; its registered entries."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from oar.method.ktae import (fisher_two_sided, group_values, ktae_scores, ktae_values, rule_advantages,
                             significance)
from oar.method.scorer_registry import scorer_spec


def test_p_is_one_exactly_where_the_observed_table_is_a_most_likely_one():
    # [[2, 1], [0, 1]]: 3 responses hold the token, 2 are correct; x = a in {1, 2}, weights C(2,x) C(2,3-x) = 2, 2:
    # a tie, so p = (2 + 2) / C(4, 3) = 1 exactly, and F = 0 (a float sum can land just below 1)
    assert fisher_two_sided(2, 1, 0, 1) == 1 and significance(2, 1, 0, 1) == 0.0
    # [[2, 3], [1, 2]] (one of the tables a float32 test rounds below 1): weights 1, 15, 30, 10 for
    # x = 0..3 of C(8, 5) = 56; the observed 30 is the mode, so every table counts: p = 56 / 56 = 1
    assert fisher_two_sided(2, 3, 1, 2) == 1 and significance(2, 3, 1, 2) == 0.0
    # [[2, 0], [0, 2]]: weights 1, 4, 1 of 6, observed 1: p = 2/6, F = exp(-2/3)
    assert fisher_two_sided(2, 0, 0, 2) == Fraction(1, 3)
    assert significance(2, 0, 0, 2) == pytest.approx(math.exp(-2 / 3))


def test_the_term_frequency_refinement_worked_by_hand():
    """Correct [5, 5, 5, 7] and [5, 8], incorrect [5, 9] and [6, 6]. Token 5: table [[2, 1], [0, 1]], p = 1
    (a tie, above), so F = 0; IG = 1 - 3/4 H(2/3) = 0.311278 bits; h = asin 1 - asin sqrt(1/2) = pi/4.
    Lengths 6 and 4, mean 5: k_c = 2 (0.5 + 0.5 * 6/5) = 2.2, k_w = 2 (0.5 + 0.5 * 4/5) = 1.8;
    T_c = (4/6) 3 / (4/6 + 2.2) = 0.697674, T_w = (1/4) 3 / (1/4 + 1.8) = 0.365854;
    refinement T_c / (T_w + 1e-5) - T_w / (T_c + 1e-5) = 1.906925 - 0.524383 = 1.382542;
    v = 2 (sigmoid(0.311278 / 2 * (pi/4 + 1.382542)) - 1/2) = tanh(0.168708) = 0.167125."""
    responses = [[5, 5, 5, 7], [5, 8], [5, 9], [6, 6]]
    correct = [True, True, False, False]
    ig = 1 - 0.75 * -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    t_c, t_w = (4 / 6) * 3 / (4 / 6 + 2.2), 0.25 * 3 / (0.25 + 1.8)
    refinement = t_c / (t_w + 1e-5) - t_w / (t_c + 1e-5)
    assert (ig, t_c, t_w, refinement) == pytest.approx((0.311278, 0.697674, 0.365854, 1.382542), abs=1e-6)
    v = math.tanh(ig / 2 * (math.pi / 4 + refinement) / 2)
    assert v == pytest.approx(0.167125, abs=1e-6)
    values = group_values(responses, correct)
    assert values[5] == pytest.approx(v, rel=1e-12)
    # without the refinement (ktae_presence): tanh(ig / 2 * pi/4 / 2)
    assert group_values(responses, correct, frequency=False)[5] == pytest.approx(math.tanh(ig / 2 * math.pi / 8))
    # token 6 is in one incorrect response only: table [[0, 1], [2, 1]], p = 1 again (the mirror tie), F = 0,
    # IG = 0.311278; T_c = 0, so the refinement is -T_w / 1e-5 and v saturates at -1
    assert values[6] == pytest.approx(-1.0)
    # the pad token, excluded, gets 0 whatever its table
    assert group_values(responses, correct, excluded=(5,))[5] == 0.0


def test_the_scorers_give_the_signed_value_and_its_magnitude_of_each_reasoning_token():
    responses = [[5, 5, 5, 7], [5, 8], [5, 9], [6, 6], [5], [6]]
    lens, groups, rewards = [3, 2, 1, 2, 1, 1], [0, 0, 0, 0, 1, 1], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    signed = ktae_values(responses, lens, groups, rewards)
    v5 = group_values(responses[:4], [True, True, False, False])[5]
    assert signed[0].tolist() == pytest.approx([v5] * 3) and signed[3].tolist() == pytest.approx([-1.0, -1.0])
    assert signed[4].tolist() == signed[5].tolist() == [0.0]  # a group of one outcome: nothing
    assert [s.tolist() for s in ktae_scores(responses, lens, groups, rewards)] == [
        pytest.approx([abs(x) for x in s.tolist()]) for s in signed]


def test_ktae_rule_adds_the_key_value_to_every_completion_token_s_advantage():
    """Group 0: correct [5, 7], [5, 8], incorrect [6, 7], [6, 8] (right-padded with 0). Token 5 is in both
    correct responses only: p = 1/3, IG = 1, h = pi/2, refinement (1/2 * 3 / (1/2 + 2)) / 1e-5 = 60000:
    v = +1 (saturated); token 6 the mirror, -1; tokens 7 and 8, table [[1, 1], [1, 1]], p = 1, IG = 0: 0.
    Group 1 has graded rewards 1, 0.5, 0 (correct: reward > 0): its middle row's A_i = 0 still gets v,
    which no weight w * A_i could give it. Group 2 is all wrong: 0 everywhere."""
    ids = torch.tensor([[5, 7, 0], [5, 8, 0], [6, 7, 0], [6, 8, 0],
                        [3, 4, 0], [3, 0, 0], [4, 0, 0],
                        [5, 0, 0], [6, 0, 0]])
    mask = (ids != 0).long()
    advantages = torch.tensor([0.8, 0.8, -0.8, -0.8, 1.0, 0.0, -1.0, 0.0, 0.0])
    groups = [0, 0, 0, 0, 1, 1, 1, 2, 2]
    rewards = [1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0]
    out = rule_advantages(advantages, ids, mask, groups, rewards, excluded=(0,))
    assert torch.allclose(out[:4], torch.tensor([[1.8, 0.8, 0.0], [1.8, 0.8, 0.0], [-1.8, -0.8, 0.0],
                                                 [-1.8, -0.8, 0.0]]))
    # group 1: token 3 in both correct rows only (table [[2, 0], [0, 1]]: p = 1/3, IG = H(1/3) = 0.918296,
    # refinement (2/3 * 3 / (2/3 + k_c)) / 1e-5 saturates): +1; token 4 in one right, one wrong: table
    # [[1, 1], [1, 0]], weights C(2,1) C(1,1) = 2 and C(2,2) C(1,0) = 1 for x = 1, 2: the observed 2 is the
    # mode, p = 1, F = 0, IG = H(1/3) - 2/3 H(1/2) = 0.251629; T_c = (1/3) 3 / (1/3 + 2 (0.5 + 0.5 * 3/2)) and
    # T_w = 1 * 3 / (1 + 2 (0.5 + 0.5 * 1/2)), lengths 3 and 1, mean 2
    t_c, t_w = (1 / 3) * 3 / (1 / 3 + 2 * (0.5 + 0.5 * 1.5)), 3 / (1 + 2 * (0.5 + 0.25))
    ig4 = -(1 / 3 * math.log2(1 / 3) + 2 / 3 * math.log2(2 / 3)) - 2 / 3
    h4 = math.asin(math.sqrt(1 / 2)) - math.asin(1.0)
    v4 = math.tanh(ig4 / 2 * (h4 + t_c / (t_w + 1e-5) - t_w / (t_c + 1e-5)) / 2)
    assert out[4].tolist() == pytest.approx([2.0, 1.0 + v4, 0.0])
    assert out[5].tolist() == pytest.approx([1.0, 0.0, 0.0])  # A_i = 0: the key value alone
    assert out[6].tolist() == pytest.approx([-1.0 + v4, 0.0, 0.0])
    assert out[7:].tolist() == [[0.0] * 3, [0.0] * 3]


def test_the_entries_are_registered_with_what_they_read():
    for name in ("ktae", "ktae_presence", "ktae_signed"):
        assert scorer_spec(name).needs == frozenset({"groups"})
    assert scorer_spec("ktae_signed").signed and not scorer_spec("ktae").signed
