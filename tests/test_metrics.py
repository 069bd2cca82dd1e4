"""Analysis metrics (oar.method.metrics), checked against hand-computed values and brute-force definitions."""

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch

from oar.method.metrics import (
    AccuracySummary,
    average_precision,
    default_k,
    ess_ratio,
    expected_average_precision,
    mean_accuracy,
    outrank_share,
    pass_at_k,
    recall_at_k,
    spearman,
    top_mass,
    topk_hits,
    topk_overlap,
)

pytestmark = pytest.mark.quick

# --- ess_ratio ----------------------------------------------------------------------------------------


def test_ess_is_one_for_uniform_weights():
    weights = torch.full((3, 50), 0.7)
    assert torch.allclose(ess_ratio(weights, torch.ones(3, 50, dtype=torch.bool)), torch.ones(3))


def test_ess_hand_examples():
    weights = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    # (1+2+3)^2 / (3 * 14) = 6/7 ; 4^2 / (4 * 16) = 1/4
    assert torch.allclose(ess_ratio(weights, mask), torch.tensor([6 / 7, 0.25]))


def test_ess_ignores_padding_whatever_its_value():
    weights = torch.tensor([[1.0, 2.0, 3.0]])
    padded = torch.tensor([[1.0, 2.0, 3.0, 100.0, -5.0]])
    mask = torch.tensor([[True, True, True, False, False]])
    assert torch.allclose(ess_ratio(padded, mask), ess_ratio(weights, torch.ones(1, 3, dtype=torch.bool)))


def test_ess_nan_for_empty_rows_and_dtype_promotion():
    weights = torch.ones(2, 3, dtype=torch.float16)
    result = ess_ratio(weights, torch.tensor([[True, False, True], [False, False, False]]))
    assert result.dtype == torch.float32
    assert result[0] == 1.0 and torch.isnan(result[1])


def test_ess_rejects_bad_inputs():
    with pytest.raises(ValueError, match="bool"):
        ess_ratio(torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="shape"):
        ess_ratio(torch.ones(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="2-D"):
        ess_ratio(torch.ones(3), torch.ones(3, dtype=torch.bool))


# --- top_mass -----------------------------------------------------------------------------------------


def test_top_mass_uniform_and_one_hot():
    mask = torch.ones(1, 100, dtype=torch.bool)
    assert top_mass(torch.full((1, 100), -1.3), mask).item() == pytest.approx(0.1)
    one_hot = torch.zeros(1, 100)
    one_hot[0, 37] = 2.0
    assert top_mass(one_hot, mask).item() == pytest.approx(1.0)


def test_top_mass_hand_example_uses_ceil_per_row():
    # Row 0: T = 11, k = ceil(1.1) = 2; |A| = 5, 4, 1 x 9 -> (5 + 4) / 18.
    # Row 1: T = 3 of 11 columns, k = ceil(0.3) = 1; |A| = 1, 3, 2 -> 3 / 6 (padding 50 ignored).
    advantages = torch.tensor([[-5.0, 4.0] + [1.0] * 9, [1.0, -3.0, 2.0] + [50.0] * 8])
    mask = torch.tensor([[True] * 11, [True] * 3 + [False] * 8])
    assert torch.allclose(top_mass(advantages, mask), torch.tensor([0.5, 0.5]))


def test_top_mass_fraction_is_not_hit_by_float_round_off():
    # 0.07 * 100 = 7.000000000000001 in binary floating point; k must still be 7, not 8.
    mask = torch.ones(1, 100, dtype=torch.bool)
    assert top_mass(torch.ones(1, 100), mask, fraction=0.07).item() == pytest.approx(0.07)


def test_top_mass_nan_for_zero_mass_and_bad_fraction():
    result = top_mass(torch.zeros(2, 4), torch.tensor([[True] * 4, [False] * 4]))
    assert torch.isnan(result).all()
    with pytest.raises(ValueError, match="fraction"):
        top_mass(torch.ones(1, 4), torch.ones(1, 4, dtype=torch.bool), fraction=0.0)


# --- default_k and recall_at_k ------------------------------------------------------------------------


def test_default_k():
    assert default_k(100) == 10
    assert default_k(101) == 11
    assert default_k(5) == 1
    assert default_k(0) == 1
    assert default_k(100, fraction=0.07) == 7
    with pytest.raises(ValueError, match="fraction"):
        default_k(10, fraction=1.5)
    with pytest.raises(ValueError):
        default_k(-1)


def test_recall_hand_examples():
    scores = [0.9, 0.1, 0.8, 0.3]
    assert recall_at_k(scores, {0, 3}, k=2) == 0.5  # top-2 = {0, 2}
    assert recall_at_k(scores, [2], k=2) == 1.0  # |oracle| = 1 < k: divide by 1
    assert recall_at_k(torch.tensor(scores), {1, 3}, k=2) == 0.0
    assert recall_at_k(scores, {0, 1, 2, 3}, k=3) == 1.0
    assert recall_at_k(scores, {1}, k=10) == 1.0  # k beyond the length takes every token


def test_recall_ties_go_to_the_lower_index():
    assert recall_at_k([1.0, 1.0, 1.0, 1.0], {0}, k=1) == 1.0
    assert recall_at_k([1.0, 1.0, 1.0, 1.0], {1}, k=1) == 0.0


def test_recall_empty_oracle_and_bad_inputs():
    assert math.isnan(recall_at_k([0.1, 0.2], set(), k=1))
    with pytest.raises(ValueError, match="oracle"):
        recall_at_k([0.1, 0.2], {2}, k=1)
    with pytest.raises(ValueError, match="k"):
        recall_at_k([0.1, 0.2], {0}, k=0)
    with pytest.raises(ValueError, match="nan"):
        recall_at_k([0.1, float("nan")], {0}, k=1)


# --- spearman and topk_overlap -----------------------------------------------------------------------


def test_spearman_hand_cases():
    assert spearman([1, 2, 3, 4], [10, 20, 35, 400]) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), [3, 2, 1]) == pytest.approx(-1.0)
    # Average ranks for ties: [1, 2.5, 2.5, 4] against [1, 2, 3, 4] gives 4.5 / sqrt(4.5 * 5).
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(spearman([5, 5, 5], [1, 2, 3]))


