import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oar.method.gate import gate, token_advantages

pytestmark = pytest.mark.quick


def reference_gate(scores: list[float], tau: float, beta: float, floor: float = 0.1,
                   dtype: torch.dtype = torch.float32) -> list[float]:
    """method.md section 6 for one response, written out step by step."""
    # In the implementation's dtype (float32 for float32 scores): the gate is discontinuous at
    # n == theta, so a reference in another precision would disagree on which side of theta a token falls.
    logs = torch.log1p(torch.tensor(scores, dtype=dtype))
    low, high = logs.min(), logs.max()
    if high == low:
        return [1.0] * len(scores)
    norm = (logs - low) / (high - low)
    theta = torch.quantile(norm, tau).item()
    raw = []
    for n in norm.tolist():
        if n < theta:
            raw.append(max(n / theta, floor))
        else:
            raw.append(1.0 + (beta * (n - theta) / (1 - theta) if theta < 1 else 0.0))
    total = sum(raw)
    return [w * len(scores) / total for w in raw]


def test_worked_example_of_method_section_6():
    scores = torch.tensor([[0.0, 1.0, 3.0, 7.0]])
    weights = gate(scores, torch.ones_like(scores, dtype=torch.bool), tau=0.5, beta=2.0)[0]
    assert weights.sum().item() == pytest.approx(4.0, abs=1e-5)
    assert weights.argmax().item() == 3
    # Before renormalisation the first token sits at the floor 0.1; the renormaliser is R / sum(raw),
    # with raw = [0.1, 2/3, 1 + 2 * (2/3 - 1/2) / (1/2), 3].
    raw = [0.1, 2 / 3, 1 + 2 * (2 / 3 - 0.5) / 0.5, 3.0]
    expected = [w * 4 / sum(raw) for w in raw]
    assert weights.tolist() == pytest.approx(expected, abs=1e-5)
    assert weights[0].item() == pytest.approx(0.1 * 4 / sum(raw), abs=1e-6)


def test_tau_zero_is_boost_only_and_tau_one_is_suppress_only():
    scores = torch.tensor([[0.0, 1.0, 3.0, 7.0, 2.0]])
    mask = torch.ones_like(scores, dtype=torch.bool)
    beta = 2.0
    boost = gate(scores, mask, tau=0.0, beta=beta)[0]
    suppress = gate(scores, mask, tau=1.0, beta=beta)[0]
    logs = torch.log1p(scores[0])
    norm = (logs - logs.min()) / (logs.max() - logs.min())
    # tau = 0: theta = min n = 0, every token in the boost band: raw = 1 + beta * n.
    raw_boost = 1 + beta * norm
    assert boost.tolist() == pytest.approx((raw_boost * 5 / raw_boost.sum()).tolist(), abs=1e-5)
    # tau = 1: theta = max n = 1, every token but the top in the suppression band: raw = max(n, floor),
    # and the top token gets exactly 1 (no boost); beta plays no role.
    raw_suppress = norm.clamp_min(0.1)
    assert suppress.tolist() == pytest.approx((raw_suppress * 5 / raw_suppress.sum()).tolist(), abs=1e-5)
    assert gate(scores, mask, tau=1.0, beta=7.0)[0].tolist() == pytest.approx(suppress.tolist(), abs=1e-6)


