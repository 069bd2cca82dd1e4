"""The ground-truth track's step-level scores on responses worked by hand: a step's credit, first-error
localisation with ties, ProcessBench's flag rule, accuracies and F1, and the sign of a signed entry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oar.bench import credit, step_level


def chain(correct: bool, rights: tuple[bool, bool, bool], relations=("=", "=", "=")) -> dict:
    """Three steps of 4 tokens each (12 reasoning tokens): step i's decisive tokens are its relation at
    4i + 1 and its one-digit result at 4i + 2."""
    steps = [{"positions": [4 * i + 1, 4 * i + 2], "relation": relations[i], "relation_at": 4 * i + 1,
              "right": rights[i]} for i in range(3)]
    return {"problem": 0, "sample": 0, "reasoning_len": 12, "correct": correct,
            "decisive": [p for s in steps for p in s["positions"]], "steps": steps}


WRONG = chain(False, (True, False, True), ("=", "~", "="))  # the second step errs
RIGHT = chain(True, (True, True, True))


def test_a_step_s_credit_is_the_mean_magnitude_over_its_decisive_tokens():
    scores = np.zeros(12)
    scores[[1, 2]] = [1.0, 3.0]  # step 1: mean 2
    scores[[5, 6]] = [-4.0, 0.0]  # step 2: mean |.| 2
    scores[[9, 10]] = [0.5, 0.5]  # step 3: 0.5
    scores[0] = 100.0  # not a decisive token: no step's credit
    assert step_level.step_credits(scores, WRONG) == [(0, 2.0), (1, 2.0), (2, 0.5)]
    # steps 1 and 2 tie at the top: the erring step 2 is the one of most credit in half of the orders
    assert step_level.first_error_hit(scores, WRONG) == (0.5, pytest.approx(1 / 3))
    scores[6] = 1.0  # step 2 now 2.5 alone at the top
    assert step_level.first_error_hit(scores, WRONG) == (1.0, pytest.approx(1 / 3))
    scores[[1, 2]] = [9.0, 9.0]
    assert step_level.first_error_hit(scores, WRONG)[0] == 0.0
    # right responses and wrong ones whose steps are all right have no erring step to locate
    assert step_level.first_error_hit(scores, RIGHT) is None
    assert step_level.first_error_hit(scores, chain(False, (True, True, True))) is None


def test_the_flag_rule_needs_the_top_step_to_stand_out_twice_over():
    # top 5 against the others' mean (1 + 2) / 2 = 1.5: 5 > 3, flagged
    assert step_level.flagged_step([(0, 1.0), (1, 5.0), (2, 2.0)]) == ([1], True)
    # top 3 against 1.5: exactly 2x is not more than 2x
    assert step_level.flagged_step([(0, 1.0), (1, 3.0), (2, 2.0)]) == ([1], False)
    # two tied at 4 with a 0: for either, the others' mean is (4 + 0) / 2 = 2, so 4 > 4 fails
    assert step_level.flagged_step([(0, 4.0), (1, 4.0), (2, 0.0)]) == ([0, 1], False)
    # equal credit, all zero, a lone step above 0 and a lone step at 0
    assert step_level.flagged_step([(0, 1.0), (1, 1.0)])[1] is False
    assert step_level.flagged_step([(0, 0.0), (1, 0.0), (2, 0.0)])[1] is False
    assert step_level.flagged_step([(0, 0.1)])[1] is True and step_level.flagged_step([(0, 0.0)])[1] is False


def test_processbench_judges_wrong_and_right_responses_and_f1_is_their_harmonic_mean():
    blame = np.zeros(12)
    blame[[5, 6]] = 3.0  # all the credit on the erring step: flagged there
    blame[[1, 2, 9, 10]] = 1.0  # others' mean 1, 3 > 2
    assert step_level.processbench(blame, WRONG) == ("wrong", 1.0)
    assert step_level.processbench(blame, RIGHT) == ("right", 0.0)  # the same shape on a right one: an error
    flat = np.ones(12)
    assert step_level.processbench(flat, WRONG) == ("wrong", 0.0)  # located in a third of orders, but not flagged
    assert step_level.processbench(flat, RIGHT) == ("right", 1.0)
    assert step_level.processbench(flat, chain(True, (True, False, True))) is None  # right answer, wrong step
    assert step_level.f1(1.0, 0.5) == pytest.approx(2 / 3) and step_level.f1(0.0, 1.0) == 0.0
    assert math.isnan(step_level.f1(math.nan, 1.0))


def test_the_sign_of_a_signed_entry():
    scores = np.zeros(12)
    scores[5] = -0.3  # the erring `~` pushes down
    assert step_level.sign_scores(scores, WRONG) == ("wrong", 1.0)
    scores[5] = 0.0
    assert step_level.sign_scores(scores, WRONG) == ("wrong", 0.5)  # no sign: half
    scores[5] = 0.2
    assert step_level.sign_scores(scores, WRONG) == ("wrong", 0.0)
    right = np.zeros(12)
    right[[1, 2, 5]] = 1.0  # three of six decisive above 0
    right[6] = -1.0  # one below
    # (3 + 0.5 x 2 zeros) / 6
    assert step_level.sign_scores(right, RIGHT) == ("right", pytest.approx(4 / 6))


def test_the_track_carries_the_step_level_scores_with_clustered_intervals():
    """Four responses of two problems: a wrong one located and flagged, a wrong one missed, and two right
    ones (one judged right); first error 1/2, erroneous 1/2, correct 1/2, F1 1/2, chance 1/3."""
    located = np.zeros(12)
    located[[5, 6]] = 3.0
    missed = np.zeros(12)
    missed[[1, 2]] = 3.0
    rows = [dict(WRONG, problem=0, sample=0), dict(WRONG, problem=1, sample=0), dict(RIGHT, problem=0, sample=1),
            dict(RIGHT, problem=1, sample=1)]
    result = credit.evaluate("truth", [located, missed, np.ones(12), missed], rows)
    s = result["step_level"]
    assert result["signed"] is False and "sign_wrong" not in s
    assert s["first_error"]["mean"] == 0.5 and s["first_error"]["n"] == 2 and s["first_error"]["clusters"] == 2
    assert s["processbench_wrong"]["mean"] == 0.5 and s["processbench_right"]["mean"] == 0.5
    assert s["processbench_f1"] == pytest.approx(0.5) and s["chance_first_error"] == pytest.approx(1 / 3)
    assert s["first_error"]["ci_low"] < 0.5 < s["first_error"]["ci_high"]
    signed = credit.evaluate("mine", [-located, missed, np.ones(12), missed], rows, signed=True)["step_level"]
    # the erring relation (position 5): -3 in the first, 0 in the second; right decisive tokens: all 1,
    # then two of six at 3 and four zeros (2 + 2) / 6
    assert signed["sign_wrong"]["mean"] == pytest.approx(0.75)
    assert signed["sign_right"]["mean"] == pytest.approx((1 + 4 / 6) / 2)
    # magnitudes: the signed scores locate as their unsigned form does
    assert signed["first_error"]["mean"] == s["first_error"]["mean"]


def test_a_scorer_registered_signed_is_scored_for_its_sign(registered):
    from oar.method.scorer_registry import register_scorer

    register_scorer("step_level_signed_probe", lambda batch: [], signed=True)
    registered("step_level_signed_probe")
    assert credit.is_signed("step_level_signed_probe") and not credit.is_signed("truth")
    result = credit.evaluate("step_level_signed_probe", [np.zeros(12)], [WRONG])
    assert result["signed"] is True and result["step_level"]["sign_wrong"]["mean"] == 0.5