def test_spearman_agrees_with_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 5, 40), rng.normal(size=40)
    assert spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b).statistic)


def test_topk_overlap_hand_cases():
    a = [9.0, 8.0] + [0.0] * 18  # k = ceil(0.1 * 20) = 2: top {0, 1}
    b = [0.0, 7.0] + [0.0] * 3 + [9.0] + [0.0] * 14  # top {5, 1}
    assert topk_overlap(a, b) == 0.5
    assert topk_overlap(a, a) == 1.0
    assert topk_overlap([4, 3, 2, 1], [1, 2, 3, 4], fraction=0.5) == 0.0
    with pytest.raises(ValueError, match="length"):
        topk_overlap([1, 2], [1, 2, 3])


# --- pass_at_k ----------------------------------------------------------------------------------------


def test_pass_at_k_matches_the_combinatorial_definition():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute = sum(any(subset) for subset in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_edge_cases_and_validation():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(1000, 10, 100) == pytest.approx(1 - math.comb(990, 100) / math.comb(1000, 100))
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


# --- mean_accuracy ------------------------------------------------------------------------------------


def test_all_correct_gives_mean_one_and_a_degenerate_interval():
    summary = mean_accuracy(np.ones((30, 4)))
    assert summary == AccuracySummary(mean=1.0, ci_low=1.0, ci_high=1.0, n_problems=30, n_samples_per_problem=4)


def test_mean_over_problems_of_the_mean_over_samples():
    correct = [[1, 0], [1, 1], [0, 0], [1, 1]]  # per problem 0.5, 1, 0, 1
    summary = mean_accuracy(correct)
    assert summary.mean == pytest.approx(0.625)
    assert (summary.n_problems, summary.n_samples_per_problem) == (4, 2)
    assert summary.ci_low <= summary.mean <= summary.ci_high


def test_interval_is_reproducible_and_close_to_the_normal_approximation():
    correct = np.array([[1], [0]] * 200, dtype=bool)  # 400 problems, greedy, accuracy 0.5
    first, again = mean_accuracy(correct, seed=7), mean_accuracy(correct, seed=7)
    assert first == again
    half_width = 1.96 * math.sqrt(0.25 / 400)  # about 0.049
    assert first.ci_low == pytest.approx(0.5 - half_width, abs=0.01)
    assert first.ci_high == pytest.approx(0.5 + half_width, abs=0.01)


def test_mean_accuracy_rejects_bad_inputs():
    with pytest.raises(ValueError, match="2-D"):
        mean_accuracy([1, 0, 1])
    with pytest.raises(ValueError, match="0/1"):
        mean_accuracy([[1, 2]])
    with pytest.raises(ValueError, match="confidence"):
        mean_accuracy([[1]], confidence=1.0)
    with pytest.raises(ValueError, match="n_boot"):
        mean_accuracy([[1]], n_boot=0)


# --- average precision and rank shares (the token-credit benchmark) -----------------------------------


def test_average_precision_by_hand():
    # order 0, 2, 3, 1: the relevant tokens 1 and 2 at ranks 4 and 2 -> (1/2 + 2/4) / 2
    assert average_precision([0.9, 0.1, 0.8, 0.3], {1, 2}) == pytest.approx(0.5)
    assert average_precision([0.1, 0.9, 0.8, 0.3], [1, 2]) == 1.0
    # a tie of the relevant token with another at the top: rank 1 or 2 equally often -> (1 + 1/2) / 2
    assert average_precision([1.0, 1.0, 0.0], [1]) == pytest.approx(0.75)
    assert math.isnan(average_precision([1.0, 2.0], []))
    with pytest.raises(ValueError, match="relevant indices"):
        average_precision([1.0, 2.0], [2])


def _tie_orders(scores):
    """Every ranking of ``scores`` that breaks its ties some way (as score vectors without ties)."""
    values = np.asarray(scores, dtype=float)
    for order in itertools.permutations(range(len(values))):
        ranks = np.empty(len(values))
        ranks[list(order)] = np.arange(len(values))
        if all(values[a] > values[b] or (values[a] == values[b]) for a, b in zip(order, order[1:])):
            yield [-float(r) for r in ranks]


@pytest.mark.parametrize("scores, relevant, k", [
    ([2.0, 1.0, 1.0, 1.0, 0.0, 0.0], {1, 4}, 2),
    ([1.0, 1.0, 1.0, 1.0, 1.0], {0, 3}, 3),
    ([3.0, 0.0, 3.0, 1.0, 0.0, 3.0], {1, 2, 5}, 4),
    ([0.5, 0.5, 0.2, 0.2, 0.9], {2}, 1),
])
def test_ties_count_as_the_mean_over_their_orders(scores, relevant, k):
    orders = list(_tie_orders(scores))
    assert average_precision(scores, relevant) == pytest.approx(
        np.mean([average_precision(o, relevant) for o in orders]))
    hits = [len(set(np.argsort(-np.asarray(o), kind="stable")[:k].tolist()) & relevant) for o in orders]
    assert topk_hits(scores, relevant, k) == pytest.approx(np.mean(hits))


@pytest.mark.parametrize("r_len, m", [(1, 1), (2, 1), (4, 2), (5, 3), (6, 1), (6, 6)])
def test_expected_average_precision_is_the_mean_over_every_ranking(r_len, m):
    relevant = set(range(m))
    aps = [average_precision([-float(rank) for rank in order], relevant)
           for order in itertools.permutations(range(r_len))]
    assert expected_average_precision(r_len, m) == pytest.approx(float(np.mean(aps)))


def test_outrank_share_counts_ties_half():
    assert outrank_share([3.0, 1.0, 3.0, 5.0], 0, [1, 2, 3]) == pytest.approx((1 + 0.5 + 0) / 3)
    assert outrank_share([2.0, 2.0], 0, [1]) == 0.5
    assert math.isnan(outrank_share([2.0], 0, []))
