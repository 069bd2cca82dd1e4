"""The lean CPU sampling loop (oar.models.lean_sampling) samples from generate's distribution: the same
per-token probabilities for the same prefix on the shipped testbed policy, draws whose frequencies follow
them, the same greedy decoding, and a clear error for what it does not implement."""

from __future__ import annotations

import pytest
import torch

from oar.models.lean_sampling import (LeanSamplingUnsupported, check_supported, sample, teacher_forced_logits,
                                      top_p_filter)


@pytest.fixture(scope="module")
def policy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from oar.models.frozen import policy_dir

    folder = policy_dir("chain_f1")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(folder).eval(), tokenizer


def prompts(tokenizer, copies: int = 1):
    from oar.prompting import build_prompts

    problems = ["Start with 7. Subtract 6, then multiply by 3, then multiply by 3. What is the result?",
                "Start with 12. Add 5. What is the result?"]
    return tokenizer(build_prompts(problems, tokenizer, chat=False) * copies, return_tensors="pt", padding=True)


def test_same_probabilities_as_the_model_for_the_same_prefix(policy):
    model, tokenizer = policy
    enc = prompts(tokenizer)
    assert (enc.attention_mask == 0).any()  # left padding is part of what is checked
    torch.manual_seed(0)
    out = sample(model, enc.input_ids, enc.attention_mask, max_new_tokens=40, eos_token_ids=[tokenizer.eos_token_id],
                 pad_token_id=tokenizer.pad_token_id)
    width = enc.input_ids.shape[1]
    continuation = out[:, width:]
    lean = teacher_forced_logits(model, enc.input_ids, enc.attention_mask, continuation)
    mask = torch.cat([enc.attention_mask, torch.ones_like(continuation)], dim=1)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        full = model(input_ids=out, attention_mask=mask, position_ids=positions).logits[:, width - 1:-1]
    assert lean.shape == full.shape
    difference = (lean.softmax(-1) - full.softmax(-1)).abs().max().item()
    assert difference < 1e-4, difference


def test_draws_follow_the_probabilities(policy):
    """4,000 draws of the first response token of one prompt: each token's count within 5 standard
    errors of its probability (and top-p's nucleus holds every draw)."""
    model, tokenizer = policy
    enc = prompts(tokenizer, copies=2000)
    first = teacher_forced_logits(model, enc.input_ids[:2], enc.attention_mask[:2],
                                  torch.zeros(2, 1, dtype=torch.long))[:, 0].softmax(-1)
    torch.manual_seed(1)
    out = sample(model, enc.input_ids, enc.attention_mask, max_new_tokens=1, eos_token_ids=[tokenizer.eos_token_id],
                 pad_token_id=tokenizer.pad_token_id)
    drawn = out[:, -1]
    for row in range(2):
        counts = torch.bincount(drawn[row::2], minlength=first.shape[1]).double()
        n = counts.sum()
        expected = first[row].double() * n
        error = (first[row].double() * (1 - first[row].double()) * n).sqrt().clamp_min(1.0)
        assert ((counts - expected).abs() <= 5 * error).all()
    nucleus = top_p_filter(first.float(), 0.5)
    torch.manual_seed(2)
    out = sample(model, enc.input_ids, enc.attention_mask, max_new_tokens=1, eos_token_ids=[tokenizer.eos_token_id],
                 pad_token_id=tokenizer.pad_token_id, top_p=0.5)
    for row in range(2):
        assert torch.isfinite(nucleus[row, out[row::2, -1]]).all()


def test_greedy_and_padding_match_generate(policy):
    model, tokenizer = policy
    enc = prompts(tokenizer)
    eos = [tokenizer.eos_token_id]
    lean = sample(model, enc.input_ids, enc.attention_mask, max_new_tokens=60, eos_token_ids=eos,
                  pad_token_id=tokenizer.pad_token_id, greedy=True)
    with torch.no_grad():
        reference = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, do_sample=False,
                                   max_new_tokens=60, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    assert torch.equal(lean, reference)


def test_top_p_filter_by_hand():
    # probabilities 0.5, 0.3, 0.2: top_p 0.6 keeps the two largest (the smallest's cumulative 0.2 <= 0.4)
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    kept = torch.isfinite(top_p_filter(logits, 0.6))
    assert kept.tolist() == [[True, True, False]]
    assert torch.isfinite(top_p_filter(logits, 0.01)).tolist() == [[True, False, False]]


def test_what_it_does_not_implement_is_named(policy):
    model, _ = policy
    with pytest.raises(LeanSamplingUnsupported, match="top_k 50"):
        check_supported(model, top_k=50)
    with pytest.raises(LeanSamplingUnsupported, match="repetition_penalty"):
        check_supported(model, repetition_penalty=1.1)


def test_the_setting_is_checked():
    from oar.training.settings import OARSettings, SettingsError

    assert OARSettings().sampler == "transformers"  # off by default: no published bit moves
    with pytest.raises(SettingsError, match="oar.sampler"):
        OARSettings(sampler="fast")


def test_the_lean_evaluation_backend_decodes_as_transformers():
    from oar.evaluation.generation import make_generator
    from oar.models.frozen import policy_dir
    from oar.prompting import build_prompts

    reference = make_generator("transformers", policy_dir("chain_f1"), batch_size=4, device="cpu")
    lean = make_generator("lean", policy_dir("chain_f1"), batch_size=4, device="cpu")
    prompts = build_prompts(["Start with 3. Add 4, then multiply by 2. What is the result?",
                             "Start with 12. Add 5. What is the result?"], reference.tokenizer, chat=False)
    expected = reference.generate(prompts, n=2, temperature=0.0, max_new_tokens=60)
    got = lean.generate(prompts, n=2, temperature=0.0, max_new_tokens=60)
    assert [[(o.text, o.num_tokens, o.finish_reason) for o in per] for per in got] == \
        [[(o.text, o.num_tokens, o.finish_reason) for o in per] for per in expected]
    assert lean.generate(prompts, n=2, temperature=1.0, max_new_tokens=60, seed=3)[0][0].text  # sampling runs
