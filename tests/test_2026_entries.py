"""The 2026 entries of the token-credit benchmark, each against its definition on an example worked by hand
(or, for the model-reading ones, computed by the definition on the tiny model one row at a time): GRAIL's
saliency, OAR-G as the GRAIL codebase computes it, the RLSD-style privileged self and the SHEAR-style
hidden-state distance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oar.method.grail import first_box_tokens, first_boxed_span, grail_scores
from oar.method.hidden_distance import reasoning_hidden_states, span_distances, wasserstein_1
from oar.method.oar_g_grail import Differences, build_row, grail_gate, oar_g_rows, oar_g_weights, project_gate
from oar.method.privileged_self import (HINT, advantage_signs, privileged_gains, privileged_prompt,
                                        rlsd_weights)
from oar.method.probes import ProbeOptions
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import ScorerError

pytestmark = pytest.mark.quick


@pytest.fixture(scope="module")
def made_up(tiny_model):
    """Two short maths responses to one prompt, each ending in its own conclusion and a box."""
    from oar.training.scorer_checks import made_up_probes

    model, tokenizer = tiny_model
    return model, tokenizer, made_up_probes(tokenizer, ProbeOptions(own_conclusion=True))


# ------------------------------------------------------------------------------------------- GRAIL


def test_the_first_complete_box_is_found_by_brace_depth():
    text = "a \\boxed{x^{2}} then \\boxed{3}"
    assert first_boxed_span(text) == (2, 15)  # \boxed{x^{2}}, nested braces matched
    assert first_boxed_span("\\boxed{open and \\boxed{4}") == (16, 25)  # an unclosed box: the next one
    assert first_boxed_span("no box here") is None


def test_grail_scores_are_the_norm_of_gradient_times_embedding_of_the_first_box_likelihood(made_up):
    model, tokenizer, probes = made_up
    got = grail_scores(model, probes, tokenizer)
    for p, scores in zip(probes, got):
        # the definition, one row: L = -sum over the first box's tokens of log pi(token), d L / d e
        ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids)])
        first, last = first_box_tokens(tokenizer, p.response_ids)
        start = len(p.prompt_ids)
        leaf = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logp = F.log_softmax(model(inputs_embeds=leaf).logits[0].float(), dim=-1)
        loss = -sum(logp[start + k - 1, ids[0, start + k]] for k in range(first, last))
        (grad,) = torch.autograd.grad(loss, leaf)
        want = (grad[0] * leaf[0].detach()).norm(dim=-1)[start : start + p.reasoning_len]
        assert torch.allclose(scores, want, rtol=1e-4, atol=1e-9)
        assert scores.shape == (p.reasoning_len,) and bool((scores > 0).any())
        # the released code's alignment: each token takes the saliency of the input before it
        shifted = grail_scores(model, [p], tokenizer, shifted=True)[0]
        full = (grad[0] * leaf[0].detach()).norm(dim=-1)
        assert torch.allclose(shifted, full[start - 1 : start - 1 + p.reasoning_len], rtol=1e-4, atol=1e-9)


def test_a_response_without_a_box_has_no_grail_signal(made_up):
    from dataclasses import replace

    model, tokenizer, probes = made_up
    unboxed = tokenizer("2 + 3 = 5, so 5.", add_special_tokens=False)["input_ids"]
    probe = replace(probes[0], response_ids=tuple(unboxed), reasoning_len=len(unboxed))
    assert first_box_tokens(tokenizer, unboxed) is None
    assert grail_scores(model, [probe], tokenizer)[0].tolist() == [0.0] * len(unboxed)


# ------------------------------------------------------------------------------------ OAR-G, GRAIL's


def test_grails_gate_cuts_at_the_nearest_rank_and_the_projects_at_the_interpolated_quantile():
    # scores 0 1 3 7: log1p 0, ln 2, ln 4, ln 8, so normalised 0, 1/3, 2/3, 1
    scores = torch.tensor([0.0, 1.0, 3.0, 7.0])
    # GRAIL, tau 0.5: the floor(4 x 0.5) = 2nd smallest, theta 2/3; suppress 0 -> 0.1 (floor), 1/3 -> 0.5;
    # boost 2/3 -> 1, 1 -> 1 + 2 (1/3) / (1/3) = 3; sum 4.6, renormalised to 4
    weights, band = grail_gate(scores, 0.5, 2.0)
    assert torch.allclose(weights, torch.tensor([0.1, 0.5, 1.0, 3.0]) * 4 / 4.6, atol=1e-6)
    assert band.tolist() == [False, False, True, True]
    # the project, tau 0.5: the linear quantile 1/3 + 0.5 (2/3 - 1/3) = 1/2; suppress 0 -> 0.1, 1/3 -> 2/3;
    # boost 2/3 -> 1 + 2 (1/6) / (1/2) = 5/3, 1 -> 3; sum 5.4333
    weights, band = project_gate(scores, 0.5, 2.0)
    raw = torch.tensor([0.1, 2 / 3, 5 / 3, 3.0])
    assert torch.allclose(weights, raw * 4 / raw.sum(), atol=1e-6)
    assert band.tolist() == [False, False, True, True]
    # equal scores: no signal, weight 1, no band, in both
    for gate_of in (grail_gate, project_gate):
        weights, band = gate_of(torch.full((3,), 2.0), 0.4, 2.0)
        assert torch.allclose(weights, torch.ones(3)) and not band.any()


def test_each_difference_moves_noise_scores_and_outcome_where_the_codebase_puts_them(made_up):
    _, tokenizer, probes = made_up
    p = probes[0]
    prompt, r = len(p.prompt_ids), p.reasoning_len
    base = build_row(p, tokenizer, Differences())
    assert base.ids == p.ids("as_mean") and base.scored == list(range(prompt, prompt + r)) == base.noised
    assert base.outcome_at == [len(base.ids) - len(p.answer_ids) - 1 + k for k in range(len(p.answer_ids))]
    whole = build_row(p, tokenizer, Differences(whole_completion=True))
    assert whole.scored == list(range(prompt, len(base.ids)))
    shifted = build_row(p, tokenizer, Differences(shifted=True))
    assert shifted.noised == [q - 1 for q in shifted.scored] and shifted.response_index == list(range(r))
    box = build_row(p, tokenizer, Differences(first_box=True, whole_completion=True))
    first, last = first_box_tokens(tokenizer, p.response_ids)
    assert box.ids == list(p.prompt_ids) + list(p.response_ids)
    assert box.outcome_at == [prompt + k - 1 for k in range(first, last)]  # the logits predicting the box
    assert box.response_index == list(range(len(p.response_ids)))


def test_every_switch_off_is_the_projects_oar_g(made_up):
    from oar.method.gradient_scorers import oar_g_scores

    model, tokenizer, probes = made_up
    kinds = ["as_mean"] * len(probes)
    project = oar_g_scores(model, probes, kinds, ScorerConfig(), seed=5)
    _, mine = oar_g_rows(model, probes, tokenizer, Differences(), seed=5)
    for a, b in zip(project, mine):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3 * float(a.abs().max()))
    weights, bands = oar_g_weights(model, probes, tokenizer, Differences(), seed=5)
    for p, w, band in zip(probes, weights, bands):
        assert w.shape == (len(p.response_ids),)
        assert torch.all(w[p.reasoning_len :] == 1) and not band[p.reasoning_len :].any()
        assert math.isclose(float(w[: p.reasoning_len].sum()), p.reasoning_len, rel_tol=1e-5)


def test_the_codebases_oar_g_gates_the_whole_completion(made_up):
    model, tokenizer, probes = made_up
    weights, _ = oar_g_weights(model, probes, tokenizer, Differences.grail(), seed=5)
    for p, w in zip(probes, weights):
        assert math.isclose(float(w.sum()), len(p.response_ids), rel_tol=1e-5)  # renormalised over all of it
        assert bool((w[p.reasoning_len :] != 1).any())


# ------------------------------------------------------------------------------------ privileged self


def test_the_hint_goes_before_the_prompts_last_end_of_turn():
    assert privileged_prompt([1, 2, 7, 3, 7, 4], [9, 9], end_of_turn=7) == (1, 2, 7, 3, 9, 9, 7, 4)
    assert privileged_prompt([1, 2], [9], end_of_turn=7) == (1, 2, 9)  # none: after the prompt
    assert privileged_prompt([1, 2], [9], end_of_turn=None) == (1, 2, 9)


def test_rlsd_weights_take_the_advantages_sign():
    # group 0: rewards 1 0 0, mean 1/3: signs + - -; group 1 all right: A = 0, sign 0
    assert advantage_signs([0, 0, 0, 1, 1], [1, 0, 0, 1, 1]) == [1.0, -1.0, -1.0, 0.0, 0.0]
    gains = [torch.tensor([0.5, -1.0], dtype=torch.float64)] * 3
    weights = rlsd_weights(gains, [1.0, -1.0, 0.0])
    assert torch.allclose(weights[0], torch.tensor([math.exp(0.5), math.exp(-1.0)]))
    assert torch.allclose(weights[1], torch.tensor([math.exp(-0.5), math.exp(1.0)]))
    assert torch.equal(weights[2], torch.ones(2))


def test_the_privileged_gain_is_the_log_likelihood_with_the_answer_minus_without(made_up):
    model, tokenizer, probes = made_up
    gains = privileged_gains(model, probes, ["5", "5"], tokenizer)

    def logp(prompt, response):
        ids = torch.tensor([list(prompt) + list(response)])
        out = F.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        return torch.stack([out[len(prompt) + k - 1, t] for k, t in enumerate(response)])

    hint = tokenizer(HINT.format(answer="5"), add_special_tokens=False)["input_ids"]
    for p, gain in zip(probes, gains):
        reasoning = p.response_ids[: p.reasoning_len]
        teacher = privileged_prompt(p.prompt_ids, hint, tokenizer.eos_token_id)
        assert teacher != p.prompt_ids
        want = logp(teacher, reasoning).double() - logp(p.prompt_ids, reasoning).double()
        assert torch.allclose(gain, want, atol=1e-5)


def test_a_scorer_reading_the_answer_key_stops_without_it(made_up):
    from oar.method.importance import score

    model, tokenizer, probes = made_up
    with pytest.raises(ScorerError, match="'rlsd' reads each row's reference answer"):
        score("rlsd", model, probes, tokenizer=tokenizer)
    result = score("rlsd_signed", model, probes, tokenizer=tokenizer, references=["5", "5"])
    assert bool((result.scores < 0).any() or (result.scores > 0).any())


# ------------------------------------------------------------------------------------ SHEAR-style


def test_w1_of_small_empirical_distributions():
    assert math.isclose(wasserstein_1(np.array([[0.0], [2.0]]), np.array([[1.0]])), 1.0)
    # 1-D: the quantile functions 0,0,1,1 against 0,1,2,3 on quarters: (0 + 1 + 1 + 2) / 4
    assert math.isclose(wasserstein_1(np.array([[0.0], [1.0]]), np.array([[0.0], [1.0], [2.0], [3.0]])), 1.0)
    assert math.isclose(wasserstein_1(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])), 5.0)
    # 0 1 2 (a third each) against 0 2 (a half each): in 1-D the quantile functions differ by 1 on
    # [1/3, 2/3) only, so W1 = 1/3 (the point 1 moves half its mass to 0, half to 2)
    assert math.isclose(wasserstein_1(np.array([[0.0], [1.0], [2.0]]), np.array([[0.0], [2.0]])), 1 / 3)


def test_span_distances_score_each_span_by_its_w1_from_the_opposing_outcome():
    right = np.array([[0.0], [0.0], [0.0], [0.0], [1.0]])
    wrong = np.array([[0.0], [0.0], [0.0], [0.0], [3.0]])
    short = np.array([[0.0], [0.0], [0.0], [2.0]])
    got = span_distances([right, wrong, short], groups=[0, 0, 0], rewards=[1, 0, 0], span=4)
    # span 1: right's 0 0 0 0 against the wrong side's pooled seven 0s and one 2: 1/8 of the mass moves 2,
    # W1 = 1/4; span 2: [1] against [3] (the short response does not reach it): 2
    assert torch.allclose(got[0], torch.tensor([0.25, 0.25, 0.25, 0.25, 2.0]))
    # wrong's span 1 against right's 0 0 0 0: 0; its span 2: [3] against [1]
    assert torch.allclose(got[1], torch.tensor([0.0, 0.0, 0.0, 0.0, 2.0]))
    assert torch.allclose(got[2], torch.tensor([0.5, 0.5, 0.5, 0.5]))  # 0 0 0 2 against 0 0 0 0
    # one outcome only: no signal
    assert all(not bool(s.any()) for s in span_distances([right, wrong], [0, 0], [1, 1]))


def test_the_hidden_states_are_the_last_layers_at_each_reasoning_token(made_up):
    model, _, probes = made_up
    states = reasoning_hidden_states(model, probes)
    for p, h in zip(probes, states):
        ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len])])
        want = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, len(p.prompt_ids):]
        assert np.allclose(h, want.detach().double().numpy(), atol=1e-5)


def test_the_trainer_refuses_a_scorer_that_reads_the_answer_key(tiny_model_dir, tmp_path):
    from test_trainer_library import make_trainer

    with pytest.raises(ValueError, match="'rlsd' reads each problem's reference answer"):
        make_trainer(tiny_model_dir, tmp_path, oar_method="rlsd")
