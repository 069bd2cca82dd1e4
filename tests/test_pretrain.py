"""The testbed's policy (oar.training.pretrain, model source 'chain'): pretraining learns the task's grammar, the
model folder is an ordinary one with its pretraining report, and a policy that leaves too few mixed
GRPO groups stops the workflow with the measured rate before any RL job."""

from __future__ import annotations

import json

import pytest
import torch

from oar.data import chains
from oar.training.pretrain import (PretrainedTooWeak, PretrainSettings, check_learnable, pretrain, sampled_pass_rate,
                                  write_testbed_model)

SMALL = {"layers": 1, "hidden": 64, "updates": 40, "batch_size": 16, "learning_rate": 0.01,
         "check_prompts": 4, "check_group": 4}


def test_pretraining_lowers_the_loss_and_is_seeded():
    torch.set_num_threads(1)
    settings = PretrainSettings(**{**SMALL, "updates": 30})
    _, _, log = pretrain(settings, log=lambda *_: None)
    assert log[-1]["loss"] < 0.6 * log[0]["loss"]
    _, _, again = pretrain(settings, log=lambda *_: None)
    assert [r["loss"] for r in again] == [r["loss"] for r in log]


def test_a_chain_model_folder_holds_its_pretraining_report(tmp_path):
    out = write_testbed_model({**SMALL, "min_mixed_groups": 0.0}, tmp_path / "m", seed=3, threads=1)
    report = json.loads((out / "pretrain.json").read_text())
    assert report["settings"]["seed"] == 3 and report["settings"]["filler"] == 0
    assert set(report["check"]) >= {"pass_rate", "mixed_groups", "mean_completion_tokens"}
    assert report["check"]["prompts"] == 4 and report["check"]["group"] == 4
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and tok.pad_token_id != tok.eos_token_id
    AutoModelForCausalLM.from_pretrained(out)


def test_a_policy_with_too_few_mixed_groups_stops_before_rl_naming_the_key_and_rate(tmp_path):
    with pytest.raises(PretrainedTooWeak, match=r"models.<name>.pretrain: the pretrained model's sampled pass rate is "
                                                r"\d\.\d\d with \d+% mixed groups"):
        write_testbed_model({**SMALL, "updates": 2, "min_mixed_groups": 1.0}, tmp_path / "m", threads=1)
    assert not (tmp_path / "m").exists() and not list(tmp_path.iterdir())  # nothing complete-looking is left
    measured = {"pass_rate": 0.02, "mixed_groups": 0.05, "group": 8, "temperature": 1.0}
    with pytest.raises(PretrainedTooWeak, match="models.chain_f1.pretrain.error_rate"):
        check_learnable(measured, PretrainSettings(), "models.chain_f1.pretrain")


def test_settings_out_of_range_and_unknown_keys_are_named(tmp_path):
    with pytest.raises(ValueError, match="filler"):
        PretrainSettings(filler=7)
    with pytest.raises(ValueError, match="error_rate"):
        PretrainSettings(error_rate=1.5)
    with pytest.raises(ValueError, match="unknown settings dropout"):
        write_testbed_model({"dropout": 0.1}, tmp_path / "m")


def test_the_pass_rate_check_grades_sampled_completions():
    settings = PretrainSettings(**SMALL)
    model, tokenizer, _ = pretrain(settings, log=lambda *_: None)
    problems = [chains.problem("test", i) for i in range(3)]
    out = sampled_pass_rate(model, tokenizer, problems, group=4, temperature=1.0, max_new_tokens=80)
    assert out["prompts"] == 3 and out["group"] == 4 and 0.0 <= out["pass_rate"] <= 1.0
    assert 0.0 <= out["mixed_groups"] <= 1.0 and out["mean_completion_tokens"] > 0
