from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from oar.method.importance import score
from oar.method.scorer_registry import BUILTIN_SCORERS
from oar.method.scorer_config import ScorerConfig
from oar.method.substitution import forward_equivalents
from oar.method.probes import (CONCLUDE_TEXT, Probe, build_probes, divergence, outcome_from_logits, pad_token_id,
                               probes_from_padded, token_char_spans)
from oar.models.tiny import build_tiny_model
from transformers.cache_utils import DynamicCache

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return build_tiny_model(seed=0)


def random_probe(tokenizer, generator, prompt_len, reasoning_len, answer_len, tail=2) -> Probe:
    n = prompt_len + reasoning_len + tail
    ids = torch.randint(3, len(tokenizer), (n + answer_len,), generator=generator).tolist()
    conclude = tokenizer(CONCLUDE_TEXT, add_special_tokens=False)["input_ids"]
    return Probe(
        prompt_ids=tuple(ids[:prompt_len]),
        response_ids=tuple(ids[prompt_len:n]),
        reasoning_len=reasoning_len,
        conclude_ids=tuple(conclude),
        answer_ids=tuple(ids[n:]),
        answer_kind="boxed" if answer_len else None,
        pad_id=tokenizer.pad_token_id,
    )


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
        assert torch.equal(result.scores[i, probe.reasoning_len :], torch.zeros(result.scores.shape[1] - probe.reasoning_len))


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


