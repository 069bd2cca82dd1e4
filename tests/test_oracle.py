"""oar.analysis.oracle: pad substitution + greedy re-decoding + answer change, on a scripted model and the tiny one."""

from __future__ import annotations

import pytest
import torch

from oar.analysis.oracle import causal_tokens, greedy_continuations, same_answer
from oar.method.probes import build_probes

CAUSAL = {2, 5}


class ScriptedModel(torch.nn.Module):
    """Answers 20 when the prefix ends in a pad substituted at a CAUSAL reasoning position, else 19."""

    def __init__(self, tokenizer, prompt_len):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.tok = tokenizer
        self.prompt_len = prompt_len
        self.calls = 0
        self.config = type("C", (), {"pad_token_id": tokenizer.pad_token_id})()
        self.generation_config = type("G", (), {"eos_token_id": tokenizer.eos_token_id})()

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, eos_token_id, **kwargs):
        assert kwargs["do_sample"] is False
        self.calls += 1
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prefix = [t for t, m in zip(ids, mask) if m]
            j = len(prefix) - self.prompt_len - 1
            substituted = prefix[-1] == pad_token_id
            answer = "20" if substituted and j in CAUSAL else "19"
            cont = self.tok(f" so \\boxed{{{answer}}}", add_special_tokens=False)["input_ids"] + [eos_token_id[0]]
            cont = (cont + [pad_token_id] * max_new_tokens)[:max_new_tokens]
            rows.append(ids + cont)
        return torch.tensor(rows)


def make_probe(tokenizer, answer="19"):
    prompt = tokenizer("Question: what is 3 + 16?", add_special_tokens=False)["input_ids"]
    response = tokenizer(f"3 + 16 = 19 so \\boxed{{{answer}}}", add_special_tokens=False)["input_ids"]
    (probe,) = build_probes(tokenizer, [prompt], [response + [tokenizer.eos_token_id]])
    return probe


def test_scripted_oracle_finds_the_causal_positions(tiny_model):
    _, tokenizer = tiny_model
    probe = make_probe(tokenizer)
    assert probe.reasoning_len > 6 and probe.has_answer
    model = ScriptedModel(tokenizer, len(probe.prompt_ids))
    result = causal_tokens(model, tokenizer, probe, batch_size=3, slack_tokens=12)
    assert result.reference_answer == "19"
    assert result.causal == sorted(CAUSAL)
    assert [a for a in result.answers] == ["20" if j in CAUSAL else "19" for j in range(probe.reasoning_len)]
    assert model.calls == -(-probe.reasoning_len // 3)  # batched
    # a budget for each position: the tokens that followed it plus the slack
    assert result.budgets[0] > result.budgets[-1] >= 1


def test_clean_reference_isolates_the_substitution(tiny_model):
    """A sampled response that answered 21: against its own answer every position looks causal (the
    greedy re-decode says 19 anyway); against the clean re-decode only the substituted ones are."""
    _, tokenizer = tiny_model
    probe = make_probe(tokenizer, answer="21")
    model = ScriptedModel(tokenizer, len(probe.prompt_ids))
    own = causal_tokens(model, tokenizer, probe, reference="response")
    assert own.causal == list(range(probe.reasoning_len))
    clean = causal_tokens(model, tokenizer, probe, reference="clean")
    assert clean.causal == sorted(CAUSAL)
    assert clean.clean_answers == ["19"] * probe.reasoning_len


def test_positions_subset_and_errors(tiny_model):
    _, tokenizer = tiny_model
    probe = make_probe(tokenizer)
    model = ScriptedModel(tokenizer, len(probe.prompt_ids))
    result = causal_tokens(model, tokenizer, probe, positions=[0, 2])
    assert result.causal == [2] and result.answers[1] is None
    with pytest.raises(ValueError, match="positions"):
        causal_tokens(model, tokenizer, probe, positions=[probe.reasoning_len])
    with pytest.raises(ValueError, match="reference"):
        causal_tokens(model, tokenizer, probe, reference="gold")


def test_same_answer():
    assert same_answer(None, None) and not same_answer("3", None) and not same_answer(None, "3")
    assert same_answer("19", "19.0") and not same_answer("19", "20")


def test_tiny_model_oracle_is_deterministic_and_batch_independent(tiny_model):
    model, tokenizer = tiny_model
    probe = make_probe(tokenizer)
    a = causal_tokens(model, tokenizer, probe, batch_size=4, slack_tokens=4)
    b = causal_tokens(model, tokenizer, probe, batch_size=1, slack_tokens=4)
    assert a.reasoning_len == probe.reasoning_len == len(a.answers)
    assert a.answers == b.answers and a.causal == b.causal
    assert set(a.causal) <= set(range(probe.reasoning_len))
    assert a.tokens_generated > 0
    assert not model.training


def test_greedy_continuations_cut_at_eos_and_budget(tiny_model):
    model, tokenizer = tiny_model
    prefixes = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    out = greedy_continuations(model, prefixes, [3, 1, 5], tokenizer.pad_token_id, [tokenizer.eos_token_id], 2)
    assert [len(o) <= b for o, b in zip(out, [3, 1, 5])] == [True] * 3
    assert all(tokenizer.eos_token_id not in o for o in out)
    # the same prefix alone gives the same continuation
    alone = greedy_continuations(model, prefixes[2:], [5], tokenizer.pad_token_id, [tokenizer.eos_token_id])
    assert alone[0] == out[2]


def test_interventions_build_the_right_prefixes_and_the_null_one_flips_nothing(tiny_model):
    from oar.analysis.oracle import INTERVENTIONS, alternative_tokens, intervened, space_token_id

    model, tokenizer = tiny_model
    response = [10, 11, 12, 13, 14]
    assert intervened([1], response, 5, 2, "none", None) == ([10, 11, 12], 3)
    assert intervened([1], response, 5, 2, "pad", 0) == ([10, 11, 0], 3)
    assert intervened([1], response, 5, 2, "delete", None) == ([10, 11, 13], 4)  # 12 gone, 13 kept
    assert intervened([1], response, 5, 4, "delete", None) == ([10, 11, 12, 13], 5)  # nothing after the last
    assert tokenizer.decode([space_token_id(tokenizer)]) == " "
    probe = make_probe(tokenizer)
    alternatives = alternative_tokens(model, tokenizer, probe.prompt_ids, probe.response_ids,
                                      range(probe.reasoning_len))
    special = set(tokenizer.all_special_ids)
    assert all(a != probe.response_ids[j] and a not in special for j, a in enumerate(alternatives))
    # against the clean re-decode of the same prefix, the null intervention is the same decode: no flip
    null = causal_tokens(model, tokenizer, probe, slack_tokens=4, intervention="none", reference="clean")
    assert null.causal == [] and null.intervention == "none"
    for name in INTERVENTIONS:
        result = causal_tokens(model, tokenizer, probe, slack_tokens=4, intervention=name)
        assert set(result.causal) <= set(range(probe.reasoning_len)) and result.intervention == name
    with pytest.raises(ValueError, match="intervention"):
        causal_tokens(model, tokenizer, probe, intervention="swap")
