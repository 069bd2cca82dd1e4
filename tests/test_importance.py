"""The scorers against their definitions: OAR-P against one substitution at a time, the batch against single
probes, the gradient scorers' hygiene, the controls, and OAR-G beside OAR-P where one token decides."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oar.method.importance import score
from oar.method.probes import CONCLUDE_TEXT, Probe, divergence, outcome_from_logits
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import BUILTIN_SCORERS
from oar.method.substitution import forward_equivalents
from oar.models.tiny import build_tiny_model
from random_probes import random_probe

ROOT = Path(__file__).resolve().parents[1]


def direct_oar_p(model, probe: Probe, kind: str) -> torch.Tensor:
    """The definition, one substituted position at a time, full forward, all logits."""
    ids = probe.ids(kind)
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    answer = torch.tensor([probe.answer_ids]) if kind != "lt_logits" else None
    with torch.no_grad():
        clean = outcome_from_logits(model(torch.tensor([ids])).logits[:, -keep:], kind, answer)
        scores = []
        for j in range(probe.reasoning_len):
            changed = list(ids)
            changed[probe.reasoning_start + j] = probe.pad_id
            logits = model(torch.tensor([changed])).logits[:, -keep:]
            scores.append(divergence(clean, outcome_from_logits(logits, kind, answer)).item())
    return torch.tensor(scores)


@pytest.mark.quick
@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("chunk_tokens", [5, 40, 4096])
def test_oar_p_equals_direct_substitution(model_and_tokenizer, kind, chunk_tokens):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(1)
    probes = [random_probe(tokenizer, g, 6, 9, 2), random_probe(tokenizer, g, 3, 15, 3, tail=0)]
    result = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=chunk_tokens))
    for i, probe in enumerate(probes):
        expected = direct_oar_p(model, probe, kind)
        got = result.scores[i, : probe.reasoning_len]
        # float32 rounding of log-softmax differences (~1e-7 * |log p|) is all that may differ.
        assert torch.allclose(got, expected, rtol=1e-3, atol=2e-6), (got, expected)
        assert (expected.abs() > 0).any()
        assert torch.equal(result.scores[i, probe.reasoning_len :],
                           torch.zeros(result.scores.shape[1] - probe.reasoning_len))


@pytest.mark.quick
def test_inactive_rows_are_not_scored(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(2)
    probes = [random_probe(tokenizer, g, 4, 8, 2) for _ in range(3)]
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        alone = score("oar_p", model, [probes[1]], ScorerConfig(chunk_tokens=10**6))
        calls.clear()
        result = score("oar_p", model, probes, ScorerConfig(chunk_tokens=10**6), active=[False, True, False])
    finally:
        hook.remove()
    assert result.scored.tolist() == [False, True, False]
    assert len(calls) == 2  # one clean pass and one chunk, for the single active row only
    assert torch.equal(result.scores[0], torch.zeros_like(result.scores[0]))
    assert torch.equal(result.scores[2], torch.zeros_like(result.scores[2]))
    assert torch.allclose(result.scores[1], alone.scores[0], atol=1e-7)


@pytest.mark.quick
@pytest.mark.parametrize("method", ["oar_g", "grad_norm"])
def test_gradient_scorers_leave_parameter_grads_untouched(model_and_tokenizer, method):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(3)
    probes = [random_probe(tokenizer, g, 5, 7, 2), random_probe(tokenizer, g, 3, 4, 0)]
    params = list(model.parameters())
    # First without any accumulated gradient, then with one (as between micro-batches of a step).
    for p in params:
        p.grad = None
    result = score(method, model, probes, ScorerConfig())
    assert all(p.grad is None for p in params)
    assert torch.isfinite(result.scores).all() and (result.scores[result.reasoning_mask] > 0).all()

    for p in params:
        p.grad = torch.randn_like(p)
    before = [p.grad.clone() for p in params]
    score(method, model, probes, ScorerConfig())
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
    for p in params:
        p.grad = None


@pytest.mark.quick
@pytest.mark.parametrize("method", ["grad_norm", "entropy", "position"])
def test_batched_scores_equal_single_probe_scores(model_and_tokenizer, method):
    """Left padding and micro-batching change nothing (noise-free scorers)."""
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(4)
    probes = [random_probe(tokenizer, g, 3 + i, 4 + 3 * i, i % 3) for i in range(4)]
    together = score(method, model, probes, ScorerConfig(probe="as_mean", chunk_tokens=60))
    for i, probe in enumerate(probes):
        alone = score(method, model, [probe], ScorerConfig(probe="as_mean"))
        r = probe.reasoning_len
        assert torch.allclose(together.scores[i, :r], alone.scores[0, :r], rtol=1e-4, atol=1e-6)


@pytest.mark.quick
def test_entropy_is_the_sampling_distribution_entropy(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    probe = random_probe(tokenizer, torch.Generator().manual_seed(5), 4, 6, 1)
    result = score("entropy", model, [probe])
    with torch.no_grad():
        logits = model(torch.tensor([list(probe.prompt_ids) + list(probe.response_ids)])).logits[0]
    logp = F.log_softmax(logits[3 : 3 + 6], dim=-1)  # positions predicting response tokens 0..5
    expected = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(result.scores[0, :6], expected, atol=1e-5)


@pytest.mark.quick
def test_controls_are_deterministic_and_probe_fallback_is_flagged(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(6)
    probes = [random_probe(tokenizer, g, 3, 5, 2), random_probe(tokenizer, g, 3, 5, 0)]
    first = score("random", model, probes, seed=7)
    assert torch.equal(first.scores, score("random", model, probes, seed=7).scores)
    assert not torch.equal(first.scores, score("random", model, probes, seed=8).scores)
    assert score("position", model, probes).scores[0, :5].tolist() == [0, 1, 2, 3, 4]
    assert first.lt_fallback.tolist() == [False, True]
    assert score("random", model, probes, ScorerConfig(probe="lt_logits")).lt_fallback.tolist() == [False, False]
    assert set(BUILTIN_SCORERS) == {"oar_p", "oar_g", "grad_norm", "entropy", "position", "random", "truth",
                                    "truth_graded", "truth_final", "truth_early", "top_entropy", "ktae", "prime",
                                    "answer_attention", "grail", "grail_released", "oar_g_grail", "rlsd",
                                    "rlsd_weight", "shear", "rlsd_signed", "surprisal", "last_step_digits",
                                    "last_step", "step_results",
                                    "relations_and_results", "tilde_first", "oar_g_inverted", "first_divergence",
                                    "tempo", "tempo_signed", "ktae_presence", "ktae_signed"}
    with pytest.raises(ValueError, match="probe"):
        ScorerConfig(probe="as_median")
    with pytest.raises(ValueError, match="scorer"):
        score("oracle", model, probes)


@pytest.mark.quick
def test_oar_p_cost_is_well_below_all_copies(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    probe = random_probe(tokenizer, torch.Generator().manual_seed(0), 80, 60, 2)
    # All R copies in one batch cost R full probes plus the clean one.
    all_copies = 60 + 1
    assert forward_equivalents(probe, "as_mean", chunk_tokens=512) < 0.5 * all_copies


# --- a model where one reasoning token decides the answer ----------------------------------------------

KEYS = torch.arange(10, 18)
FILLER = torch.arange(40, 200)


def key_copy_batch(n, conclude, generator=None, prompt_len=4, reasoning_len=12):
    """Filler reasoning with one key token at a random position; the answer is that key."""
    prompt = FILLER[torch.randint(0, len(FILLER), (n, prompt_len), generator=generator)]
    reasoning = FILLER[torch.randint(0, len(FILLER), (n, reasoning_len), generator=generator)]
    where = torch.randint(0, reasoning_len, (n,), generator=generator)
    key = KEYS[torch.randint(0, len(KEYS), (n,), generator=generator)]
    reasoning[torch.arange(n), where] = key
    ids = torch.cat([prompt, reasoning, torch.tensor(conclude).expand(n, -1), key[:, None]], dim=1)
    return ids, where


# Not in the quick tier: its model is trained first (150 optimizer steps).
@pytest.fixture(scope="module")
def decisive_model():
    """The tiny model trained for a few seconds to copy the key token into the answer."""
    torch.manual_seed(0)
    model, tokenizer = build_tiny_model(seed=0)
    conclude = tokenizer(CONCLUDE_TEXT, add_special_tokens=False)["input_ids"]
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(150):
        ids, _ = key_copy_batch(64, conclude)
        logits = model(ids, logits_to_keep=2).logits[:, 0]
        loss = F.cross_entropy(logits, ids[:, -1])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    optimiser.zero_grad(set_to_none=True)
    assert loss.item() < 0.1, "the key-copy model did not learn its task"
    return model, conclude, tokenizer.pad_token_id


@pytest.mark.parametrize("kind", ["as_mean", "as_joint"])
def test_oar_g_tracks_oar_p_when_one_token_decides(decisive_model, kind):
    model, conclude, pad = decisive_model
    ids, where = key_copy_batch(16, conclude, torch.Generator().manual_seed(5))
    probes = [
        Probe(tuple(r[:4].tolist()), tuple(r[4:16].tolist()), 12, tuple(conclude), (r[-1].item(),), "boxed", pad_id=pad)
        for r in ids
    ]
    exact = score("oar_p", model, probes, ScorerConfig(probe=kind)).scores
    proxy = score("oar_g", model, probes, ScorerConfig(probe=kind)).scores
    assert torch.isfinite(proxy).all()
    # OAR-P finds the key in every response; OAR-G is a local proxy: it correlates, imperfectly. (A
    # rank correlation over all tokens would mostly rank the non-key tokens, whose OAR-P scores are at
    # float-rounding level here, so the checks are the linear correlation and the key's rank.)
    assert torch.equal(exact.argmax(dim=1), where)
    assert np.corrcoef(exact.flatten(), proxy.flatten())[0, 1] > 0.1
    key_rank = torch.stack([(proxy[i] < proxy[i, where[i]]).float().mean() for i in range(16)])
    print(f"{kind}: pearson {np.corrcoef(exact.flatten(), proxy.flatten())[0, 1]:.2f}, key rank {key_rank.mean():.2f}")
    assert key_rank.mean() > 0.6  # the key sits well above the median OAR-G score of its response


@pytest.mark.quick
def test_heldout_scoring_draws_each_responses_random_scores_apart(tiny_model_dir, tmp_path):
    """score_heldout.py scores one response per call; with one seed for every call, each response of the
    same length got the same random ranking of positions, so the random control's recall measured one
    fixed ranking. Each response now draws its own scores from (seed, index), reproducibly."""
    import importlib.util
    import json

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = tokenizer("What is 2 + 2?", add_special_tokens=False)["input_ids"]
    response = tokenizer("We add two and two to get four. The answer is \\boxed{4}",
                         add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "prompt_ids": prompt, "response_ids": response}) + "\n"
                                 for i in range(2)))
    spec = importlib.util.spec_from_file_location("score_heldout", ROOT / "workflow_scripts" / "score_heldout.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def scores(name):
        out = tmp_path / name
        script.main(["--model", str(tiny_model_dir), "--responses", str(responses), "--scorer", "random",
                     "--scores", str(out), "--seed", "3"])
        return [json.loads(line)["scores"] for line in out.read_text().splitlines()]

    first, again = scores("a.jsonl"), scores("b.jsonl")
    assert len(first[0]) == len(first[1]) > 3
    assert first[0] != first[1]  # the same response twice: two draws
    assert first == again  # reproducible
