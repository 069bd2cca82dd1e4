"""Run settings for the cluster: checkpoints kept per run (save_total_limit), vLLM's context length, and
an early stop when the settings ask for vLLM in an environment without it."""

from __future__ import annotations

import importlib.util
import json

import pytest
from transformers import AutoTokenizer

from oar.evaluation.generation import VLLMGenerator
from oar.training.run import check_context_length, load_problems, train_run, training_dataset
from oar.training.settings import SettingsError, resolve_settings

NO_VLLM = importlib.util.find_spec("vllm") is None


def write_problems(tmp_path, n=8, long_problem: str | None = None):
    path = tmp_path / "train.jsonl"
    rows = [{"id": f"p{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)} for i in range(n)]
    if long_problem:
        rows.append({"id": "long", "problem": long_problem, "answer": "0"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_resolved_settings_keep_the_values_given_in_the_fields_order():
    """run.yaml and the checkpoints' fingerprint hold the resolved settings as they are: every key, in the
    settings classes' order, each value as given (a tau of 1 stays 1)."""
    from dataclasses import fields

    from oar.training.settings import TRAINER_DEFAULTS, OARSettings

    resolved = resolve_settings({"trainer": {"max_steps": 2}, "oar": {"window_tokens": 0, "tau": 1},
                                 "run_id": "r", "model": "m", "train_file": "f"})
    assert list(resolved) == ["run_id", "method", "seed", "model", "train_file", "train_limit", "model_dtype", "oar",
                              "trainer"]
    assert list(resolved["oar"]) == [setting.name for setting in fields(OARSettings)]
    assert type(resolved["oar"]["tau"]) is int and resolved["oar"]["window_tokens"] == 0
    assert resolved["trainer"] == TRAINER_DEFAULTS | {"max_steps": 2}


def test_the_trainer_config_has_the_oar_settings_defaults_and_checks(tmp_path):
    from oar.training.grpo_trainer import OARConfig
    from oar.training.settings import OARSettings

    assert OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False).oar_settings() == OARSettings()
    # named as the user typed it: OARConfig's field, not the settings file's key 'oar.tau'
    with pytest.raises(SettingsError, match=r"^OARConfig field 'oar_tau' must be in \[0, 1\], got 1\.5$"):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, oar_tau=1.5)
    with pytest.raises(SettingsError, match=r"^OARConfig field 'oar_method': unknown method 'oar_x'"):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, oar_method="oar_x")
    with pytest.raises(SettingsError, match=r"^settings key 'oar\.tau' must be in \[0, 1\], got 1\.5$"):
        resolve_settings({"run_id": "r", "model": "m", "train_file": "f", "oar": {"tau": 1.5}})


@pytest.mark.parametrize("limit", [None, 1])
def test_only_the_newest_checkpoints_are_kept(tiny_model_dir, tmp_path, limit):
    trainer = {"max_steps": 3, "save_steps": 1, "max_completion_length": 8}
    if limit is not None:
        trainer["save_total_limit"] = limit
    settings = {"run_id": "r", "method": "grpo", "model": str(tiny_model_dir),
                "train_file": str(write_problems(tmp_path)), "trainer": trainer}
    assert resolve_settings(settings)["trainer"]["save_total_limit"] == (limit or 2)  # default 2
    train_run(settings, tmp_path / "run")
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    # 3 checkpoints were written (one per step); the newest, complete one is always among those kept
    assert kept == (["checkpoint-2", "checkpoint-3"] if limit is None else ["checkpoint-3"])
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-3" / "trainer_state.json").is_file()


def test_a_training_set_smaller_than_one_step_stops_the_run_instead_of_training_nothing(tiny_model_dir, tmp_path):
    # 2 problems x 4 completions cannot fill one step of 32 x 2 completions: transformers would stop "at
    # step 0" and the run would finish with the base model's weights
    trainer = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 32,
               "gradient_accumulation_steps": 2, "max_completion_length": 8}
    settings = {"run_id": "r", "method": "grpo", "model": str(tiny_model_dir),
                "train_file": str(write_problems(tmp_path, n=2)), "trainer": trainer}
    with pytest.raises(SettingsError,
                       match=r"trained 0 of trainer.max_steps 2 steps.*2 problems.*per_device_train_batch_size 32"):
        train_run(settings, tmp_path / "run")
    assert not (tmp_path / "run" / "model").exists()


def test_a_prompt_longer_than_the_vllm_context_stops_the_run(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    records = load_problems(write_problems(tmp_path, long_problem="1 + 1 = 2. " * 40), None)
    dataset = training_dataset(records, tokenizer)
    lengths = {row["problem_id"]: len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False))
               for row in dataset}
    needed = lengths["long"] + 32
    settings = resolve_settings({"run_id": "r", "model": "m", "train_file": "f",
                                 "trainer": {"use_vllm": True, "max_completion_length": 32,
                                             "vllm_max_model_length": needed - 1}})
    with pytest.raises(SettingsError, match=rf"trainer\.vllm_max_model_length.*'long'.*needs >= {needed}"):
        check_context_length(dataset, tokenizer, settings)
    settings["trainer"]["vllm_max_model_length"] = needed
    check_context_length(dataset, tokenizer, settings)  # fits exactly


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed here")
def test_training_with_vllm_but_without_it_stops_before_loading_anything(tmp_path):
    settings = {"run_id": "r", "model": str(tmp_path / "no-such-model"), "train_file": str(tmp_path / "none.jsonl"),
                "trainer": {"use_vllm": True}}
    with pytest.raises(SettingsError, match=r"'trainer\.use_vllm'.*make setup-gpu"):
        train_run(settings, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing written, no model or data read


@pytest.mark.skipif(not NO_VLLM, reason="vLLM is installed here")
def test_vllm_evaluation_without_vllm_names_the_setting_and_the_install(tiny_model_dir):
    with pytest.raises(ImportError, match=r"evaluation\.backend 'vllm'.*make setup-gpu"):
        VLLMGenerator(tiny_model_dir)


@pytest.mark.parametrize("key, value, message", [
    ("chunk_tokens", 0, "must be an integer >= 1, got 0"),
    ("floor", 0, r"must be in \(0, 1\], got 0"),
    ("noise_sigma", 0, "must be a finite number above 0, got 0"),
    ("warmup_steps", -3, "must be an integer >= 0, got -3"),
    ("entropy_top_fraction", 1.5, r"must be in \(0, 1\], got 1.5"),
])
def test_a_bad_oar_setting_in_a_hand_written_file_stops_before_the_model_loads(tmp_path, key, value, message):
    """Each of these once passed, generated a batch and failed only at the first scoring step."""
    settings = {"run_id": "r", "method": "oar_g", "model": str(tmp_path / "no-such-model"),
                "train_file": str(tmp_path / "none.jsonl"), "oar": {key: value}}
    with pytest.raises(SettingsError, match=rf"^settings key 'oar\.{key}' {message}"):
        train_run(settings, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing written, no model or data read


def test_a_method_that_is_no_scorer_stops_before_the_model_loads(tmp_path):
    settings = {"run_id": "r", "model": str(tmp_path / "m"), "train_file": str(tmp_path / "f")}
    for method, message in (("oar_x", "unknown scorer 'oar_x'"), ("mypkg.none:f", "cannot import module 'mypkg.none'")):
        with pytest.raises(SettingsError, match=f"settings key 'method'.*{message}"):
            train_run({**settings, "method": method}, tmp_path / "run")
    assert not (tmp_path / "run").exists()
