"""Scoring outside training as docs/library.md shows it: `oar.make_probes`, `oar.score`, `oar.gate` on the tiny
model, and the probes `make_probes` builds equal the trainer's for the same tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import oar
from oar.method.probes import ProbeOptions

pytestmark = pytest.mark.quick

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "library.md"
HUB_ID = "Qwen/Qwen2.5-0.5B-Instruct"


def documented_snippet() -> str:
    """The python block under docs/library.md's "Scoring outside training" heading."""
    section = LIBRARY.read_text(encoding="utf-8").split("### Scoring outside training", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_snippet_scores_and_gates_a_response(tiny_model_dir):
    snippet = documented_snippet()
    assert HUB_ID in snippet
    namespace: dict = {}
    exec(snippet.replace(HUB_ID, str(tiny_model_dir)), namespace)
    probes, scores, weights = namespace["probes"], namespace["scores"], namespace["weights"]
    (probe,) = probes
    assert probe.has_answer and probe.answer_kind == "boxed" and 0 < probe.reasoning_len < len(probe.response_ids)
    reasoning = scores.reasoning_mask[0]
    assert int(reasoning.sum()) == probe.reasoning_len and bool(scores.scored[0])
    assert (scores.scores[0][~reasoning] == 0).all() and (scores.scores[0][reasoning] > 0).any()
    # the gate keeps the reasoning's mass and reshapes it
    assert torch.isclose(weights[0][reasoning].sum(), torch.tensor(float(probe.reasoning_len)))
    assert weights[0][reasoning].std() > 0


def test_make_probes_gives_the_trainers_probes_for_the_same_ids(tiny_model):
    model, tokenizer = tiny_model
    config = oar.OARConfig(output_dir="unused", use_cpu=True, oar_method="oar_g", oar_own_conclusion=False)
    prompt = [{"role": "user", "content": "What is 4 + 4?"}]
    prompt_ids = oar.make_probes(tokenizer, [prompt], ["x"])[0].prompt_ids
    assert list(prompt_ids) == tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                             return_dict=True)["input_ids"]
    response = tokenizer("4 + 4 = 8. The answer is \\boxed{8}.", add_special_tokens=False)["input_ids"]
    response += [tokenizer.eos_token_id]
    made = oar.make_probes(tokenizer, [list(prompt_ids)], [response], settings=config)
    trainers = ProbeOptions.of(config.oar_settings()).from_padded(
        tokenizer, torch.tensor([prompt_ids]), torch.ones(1, len(prompt_ids)), torch.tensor([response]),
        torch.ones(1, len(response)))
    assert made == trainers
    # the settings decide: the default reads the response's own conclusion, this config does not
    assert made != oar.make_probes(tokenizer, [list(prompt_ids)], [response])
    assert oar.make_probes(tokenizer, ["What is 4 + 4?"], [[{"role": "assistant", "content": "8"}]])[0].response_ids \
        == tuple(tokenizer("8", add_special_tokens=False)["input_ids"])


def test_make_probes_refuses_unequal_lists_and_other_settings(tiny_model):
    _, tokenizer = tiny_model
    with pytest.raises(ValueError, match="2 prompts for 1 responses"):
        oar.make_probes(tokenizer, ["a", "b"], ["c"])
    with pytest.raises(TypeError, match="OARSettings or an OARConfig"):
        oar.make_probes(tokenizer, ["a"], ["b"], settings={"tau": 0.4})
