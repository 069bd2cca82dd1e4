"""OAR-P over spans (training.oar.span_tokens) and with a local window (training.oar.window_tokens): each
against its brute-force definition, the cost accounting, bad values."""

import pytest
import torch
from transformers.cache_utils import DynamicCache

from oar.method.importance import score
from oar.method.probes import Probe, divergence, outcome_from_logits
from oar.method.scorer_config import ScorerConfig
from oar.method.substitution import forward_equivalents
from random_probes import random_probe

pytestmark = pytest.mark.quick


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