def test_entropy_is_the_sampling_distribution_entropy(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    probe = random_probe(tokenizer, torch.Generator().manual_seed(5), 4, 6, 1)
    result = score("entropy", model, [probe])
    with torch.no_grad():
        logits = model(torch.tensor([list(probe.prompt_ids) + list(probe.response_ids)])).logits[0]
    logp = F.log_softmax(logits[3 : 3 + 6], dim=-1)  # positions predicting response tokens 0..5
    expected = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(result.scores[0, :6], expected, atol=1e-5)


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
    assert set(BUILTIN_SCORERS) == {"oar_p", "oar_g", "grad_norm", "entropy", "position", "random", "truth", "truth_graded",
                           "truth_final", "truth_early", "top_entropy", "ktae", "prime", "answer_attention"}
    with pytest.raises(ValueError, match="probe"):
        ScorerConfig(probe="as_median")
    with pytest.raises(ValueError, match="scorer"):
        score("oracle", model, probes)


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


# --- probes from real token ids -----------------------------------------------------------------------


def _alignment_cases(tokenizer):
    prompt = tokenizer("Question: 12 + 7?", add_special_tokens=False)["input_ids"]
    cases = {
        "boxed": ("We add: 12 + 7 = 19. The final answer is \\boxed{19}.", "19", " The final answer is"),
        "nested": ("So x = \\frac{1}{2}, i.e. \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", ", i.e."),
        "fallback": ("12 + 7 = 19", "19", "12 + 7 ="),
        "unicode": ("Each costs 3 € × 4 → 12 €, so 12 + 7 = 19", "19", "so 12 + 7 ="),
    }
    return prompt, cases


@pytest.mark.parametrize("tokenizer_name", ["tiny", "packaged"])
def test_probe_alignment_on_real_tokenizer_output(tokenizer_name, request, model_and_tokenizer):
    tokenizer = model_and_tokenizer[1] if tokenizer_name == "tiny" else request.getfixturevalue("packaged_tokenizer")
    prompt, cases = _alignment_cases(tokenizer)
    for name, (response, answer, reasoning_tail) in cases.items():
        ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        (probe,) = build_probes(tokenizer, [prompt], [ids])
        assert probe.has_answer, name
        decoded_answer = tokenizer.decode(probe.answer_ids)
        assert answer in decoded_answer and len(decoded_answer.strip()) <= len(answer) + 2, (name, decoded_answer)
        reasoning = tokenizer.decode(probe.response_ids[: probe.reasoning_len])
        assert reasoning.rstrip().endswith(reasoning_tail), (name, reasoning)
        assert "boxed" not in reasoning[-8:]
        # The probe is the response's own ids up to the reasoning end: nothing re-tokenised.
        assert probe.ids("as_mean")[: len(prompt) + probe.reasoning_len] == prompt + ids[: probe.reasoning_len]
        assert probe.ids("as_mean")[-len(probe.answer_ids) :] == list(probe.answer_ids)
        assert probe.answer_kind == ("last_number" if name in ("fallback", "unicode") else "boxed")

    no_answer = tokenizer("I am not sure.", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    (probe,) = build_probes(tokenizer, [prompt], [no_answer], fallback_last_number=True)
    assert not probe.has_answer and probe.reasoning_len == len(no_answer) - 1  # eos is not reasoning
    (probe,) = build_probes(tokenizer, [prompt], [tokenizer("12 + 7 = 19", add_special_tokens=False)["input_ids"]], fallback_last_number=False)
    assert not probe.has_answer


def _every_prefix_end(tokenizer, ids):
    return [len(tokenizer.decode(ids[: k + 1], skip_special_tokens=False, clean_up_tokenization_spaces=False))
            for k in range(len(ids))]


@pytest.mark.parametrize("tokenizer_name", ["tiny", "packaged"])
def test_token_spans_end_where_each_prefix_decode_ends_when_characters_split_across_tokens(
        tokenizer_name, request, model_and_tokenizer, monkeypatch):
    """A character split across byte-level tokens: each token's end is still the length of the decoded
    prefix that ends with it, found without decoding every prefix from the start (which is quadratic)."""
    from oar.method import probes

    tokenizer = model_and_tokenizer[1] if tokenizer_name == "tiny" else request.getfixturevalue("packaged_tokenizer")
    text = "So 3 € × 2 = 6 €, π ≈ 3.14; 中文数学 😀👍🏽 done."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    rng = np.random.default_rng(0)
    cases = [ids[:cut] for cut in range(1, len(ids) + 1)]
    cases += [ids[int(a):int(a) + int(n)] for a, n in zip(rng.integers(0, len(ids), 40), rng.integers(1, 12, 40))]
    flags = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
    split = [c for c in cases if "".join(tokenizer.batch_decode([[i] for i in c], **flags)) != tokenizer.decode(c, **flags)]
    assert len(split) > 10  # the fast path does not hold for these: characters are split across tokens

    def quadratic(*args):
        raise AssertionError("decoded every prefix from the start")

    monkeypatch.setattr(probes, "_ends_from_every_prefix", quadratic)
    for case in cases:
        decoded, starts, ends = token_char_spans(tokenizer, case)
        assert decoded == tokenizer.decode(case, **flags) and ends == _every_prefix_end(tokenizer, case), case
        assert starts == [0] + ends[:-1]


def test_token_spans_of_a_tokenizer_whose_decode_is_not_local_come_from_every_prefix(monkeypatch):
    """A decode that drops the space before a chunk's first word (a Metaspace decoder) cannot be
    rebuilt from chunks: the spans then come from decoding every prefix, and are still exact."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "▁the", "▁answer", "▁is", "▁4."]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    ids = tokenizer("the answer is 4.", add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert "".join(tokenizer.batch_decode([[i] for i in ids])) != tokenizer.decode(ids)
    from oar.method import probes

    every_prefix = probes._ends_from_every_prefix
    calls = []
    monkeypatch.setattr(probes, "_ends_from_every_prefix", lambda *a: calls.append(a) or every_prefix(*a))
    decoded, starts, ends = token_char_spans(tokenizer, ids)
    assert len(calls) == 1
    assert decoded == "the answer is 4." and ends == _every_prefix_end(tokenizer, ids) == [3, 10, 13, 16]


def test_probes_from_padded_tensors_strip_padding(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    pad = tokenizer.pad_token_id
    prompts = [tokenizer("Question: 1 + 1?", add_special_tokens=False)["input_ids"], tokenizer("Q: 2?", add_special_tokens=False)["input_ids"]]
    responses = [tokenizer("1 + 1 = 2", add_special_tokens=False)["input_ids"], tokenizer("\\boxed{2}", add_special_tokens=False)["input_ids"]]
    width_p, width_c = max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([r + [pad] * (width_c - len(r)) for r in responses])
    completion_mask = torch.tensor([[1] * len(r) + [0] * (width_c - len(r)) for r in responses])
    probes = probes_from_padded(tokenizer, prompt_ids, prompt_mask, completion_ids, completion_mask)
    assert [list(p.prompt_ids) for p in probes] == prompts
    assert [list(p.response_ids) for p in probes] == responses
    assert [tokenizer.decode(p.answer_ids) for p in probes] == ["2", "2"]


@pytest.mark.parametrize("answer", ["\\frac{1}{2}", "\\sqrt{3}", "\\dfrac{3}{4}", "2\\sqrt{5}", "\\{1, 2\\}", "\\pi",
                                    "\\left( 3, \\frac{\\pi}{2} \\right)"])
def test_latex_answer_appears_once_in_the_probe(packaged_tokenizer, answer):
    """SmolLM2 has tokens such as '{\\' that straddle the brace of \\boxed{ and the answer's first
    character: the probe must still read conclude + answer = '...\\boxed{<answer>' exactly."""
    tokenizer = packaged_tokenizer
    prompt = tokenizer("Question: simplify.", add_special_tokens=False)["input_ids"]
    response = f"We simplify step by step, so the result is $\\boxed{{{answer}}}$."
    ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    (probe,) = build_probes(tokenizer, [prompt], [ids])
    assert probe.answer_kind == "boxed"
    assert tokenizer.decode(probe.answer_ids) == answer
    conclude_and_answer = tokenizer.decode(probe.conclude_ids + probe.answer_ids)
    assert conclude_and_answer == CONCLUDE_TEXT + answer
    reasoning = tokenizer.decode(probe.response_ids[: probe.reasoning_len])
    # reasoning ends before the token that holds the start of \\boxed{ (here ' $\\')
    assert reasoning == "We simplify step by step, so the result is"
    # tokens strictly inside the answer are the response's own ids (only a straddling edge is re-encoded)
    inner = list(probe.answer_ids[1:-1])
    assert any(ids[i : i + len(inner)] == inner for i in range(len(ids))), (inner, ids)


def test_straddling_token_is_present_in_the_packaged_tokenizer(packaged_tokenizer):
    """The case above is real: '\\boxed{\\frac' has a token holding both '{' and '\\'."""
    ids = packaged_tokenizer("\\boxed{\\frac{1}{2}}", add_special_tokens=False)["input_ids"]
    pieces = [packaged_tokenizer.decode([i]) for i in ids]
    assert "{\\" in pieces, pieces


@pytest.mark.parametrize("config_pad", [None, 7])
def test_oar_p_substitutes_the_tokenizers_pad_whatever_the_model_config_says(config_pad):
    """One pad rule (method.md section 4: the tokenizer's pad), also for a model config without a pad
    id or with another one: the config is never read."""
    model, tokenizer = build_tiny_model(seed=0)
    model.config.pad_token_id = config_pad
    assert tokenizer.pad_token_id != tokenizer.eos_token_id  # a fallback to eos would change the scores
    prompt = tokenizer("Question: what is 3 + 16?", add_special_tokens=False)["input_ids"]
    response = tokenizer("3 + 16 = 19 so \\boxed{19}", add_special_tokens=False)["input_ids"]
    (probe,) = build_probes(tokenizer, [prompt], [response + [tokenizer.eos_token_id]])
    assert probe.pad_id == tokenizer.pad_token_id
    ids = probe.ids("as_mean")
    keep, answer = len(probe.answer_ids) + 1, torch.tensor([probe.answer_ids])
    with torch.no_grad():
        clean = outcome_from_logits(model(torch.tensor([ids])).logits[:, -keep:], "as_mean", answer)
        expected = []
        for j in range(probe.reasoning_len):
            changed = list(ids)
            changed[probe.reasoning_start + j] = tokenizer.pad_token_id
            logits = model(torch.tensor([changed])).logits[:, -keep:]
            expected.append(divergence(clean, outcome_from_logits(logits, "as_mean", answer)).item())
    got = score("oar_p", model, [probe], ScorerConfig(probe="as_mean")).scores[0, : probe.reasoning_len]
    torch.testing.assert_close(got, torch.tensor(expected), atol=1e-5, rtol=1e-4)


def test_pad_rule_falls_back_to_eos_and_fails_without_either():
    _, tokenizer = build_tiny_model(seed=0)
    assert pad_token_id(tokenizer) == tokenizer.pad_token_id
    tokenizer.pad_token = None
    assert pad_token_id(tokenizer) == tokenizer.eos_token_id
    tokenizer.eos_token = None
    with pytest.raises(ValueError, match="neither a pad nor an eos token"):
        pad_token_id(tokenizer)


# --- OAR-P over spans (training.oar.span_tokens) -------------------------------------------------------


@torch.no_grad()
def oar_p_before_spans(model, probe: Probe, kind: str, chunk_tokens: int) -> torch.Tensor:
    """OAR-P as it was computed before spans existed (one position per copy, prefix KV reuse): the
    reference that span_tokens = 1 must reproduce bit for bit."""
    from reference_scorers import _cache_prefix, _expand

    ids = torch.tensor([probe.ids(kind)])
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    answer = torch.tensor([probe.answer_ids]) if kind != "lt_logits" else None
    out = model(input_ids=ids, use_cache=True, logits_to_keep=keep)
    clean = outcome_from_logits(out.logits, kind, answer)
    cache = out.past_key_values
    total, start, r = ids.shape[1], probe.reasoning_start, probe.reasoning_len
    row = torch.empty(r, dtype=torch.float32)
    j0 = 0
    while j0 < r:
        copies = max(1, min(r - j0, chunk_tokens // (total - start - j0)))
        suffix = ids[:, start + j0 :].repeat(copies, 1)
        suffix[torch.arange(copies), torch.arange(copies)] = probe.pad_id
        out = model(input_ids=suffix, past_key_values=_cache_prefix(cache, start + j0, copies), use_cache=True,
                    logits_to_keep=keep)
        perturbed = outcome_from_logits(out.logits, kind, None if answer is None else answer.expand(copies, -1))
        row[j0 : j0 + copies] = divergence(_expand(clean, copies), perturbed)
        j0 += copies
    return row


def direct_span_oar_p(model, probe: Probe, kind: str, width: int) -> torch.Tensor:
    """The span definition by brute force: for each span of ``width`` reasoning tokens, a full forward of
    the probe with the whole span substituted; every token of the span gets its divergence."""
    ids = probe.ids(kind)
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    answer = torch.tensor([probe.answer_ids]) if kind != "lt_logits" else None
    r = probe.reasoning_len
    scores = torch.empty(r)
    with torch.no_grad():
        clean = outcome_from_logits(model(torch.tensor([ids])).logits[:, -keep:], kind, answer)
        for a in range(0, r, width):
            b = min(a + width, r)
            changed = list(ids)
            changed[probe.reasoning_start + a : probe.reasoning_start + b] = [probe.pad_id] * (b - a)
            logits = model(torch.tensor([changed])).logits[:, -keep:]
            scores[a:b] = divergence(clean, outcome_from_logits(logits, kind, answer)).item()
    return scores


@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("chunk_tokens", [5, 40, 4096])
def test_span_of_one_token_is_oar_p_before_spans(model_and_tokenizer, kind, chunk_tokens):
    """Batched across responses, OAR-P's scores differ from the one-response computation by float rounding
    only (other batch shapes sum in another order)."""
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(11)
    probes = [random_probe(tokenizer, g, 6, 9, 2), random_probe(tokenizer, g, 3, 15, 3, tail=0)]
    result = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, span_tokens=1))
    model.eval()
    for i, probe in enumerate(probes):
        expected = oar_p_before_spans(model, probe, kind, chunk_tokens)
        assert torch.allclose(result.scores[i, : probe.reasoning_len], expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("width, chunk_tokens", [(2, 5), (3, 40), (4, 4096), (7, 30)])
def test_span_scores_equal_brute_force_span_substitution(model_and_tokenizer, kind, width, chunk_tokens):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(12)
    probes = [random_probe(tokenizer, g, 6, 9, 2), random_probe(tokenizer, g, 3, 15, 3, tail=0)]
    result = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, span_tokens=width))
    for i, probe in enumerate(probes):
        expected = direct_span_oar_p(model, probe, kind, width)
        got = result.scores[i, : probe.reasoning_len]
        assert torch.allclose(got, expected, rtol=1e-3, atol=2e-6), (got, expected)
        # one value per span (the last span is shorter when the width does not divide R)
        assert all(len(set(got[a : a + width].tolist())) == 1 for a in range(0, probe.reasoning_len, width))


def test_a_span_over_the_whole_reasoning_gives_every_token_one_score(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(13)
    probe = random_probe(tokenizer, g, 4, 12, 2)
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        result = score("oar_p", model, [probe], ScorerConfig(span_tokens=probe.reasoning_len))
    finally:
        hook.remove()
    row = result.scores[0, : probe.reasoning_len]
    assert len(calls) == 2  # the clean pass and one substituted copy
    assert torch.equal(row, row[:1].expand_as(row)) and row[0] > 0
    assert torch.allclose(row, direct_span_oar_p(model, probe, "as_mean", probe.reasoning_len), rtol=1e-3, atol=2e-6)
    wider = score("oar_p", model, [probe], ScorerConfig(span_tokens=10 * probe.reasoning_len))
    assert torch.equal(wider.scores, result.scores)


def test_span_cost_accounting_follows_the_schedule(model_and_tokenizer):
    """forward_equivalents counts the suffix tokens the span schedule runs: with a budget that fits one
    copy per forward, width w runs ceil(R / w) suffixes, each from its span's start."""
    from oar.method.substitution import _oar_p_chunks

    _, tokenizer = model_and_tokenizer
    probe = random_probe(tokenizer, torch.Generator().manual_seed(14), 5, 20, 2)
    total, suffix0 = len(probe.ids("as_mean")), len(probe.ids("as_mean")) - probe.reasoning_start
    for width in (1, 2, 3, 6, 20):
        chunks = list(_oar_p_chunks(probe, "as_mean", 1, span_tokens=width))
        assert [j0 for j0, _ in chunks] == list(range(0, 20, width)) and all(c == 1 for _, c in chunks)
        expected = (total + sum(suffix0 - j0 for j0 in range(0, 20, width))) / total
        assert forward_equivalents(probe, "as_mean", 1, span_tokens=width) == pytest.approx(expected)
    # a budget that fits every copy runs them all in one forward, packed side by side in rows as wide as
    # the longest: the tokens run are the rows x that width
    for width in (1, 3, 7):
        spans = -(-20 // width)
        assert list(_oar_p_chunks(probe, "as_mean", 4096, span_tokens=width)) == [(0, spans)]
        suffixes = sum(suffix0 - j0 for j0 in range(0, 20, width))
        rows = forward_equivalents(probe, "as_mean", 4096, span_tokens=width) * total - total
        assert suffixes - 1e-6 <= rows <= suffixes + spans * suffix0


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_span_tokens_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="span_tokens"):
        ScorerConfig(span_tokens=bad)


# --- OAR-P with a local window (training.oar.window_tokens) ---------------------------------------------


@torch.no_grad()
def stale_cache_oar_p(model, probe: Probe, kind: str, width: int, window: int) -> torch.Tensor:
    """The windowed definition with plain causal caches, one copy at a time: the clean cache before the
    span, the substituted window run on it, the clean keys and values of the later reasoning appended to
    the cache, then the conclusion and answer run at their own positions."""
    ids = torch.tensor([probe.ids(kind)])
    keep = 1 if kind == "lt_logits" else len(probe.answer_ids) + 1
    answer = torch.tensor([probe.answer_ids]) if kind != "lt_logits" else None
    out = model(input_ids=ids, use_cache=True, logits_to_keep=keep)
    clean = outcome_from_logits(out.logits, kind, answer)
    layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
    start, r = probe.reasoning_start, probe.reasoning_len
    end = start + r
    scores = torch.empty(r)
    for a in range(0, r, width):
        b, e = min(a + width, r), min(max(a + width, a + window), r)
        cache = DynamicCache([(k[:, :, : start + a], v[:, :, : start + a]) for k, v in layers])
        substituted = ids[:, start + a : start + e].clone()
        substituted[:, : b - a] = probe.pad_id
        model(input_ids=substituted, position_ids=torch.arange(start + a, start + e)[None], past_key_values=cache,
              use_cache=True)
        stale = DynamicCache([(torch.cat([layer.keys, k[:, :, start + e : end]], dim=2),
                               torch.cat([layer.values, v[:, :, start + e : end]], dim=2))
                              for layer, (k, v) in zip(cache.layers, layers)])
        logits = model(input_ids=ids[:, end:], position_ids=torch.arange(end, ids.shape[1])[None],
                       past_key_values=stale, logits_to_keep=keep).logits
        scores[a:b] = divergence(clean, outcome_from_logits(logits, kind, answer)).item()
    return scores


@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("width, window, chunk_tokens", [(1, 3, 5), (1, 4, 40), (2, 5, 4096), (3, 2, 30)])
def test_window_scores_equal_the_stale_cache_definition(model_and_tokenizer, kind, width, window, chunk_tokens):
    """The batched scorer (one 4D mask per chunk of copies) computes the windowed definition, and it is
    an approximation: away from the end of the reasoning it differs from exact OAR-P."""
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(15)
    probes = [random_probe(tokenizer, g, 6, 12, 2), random_probe(tokenizer, g, 3, 15, 3, tail=0)]
    config = ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, span_tokens=width, window_tokens=window)
    result = score("oar_p", model, probes, config)
    exact = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, span_tokens=width))
    for i, probe in enumerate(probes):
        got = result.scores[i, : probe.reasoning_len]
        assert torch.allclose(got, stale_cache_oar_p(model, probe, kind, width, window), rtol=1e-3, atol=2e-6)
        reference = exact.scores[i, : probe.reasoning_len]
        assert (got - reference).abs().max() > 0.05 * reference.abs().max()


@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("width", [1, 4])
def test_a_window_that_reaches_the_end_is_exact_oar_p(model_and_tokenizer, kind, width):
    model, tokenizer = model_and_tokenizer
    g = torch.Generator().manual_seed(16)
    probes = [random_probe(tokenizer, g, 6, 9, 2), random_probe(tokenizer, g, 3, 15, 3, tail=0)]
    exact = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=40, span_tokens=width))
    whole = score("oar_p", model, probes, ScorerConfig(probe=kind, chunk_tokens=40, span_tokens=width,
                                                       window_tokens=15))
    assert torch.allclose(whole.scores, exact.scores, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_window_tokens_must_be_a_non_negative_integer(bad):
    with pytest.raises(ValueError, match="window_tokens"):
        ScorerConfig(window_tokens=bad)


# --- OAR-G's prompt cache: the same weights as the full-probe computation -------------------------------


def full_probe_embedding_gradients(model, probes, kinds, config, objective, needs_clean, noise_sigma):
    """The gradient scorers' computation before the prompt cache: clean pass, noisy pass and backward each
    over the whole left-padded probe (prompt included), noise drawn row by row in micro-batch order."""
    from reference_scorers import _batched_outcomes, _left_pad

    from oar.method.scoring_batches import logits_to_keep, micro_batches

    embed = model.get_input_embeddings()
    generator = torch.Generator(device="cpu").manual_seed(config.seed)
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    results = [None] * len(probes)
    for group in micro_batches([len(s) for s in seqs], config.chunk_tokens):
        g_probes, g_kinds = [probes[i] for i in group], [kinds[i] for i in group]
        ids, attention, positions, offsets = _left_pad([seqs[i] for i in group], probes[0].pad_id, "cpu")
        keep = max(logits_to_keep(p, k) for p, k in zip(g_probes, g_kinds))
        clean = None
        if needs_clean:
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep).logits
                clean = _batched_outcomes(logits, g_probes, g_kinds)
        clean_embeds = embed(ids).detach()
        inputs = clean_embeds
        if noise_sigma is not None:
            noise = torch.zeros(clean_embeds.shape)
            for r, (p, off) in enumerate(zip(g_probes, offsets)):
                a = off + p.reasoning_start
                noise[r, a : a + p.reasoning_len] = torch.randn((p.reasoning_len, clean_embeds.shape[-1]),
                                                                generator=generator) * noise_sigma
            inputs = clean_embeds.float() + noise
        inputs = inputs.clone().requires_grad_(True)
        with torch.enable_grad():
            logits = model(inputs_embeds=inputs, attention_mask=attention, position_ids=positions, logits_to_keep=keep).logits
            (grad,) = torch.autograd.grad(objective(_batched_outcomes(logits, g_probes, g_kinds), clean), inputs)
        for r, (i, p, off) in enumerate(zip(group, g_probes, offsets)):
            a = off + p.reasoning_start
            results[i] = (grad[r, a : a + p.reasoning_len].float(), clean_embeds[r, a : a + p.reasoning_len].float())
    return results