def test_non_reasoning_positions_are_exactly_one_and_degenerate_rows_are_all_one():
    scores = torch.tensor(
        [
            [5.0, 0.0, 2.0, 9.0, 9.0],  # reasoning = first three
            [3.0, 3.0, 3.0, 0.0, 0.0],  # all equal
            [1.0, 2.0, 3.0, 4.0, 5.0],  # no reasoning token
            [1.0, float("nan"), 3.0, 0.0, 0.0],  # a NaN score: no signal, no reshaping
        ]
    )
    mask = torch.tensor(
        [[1, 1, 1, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool
    )
    weights = gate(scores, mask, tau=0.4, beta=2.0)
    assert torch.equal(weights[0, 3:], torch.ones(2))
    assert weights[0, :3].sum().item() == pytest.approx(3.0, abs=1e-5)
    assert torch.equal(weights[1:], torch.ones(3, 5))


def test_weights_carry_no_gradient():
    scores = torch.tensor([[0.0, 1.0, 3.0]], requires_grad=True)
    weights = gate(scores, torch.ones(1, 3, dtype=torch.bool), tau=0.4, beta=2.0)
    assert not weights.requires_grad


def test_token_advantages_keep_total_mass():
    scores = torch.tensor([[0.0, 1.0, 3.0, 7.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    weights = gate(scores, mask, tau=0.4, beta=2.0)
    for advantage in (1.5, -0.7):
        token_adv = token_advantages(weights, torch.tensor([advantage]))
        assert token_adv.sum().item() == pytest.approx(5 * advantage, abs=1e-5)


@pytest.mark.parametrize("key, kwargs", [("tau", {"tau": 1.5}), ("beta", {"beta": -1.0}), ("floor", {"floor": 0.0})])
def test_invalid_parameters_are_named(key, kwargs):
    args = {"tau": 0.4, "beta": 2.0, "floor": 0.1} | kwargs
    with pytest.raises(ValueError, match=key):
        gate(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.bool), **args)


rows = st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False, width=32), min_size=1, max_size=24)


@settings(max_examples=150, deadline=None)
@given(
    scores=rows,
    tau=st.one_of(st.just(0.0), st.just(1.0), st.floats(min_value=1e-3, max_value=1.0)),
    beta=st.floats(min_value=0.0, max_value=8.0),
    pad_left=st.integers(0, 5),
    pad_right=st.integers(0, 5),
)
def test_gate_properties(scores, tau, beta, pad_left, pad_right):
    r = len(scores)
    row = torch.tensor(scores)
    weights = gate(row[None], torch.ones(1, r, dtype=torch.bool), tau=tau, beta=beta)[0]

    assert (weights > 0).all()
    assert weights.sum().item() == pytest.approx(r, rel=1e-4)
    assert weights.tolist() == pytest.approx(reference_gate(scores, tau, beta), rel=1e-4, abs=1e-5)
    # Order: a higher score never gets a lower weight.
    order = torch.argsort(row, stable=True)
    assert (weights[order].diff() >= -1e-5).all()

    # Padding invariance: the same row surrounded by non-reasoning positions with arbitrary scores.
    padded = torch.cat([torch.full((pad_left,), 123.0), row, torch.full((pad_right,), 9.0)])
    mask = torch.zeros(padded.numel(), dtype=torch.bool)
    mask[pad_left : pad_left + r] = True
    padded_weights = gate(padded[None], mask[None], tau=tau, beta=beta)[0]
    assert torch.allclose(padded_weights[mask], weights, atol=1e-6)
    assert torch.equal(padded_weights[~mask], torch.ones(pad_left + pad_right))


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(rows, min_size=1, max_size=6), tau=st.floats(0.0, 1.0), beta=st.floats(0.0, 4.0))
def test_batched_rows_equal_rows_gated_alone(batch, tau, beta):
    width = max(len(r) for r in batch)
    scores = torch.zeros(len(batch), width)
    mask = torch.zeros(len(batch), width, dtype=torch.bool)
    for i, r in enumerate(batch):
        scores[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = True
    together = gate(scores, mask, tau=tau, beta=beta)
    for i, r in enumerate(batch):
        alone = gate(torch.tensor([r]), torch.ones(1, len(r), dtype=torch.bool), tau=tau, beta=beta)[0]
        assert torch.allclose(together[i, : len(r)], alone, atol=1e-6)


def test_float64_scores_are_gated_in_float64():
    """Differences of 1e-9 on scores near 1 vanish in float32 (the row would look constant and get
    weights 1); float64 scores keep them, and low-precision scores are still gated in float32."""
    scores = [1.0, 1.0 + 1e-9, 1.0 + 2e-9, 1.0 + 4e-9, 1.0 + 8e-9]
    mask = torch.ones(1, len(scores), dtype=torch.bool)
    weights = gate(torch.tensor([scores], dtype=torch.float64), mask, tau=0.4, beta=2.0)[0]
    assert weights.dtype == torch.float64
    expected = reference_gate(scores, 0.4, 2.0, dtype=torch.float64)
    assert len(set(expected)) > 1  # reshaped, not all ones
    assert weights.tolist() == pytest.approx(expected, abs=1e-9)
    half = gate(torch.tensor([[0.0, 1.0, 3.0, 7.0]], dtype=torch.bfloat16), mask[:, :4], tau=0.5, beta=2.0)
    assert half.dtype == torch.bfloat16
    assert half[0].float().tolist() == pytest.approx(reference_gate([0.0, 1.0, 3.0, 7.0], 0.5, 2.0), abs=2e-2)


# ------------------------------------------------------------------------------ the mechanism's rescue


def test_hold_to_rest_gives_the_held_tokens_the_rests_mean_and_keeps_the_mass():
    from oar.method.interventions import hold_to_rest

    weights = torch.tensor([[0.2, 3.0, 2.6, 0.6, 0.6, 1.0, 1.0],
                            [0.5, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0],
                            [2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    reasoning = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out = hold_to_rest(weights, reasoning, [(1, 2), None, (0, 1)])
    # row 0: the held tokens take the mean of the rest (0.2, 0.6, 0.6 -> 1.4 / 3), then the reasoning is
    # rescaled to its former sum 7.0 (x 3); the answer tokens keep their 1.0
    assert torch.allclose(out[0, :5], torch.tensor([0.6, 1.4, 1.4, 1.8, 1.8], dtype=torch.float64))
    assert out[0, :5].sum().item() == pytest.approx(7.0) and torch.equal(out[0, 5:], weights[0, 5:])
    assert torch.equal(out[1], weights[1])  # nothing held
    assert torch.equal(out[2], weights[2])  # all of the reasoning held: no rest to hold it to
    with pytest.raises(ValueError, match="row 0: positions \\[5\\] are not all reasoning positions"):
        hold_to_rest(weights, reasoning, [(5,), None, None])


def test_the_placebo_holds_as_many_top_weighted_tokens_outside_the_protected_ones():
    from oar.method.interventions import hold_to_rest, hold_top_outside, top_outside

    weights = torch.tensor([[0.2, 3.0, 2.6, 0.6, 2.6, 1.0, 1.0],
                            [0.5, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0],
                            [2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    reasoning = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    protected = [(1, 3), None, (0, 1)]
    # row 0: two protected tokens, so the two heaviest others: 2.6 at 2 and 2.6 at 4 (a tie kept in order);
    # row 1: none protected, none held; row 2: every reasoning token protected, none left to hold
    assert top_outside(weights, reasoning, protected) == [[2, 4], [], []]
    out = hold_top_outside(weights, reasoning, protected)
    assert torch.equal(out, hold_to_rest(weights, reasoning, [(2, 4), None, None]))
    # the protected tokens keep their relative weight (one factor restores the mass) and the mass is kept
    assert out[0, 1] / out[0, 3] == pytest.approx(3.0 / 0.6)
    assert out[0, :5].sum().item() == pytest.approx(weights[0, :5].sum().item())
    assert torch.equal(out[1], weights[1]) and torch.equal(out[2], weights[2])
    with pytest.raises(ValueError, match="row 0: protected positions \\[5\\] are not all reasoning positions"):
        hold_top_outside(weights, reasoning, [(5,), None, None])


# ------------------------------------------------------------------------------ the mechanism's dose


def test_set_to_ratio_sets_the_targets_to_r_times_the_references_mean_and_keeps_the_mass():
    from oar.method.interventions import set_to_ratio

    weights = torch.tensor([[0.5, 3.0, 3.0, 2.0, 1.0, 1.0, 1.0],
                            [0.5, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0],
                            [2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    reasoning = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    out = set_to_ratio(weights, reasoning, [(3,), (1,), None], [(1, 2), None, (0,)], 4.0)
    # row 0: token 3 set to 4 x mean(3.0, 3.0) = 12, then the reasoning (now 0.5 + 3 + 3 + 12 + 1 = 19.5)
    # rescaled to its former sum 9.5; the answer tokens keep their 1.0
    scale = 9.5 / 19.5
    assert torch.allclose(out[0, :5], torch.tensor([0.5, 3.0, 3.0, 12.0, 1.0], dtype=torch.float64) * scale)
    assert out[0, 3] / out[0, 1:3].mean() == pytest.approx(4.0, rel=1e-12)  # the ratio, exactly
    assert out[0, :5].sum().item() == pytest.approx(9.5, rel=1e-12) and torch.equal(out[0, 5:], weights[0, 5:])
    # only the targets move against the rest: every other reasoning token keeps its weight up to the one factor
    others = [0, 1, 2, 4]
    assert torch.allclose(out[0, others] / weights[0, others], torch.full((4,), scale, dtype=torch.float64))
    assert torch.equal(out[1], weights[1])  # no references: nothing to set the targets against
    assert torch.equal(out[2], weights[2])  # no targets
    with pytest.raises(ValueError, match="row 0: targets \\[5\\] are not all reasoning positions"):
        set_to_ratio(weights, reasoning, [(5,), None, None], [None, None, None], 2.0)
    with pytest.raises(ValueError, match="rows \\[0\\]: targets and references share positions"):
        set_to_ratio(weights, reasoning, [(1, 3), None, None], [(1, 2), None, None], 2.0)
    for bad in (0.0, -1.0, float("inf"), float("nan"), "2", True):
        with pytest.raises(ValueError, match="ratio must be a finite number above 0"):
            set_to_ratio(weights, reasoning, [(3,), None, None], [(1,), None, None], bad)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([0.5, 2.0, 4.0, 8.0]))
def test_the_dose_of_the_truth_gate_is_the_truth_gate_at_ratio_1_and_its_ratio_elsewhere(seed, ratio):
    """The truth gate's binary scores give every decisive token one weight, so its dose at r = 1 returns
    the gate's weights bit for bit (the dose-response reuses the truth gate's runs for that level); at any
    other r the last step's decisive tokens weigh r times the earlier steps', the reasoning's mass kept,
    and the other tokens keep their relative weights."""
    from oar.method.interventions import set_to_ratio

    g = torch.Generator().manual_seed(seed)
    rows, width = 6, int(torch.randint(12, 300, (1,), generator=g))
    reasoning = torch.zeros(rows, width, dtype=torch.bool)
    decisive, final, earlier = [], [], []
    for i in range(rows):
        length = int(torch.randint(8, width + 1, (1,), generator=g))
        reasoning[i, :length] = True
        marked = sorted(torch.randperm(length, generator=g)[: max(2, length // 5)].tolist())
        cut = max(1, len(marked) // 5)  # the last step's decisive tokens come last
        decisive.append(marked)
        final.append(marked[-cut:])
        earlier.append(marked[:-cut])
    scores = torch.zeros(rows, width)
    for i, row in enumerate(decisive):
        scores[i, row] = 1.0
    weights = gate(scores, reasoning, 0.4, 2.0)
    assert torch.equal(set_to_ratio(weights, reasoning, final, earlier, 1.0), weights)
    out = set_to_ratio(weights, reasoning, final, earlier, ratio)
    for i in range(rows):
        assert (out[i, final[i]] / out[i, earlier[i]].mean()).tolist() == pytest.approx([ratio] * len(final[i]),
                                                                                        rel=1e-5)
        assert out[i, reasoning[i]].sum().item() == pytest.approx(weights[i, reasoning[i]].sum().item(), rel=1e-5)
        assert torch.equal(out[i, ~reasoning[i]], weights[i, ~reasoning[i]])
        rest = [t for t in range(int(reasoning[i].sum())) if t not in final[i]]
        factor = out[i, rest] / weights[i, rest]
        assert torch.allclose(factor, factor[0].expand_as(factor))
