"""The token-credit benchmark's entries, each against its paper's definition on an example worked by hand:
TRL's top-entropy mask, KTAE's key-token values, PRIME's implicit process reward, the answer's attention."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

from oar.method.answer_attention import answer_attention_scores, answer_span_attention, query_positions
from oar.method.entropy_mask import top_entropy_mask
from oar.method.implicit_reward import implicit_rewards, reasoning_logprobs
from oar.method.ktae import (direction, fisher_two_sided, group_values, information_gain, key_token_value,
                             ktae_scores)
from oar.method.probes import Probe

pytestmark = pytest.mark.quick

# ------------------------------------------------------------------------------- top-entropy mask


def test_the_top_entropy_mask_keeps_the_tokens_at_or_above_the_pooled_quantile():
    # pooled 0.1 0.3 0.5 0.7 0.9; rho 0.2: the 0.8-quantile is 0.7 + 0.2 * (0.9 - 0.7) = 0.74 (linear)
    entropies = [torch.tensor([0.1, 0.5, 0.9]), torch.tensor([0.3, 0.7])]
    assert [m.tolist() for m in top_entropy_mask(entropies, 0.2)] == [[0, 0, 1], [0, 0]]
    # rho 0.4: the 0.6-quantile is 0.5 + 0.4 * 0.2 = 0.58
    assert [m.tolist() for m in top_entropy_mask(entropies, 0.4)] == [[0, 0, 1], [0, 1]]
    assert [m.tolist() for m in top_entropy_mask(entropies, 1.0)] == [[1, 1, 1], [1, 1]]


def test_the_top_entropy_mask_is_trls_own_rule():
    """TRL's GRPOTrainer.get_high_entropy_mask on one process (its gather across processes is the identity
    there) marks the same tokens."""
    from trl import GRPOTrainer

    one_process = SimpleNamespace(pad_across_processes=lambda t, dim, pad_index: t, gather=lambda t: t)
    generator = torch.Generator().manual_seed(0)
    entropies = torch.rand(4, 9, generator=generator) * 3
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, 6:] = mask[3, 4:] = False
    trl = GRPOTrainer.get_high_entropy_mask(SimpleNamespace(accelerator=one_process), entropies, mask, 1 - 0.2)
    ours = top_entropy_mask([entropies[i][mask[i]] for i in range(4)], 0.2)
    assert [m.bool().tolist() for m in ours] == [trl[i][mask[i]].tolist() for i in range(4)]


# ------------------------------------------------------------------------------- KTAE


def test_fisher_two_sided_is_worked_by_hand_and_agrees_with_scipy():
    # margins 2 and 2 of 4: P(x) = C(2, x) C(2, 2 - x) / C(4, 2) = 1/6, 4/6, 1/6
    assert fisher_two_sided(2, 0, 0, 2) == Fraction(1, 3)
    assert fisher_two_sided(1, 1, 1, 1) == 1
    from scipy.stats import fisher_exact

    for table in [(3, 1, 0, 4), (5, 0, 2, 1), (0, 4, 3, 1), (2, 2, 2, 2), (6, 1, 1, 0), (1, 0, 0, 7)]:
        a, b, c, d = table
        assert fisher_two_sided(*table) == pytest.approx(fisher_exact([[a, b], [c, d]]).pvalue, rel=1e-9), table


def test_ktae_values_of_a_group_worked_by_hand():
    """Correct responses [5, 7] and [5, 8], incorrect [6, 7] and [6, 8]. Token 5 is in both correct ones and
    no incorrect one: p = 1/3, F = exp(-2/3), IG = 1 bit (it tells the outcome exactly), direction
    asin(1) - asin(0) = pi / 2, so v = 2 (sigmoid((exp(-2/3) + 1) / 2 * pi / 2) - 1/2) = 0.532994; token 6 the
    mirror image, -v; tokens 7 and 8 are in one of each: p = 1, IG = 0, v = 0."""
    assert information_gain(2, 0, 0, 2) == pytest.approx(1.0)
    assert information_gain(1, 1, 1, 1) == pytest.approx(0.0)
    assert direction(2, 0, 0, 2) == pytest.approx(math.pi / 2)
    v = 2 * (1 / (1 + math.exp(-(math.exp(-2 / 3) + 1) / 2 * math.pi / 2)) - 0.5)
    assert v == pytest.approx(0.532994, abs=1e-6)
    values = group_values([[5, 7], [5, 8], [6, 7], [6, 8]], [True, True, False, False], frequency=False)
    assert values[5] == pytest.approx(v) and values[6] == pytest.approx(-v)
    assert values[7] == values[8] == 0.0
    assert key_token_value(2, 0, 0, 2) == pytest.approx(v)
    # as a scorer (presence only, ktae_presence): |v| of each reasoning token's type; a group of one outcome
    # only scores 0. The released form with its term-frequency term: tests/test_ktae.py
    scores = ktae_scores([[5, 7], [5, 8], [6, 7], [6, 8], [5, 7], [6, 8]], [2, 1, 2, 2, 2, 2],
                         [0, 0, 0, 0, 1, 1], [1.0, 1.0, 0.0, 0.0, 1.0, 1.0], frequency=False)
    assert [s.tolist() for s in scores[:4]] == [[pytest.approx(v), 0.0], [pytest.approx(v)],
                                                [pytest.approx(v), 0.0], [pytest.approx(v), 0.0]]
    assert scores[4].tolist() == scores[5].tolist() == [0.0, 0.0]


# ------------------------------------------------------------------------------- PRIME


def test_the_implicit_reward_is_beta_times_the_log_ratio():
    trained = [torch.tensor([math.log(0.5), math.log(0.1)])]
    reference = [torch.tensor([math.log(0.25), math.log(0.2)])]
    reward = implicit_rewards(trained, reference, beta=0.05)[0]
    assert reward.tolist() == pytest.approx([0.05 * math.log(2), 0.05 * math.log(0.5)])


def _probe(prompt, response, reasoning_len, answer=(), conclude=(9,)):
    return Probe(prompt_ids=tuple(prompt), response_ids=tuple(response), reasoning_len=reasoning_len,
                 conclude_ids=tuple(conclude), answer_ids=tuple(answer), answer_kind="boxed" if answer else None,
                 pad_id=0)


def test_reasoning_logprobs_are_the_model_s_own_token_log_probabilities(tiny_model):
    model, _ = tiny_model
    probes = [_probe([3, 4, 5], [6, 7, 8, 9], 3), _probe([3, 4], [10, 11], 2), _probe([5], [12, 13, 14, 15, 16], 5)]
    got = reasoning_logprobs(model, probes, chunk_tokens=8)
    for probe, row in zip(probes, got):
        seq = list(probe.prompt_ids) + list(probe.response_ids[: probe.reasoning_len])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), dim=-1)
        start = len(probe.prompt_ids)
        expected = [logp[start + t - 1, seq[start + t]].item() for t in range(probe.reasoning_len)]
        assert row.tolist() == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------------------- answer attention


def test_the_answer_attention_is_the_mean_over_layers_heads_and_answer_queries():
    # two layers, one head, 4 positions; the queries are positions 2 and 3, the keys 0 and 1
    layer1 = torch.tensor([[[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.6, 0.2, 0], [0.1, 0.3, 0.2, 0.4]]])
    layer2 = torch.tensor([[[1.0, 0, 0, 0], [0.9, 0.1, 0, 0], [0.4, 0.4, 0.2, 0], [0.5, 0.1, 0.1, 0.3]]])
    got = answer_span_attention([layer1, layer2], [2, 3], [0, 1])
    # key 0: (0.2 + 0.1 + 0.4 + 0.5) / 4 = 0.3; key 1: (0.6 + 0.3 + 0.4 + 0.1) / 4 = 0.35
    assert got.tolist() == pytest.approx([0.3, 0.35])
    probe = _probe([1, 2], [3, 4, 5, 6], 2, answer=(7, 8), conclude=(9,))
    # as_mean: prompt 2 + reasoning 2 + conclusion 1 + answer 2 = 7 positions, the answer at 5 and 6
    assert query_positions(probe, "as_mean") == [5, 6]
    assert query_positions(probe, "lt_logits") == [4]


def test_the_answer_attention_scorer_reads_the_model_s_attention_weights(tiny_model):
    model, _ = tiny_model
    probe = _probe([3, 4, 5], [6, 7, 8, 9, 10], 3, answer=(11, 12), conclude=(13,))
    saved = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        got = answer_attention_scores(model, [probe], ["as_mean"])[0]
        ids = torch.tensor([probe.ids("as_mean")])
        with torch.no_grad():
            attentions = model(input_ids=ids, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(saved)
    n = ids.shape[1]
    expected = torch.stack([a[0] for a in attentions])[:, :, n - 2 :, 3:6].double().mean(dim=(0, 1, 2))
    assert got.tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert len(got) == 3 and (got > 0).all()