def grouped_probes(tokenizer, seed: int) -> list[Probe]:
    """Probes as a GRPO batch has them: groups of responses sharing one prompt, prompts of different
    lengths, one probe without a prompt, one without an answer (LT-Logits fallback)."""
    from dataclasses import replace

    g = torch.Generator().manual_seed(seed)
    probes = []
    for prompt_len, sizes in ((7, (9, 14, 5)), (3, (11, 6)), (12, (8,))):
        prompt = random_probe(tokenizer, g, prompt_len, 1, 0).prompt_ids
        for r in sizes:
            probes.append(replace(random_probe(tokenizer, g, 1, r, 3), prompt_ids=prompt))
    probes.append(random_probe(tokenizer, g, 0, 10, 2))
    probes.append(random_probe(tokenizer, g, 5, 9, 0))
    return probes


@pytest.mark.parametrize("method", ["oar_g", "grad_norm"])
@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("chunk_tokens", [20, 60, 4096])
def test_gradient_scorers_with_the_prompt_cache_equal_the_full_probe_computation(
        model_and_tokenizer, monkeypatch, method, kind, chunk_tokens):
    from oar.method import importance
    from oar.method.gate import gate

    model, tokenizer = model_and_tokenizer
    probes = grouped_probes(tokenizer, 21)
    config = ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, noise_sigma=1e-2)
    now = score(method, model, probes, config, seed=5)
    import reference_scorers

    monkeypatch.setattr(reference_scorers, "_embedding_gradients", full_probe_embedding_gradients)
    reference_scorers.use_reference(monkeypatch, method)
    before = score(method, model, probes, config, seed=5)
    assert (before.scores.abs() > 0).any()
    scale = before.scores.abs().amax(dim=1, keepdim=True)
    assert torch.allclose(now.scores, before.scores, rtol=1e-3, atol=1e-4 * float(scale.max())), \
        (now.scores - before.scores).abs().max()
    assert torch.allclose(gate(now.scores, now.reasoning_mask, 0.4, 2.0),
                          gate(before.scores, before.reasoning_mask, 0.4, 2.0), rtol=1e-3, atol=1e-3)


def test_gradient_scorers_leave_the_parameters_gradients_alone_with_the_prompt_cache(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    probes = grouped_probes(tokenizer, 22)
    for p in model.parameters():
        p.grad = None
    score("oar_g", model, probes, ScorerConfig(chunk_tokens=40))
    assert all(p.grad is None for p in model.parameters())


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
