"""Probes from real token ids: where the reasoning ends and the answer starts on real tokenizers' output,
characters split across tokens, padding, LaTeX answers, and the one pad rule OAR-P substitutes."""

import numpy as np
import pytest
import torch

from oar.method.importance import score
from oar.method.probes import (CONCLUDE_TEXT, build_probes, divergence, outcome_from_logits, pad_token_id,
                               probes_from_padded, token_char_spans)
from oar.method.scorer_config import ScorerConfig
from oar.models.tiny import build_tiny_model

pytestmark = pytest.mark.quick


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
    (probe,) = build_probes(tokenizer, [prompt], [tokenizer("12 + 7 = 19", add_special_tokens=False)["input_ids"]],
                            fallback_last_number=False)
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
    split = [c for c in cases
             if "".join(tokenizer.batch_decode([[i] for i in c], **flags)) != tokenizer.decode(c, **flags)]
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
    prompts = [tokenizer("Question: 1 + 1?", add_special_tokens=False)["input_ids"],
               tokenizer("Q: 2?", add_special_tokens=False)["input_ids"]]
    responses = [tokenizer("1 + 1 = 2", add_special_tokens=False)["input_ids"],
                 tokenizer("\\boxed{2}", add_special_tokens=False)["input_ids"]]
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
