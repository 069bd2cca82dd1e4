"""The outcome a user defines: the conclusion and the answer span as settings (``oar.method.answer_spans``),
checked early and naming the field; the probes they build; the trainer's fallback warning's cadence; and
runs made before them keeping their settings file and checkpoint fingerprint."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
import yaml

from oar.method.answer_spans import MATHS_CONCLUSION, AnswerRule
from oar.method.probes import CONCLUDE_TEXT, build_probes
from oar.models.tiny import build_tiny_tokenizer
from oar.training.fallback_warning import FallbackWarning
from oar.training.settings import OARSettings, SettingsError, resolve_settings

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]
FIELD = "oar[._]"  # the field as the workflow (oar.x) or OARConfig (oar_x) names it


def label_span(text: str):
    """A user's answer finder (named by import path in the tests below): the word after the last "Label:"."""
    at = text.rfind("Label:")
    if at < 0:
        return None
    start = at + len("Label:")
    while start < len(text) and text[start] == " ":
        start += 1
    end = start
    while end < len(text) and text[end].isalpha():
        end += 1
    return (start, end) if end > start else None


def backwards_span(text: str):
    return (5, 2)


not_a_function = "Label:"


@pytest.mark.parametrize("setting, value, problem", [
    ("answer_pattern", "Label:(", r"must be a regular expression, got 'Label:\(' \(missing \)"),
    ("answer_pattern", r"Label:\s*\w+", r"must have exactly one capturing group, the answer .* got 0"),
    ("answer_pattern", r"(Label|Tag):\s*(\w+)",
     r"must have exactly one capturing group, the answer \(write others as \(\?:\.\.\.\)\), got 2"),
    ("answer_finder", "label_span", r"must be an import path 'package.module:function', got 'label_span'"),
    ("answer_finder", "no_such_module:f", r"names module 'no_such_module' .* cannot be imported"),
    ("answer_finder", "test_answer_spans:no_such_function",
     r"names '.*', but module 'test_answer_spans' has no 'no_such_function'"),
    ("answer_finder", "test_answer_spans:not_a_function",
     r"names 'test_answer_spans:not_a_function', which is a str, not a function"),
    ("conclusion", "", r"must be a non-empty string"),
])
def test_a_bad_outcome_setting_stops_at_once_naming_the_field(setting, value, problem, tmp_path):
    from oar.training.grpo_trainer import OARConfig

    with pytest.raises(SettingsError, match=f"{FIELD}{setting}' {problem}"):
        OARSettings.of({setting: value})
    with pytest.raises(SettingsError, match=f"{FIELD}{setting}' {problem}"):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{f"oar_{setting}": value})
    both = {"answer_pattern": r"Label:(\w+)", "answer_finder": "test_answer_spans:label_span"}
    with pytest.raises(SettingsError, match="'oar.answer_pattern' is set beside answer_finder"):
        OARSettings.of(both)
    with pytest.raises(SettingsError, match="field 'oar_answer_pattern' is set beside answer_finder"):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **{f"oar_{k}": v for k, v in both.items()})


def test_the_maths_defaults_are_todays_probe():
    settings = OARSettings()
    assert settings.conclusion == CONCLUDE_TEXT == MATHS_CONCLUSION == "\n\nTherefore, the final answer is \\boxed{"
    assert settings.answer_pattern == settings.answer_finder == ""
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())["$defs"]["oar"]["properties"]
    assert schema["conclusion"]["default"] == CONCLUDE_TEXT


def test_a_pattern_finds_the_last_non_blank_group_and_the_reasoning_stops_at_its_match():
    rule = AnswerRule(pattern=r"Label:(\s*\w+)")
    text = "Label: draft. good fun dull: positive.\nLabel: positive"
    span = rule.find(text)
    assert (span.text, span.kind, text[span.reasoning_end:span.start]) == (" positive", "pattern", "Label:")
    assert rule.find("good fun dull: positive.") is None
    assert AnswerRule(pattern=r"Label:(\s*\w*)").find("Label: yes\nLabel: ").text == " yes"  # a blank group is none
    # the maths rules would have read the number: the pattern replaces them
    assert AnswerRule().find("3 good words. Label: positive").kind == "last_number"


def test_a_finder_gives_the_span_and_the_reasoning_stops_before_the_responses_own_conclusion():
    rule = AnswerRule(finder="test_answer_spans:label_span", conclusion="\nLabel:")
    text = "good fun dull: positive.\nLabel:  positive"
    span = rule.find(text)
    assert (span.text, span.kind, text[:span.reasoning_end]) == ("positive", "finder", "good fun dull: positive.\n")
    assert AnswerRule(finder="test_answer_spans:label_span", conclusion="So:").find(text).reasoning_end == span.start
    assert rule.find("no label here") is None
    with pytest.raises(ValueError, match=r"answer_finder 'test_answer_spans:backwards_span' returned \(5, 2\) for a "
                                         r"response of 6 characters: it must return None or \(start, end\)"):
        AnswerRule(finder="test_answer_spans:backwards_span").find("Label:")


@pytest.mark.parametrize("outcome", [{"answer_pattern": r"Label:(\s*\w+)"},
                                     {"answer_finder": "test_answer_spans:label_span"}])
def test_a_label_probe_is_the_responses_own_tokens_when_the_conclusion_is_what_it_wrote(outcome):
    """With the conclusion the response itself writes before its label, the probe reads the response as
    written: prompt | reasoning | "Label:" | " positive" (the answer's own tokens, the space included for
    the pattern, which keeps it)."""
    lines = ["Review: good fun dull\n", "good fun dull: positive.\nLabel: positive"]
    tokenizer = build_tiny_tokenizer(vocab_size=300, corpus=lines * 4)
    prompt = tokenizer(lines[0], add_special_tokens=False)["input_ids"]
    response = tokenizer(lines[1], add_special_tokens=False)["input_ids"]
    (probe,) = build_probes(tokenizer, [prompt], [response + [tokenizer.eos_token_id]], conclusion="Label:", **outcome)
    assert tokenizer.decode(probe.response_ids[: probe.reasoning_len]) == "good fun dull: positive.\n"
    assert tokenizer.decode(probe.conclude_ids) == "Label:"
    assert tokenizer.decode(probe.answer_ids) == (" positive" if "answer_pattern" in outcome else "positive")
    if "answer_pattern" in outcome:
        assert probe.ids("as_mean") == prompt + response
    (maths,) = build_probes(tokenizer, [prompt], [response])
    assert not maths.has_answer and maths.conclude_ids == tuple(tokenizer(CONCLUDE_TEXT)["input_ids"])


def test_the_fallback_warning_is_said_at_the_first_tenth_and_hundredth_batch_where_most_rows_fall_back(caplog):
    warning = FallbackWarning(OARSettings())
    with caplog.at_level(logging.WARNING, logger="oar.training.fallback_warning"):
        assert warning.observe(fallen_back=4, scored=8) is None  # half is not most
        assert warning.observe(fallen_back=0, scored=0) is None  # nothing scored (GRPO, A = 0 everywhere)
        said = [n for n in range(1, 151) if warning.observe(fallen_back=5, scored=8) is not None]
    assert said == [1, 10, 100] and len(caplog.records) == 3
    first = caplog.records[0].getMessage()
    assert first.startswith("OAR found no answer span in 5 of 8 scored responses (looked for by the maths rules")
    assert "set oar_answer_pattern" in first and "oar_conclusion" in first and "the 1st such" in first
    assert "the 100th such" in caplog.records[2].getMessage()
    pattern = FallbackWarning(OARSettings(answer_pattern=r"Label:(\w+)")).message(8, 8)
    assert "oar_answer_pattern='Label:(\\\\w+)'" in pattern and "Check oar_answer_pattern" in pattern
    assert "oar_conclusion is still the maths one" in pattern
    fitted = FallbackWarning(OARSettings(answer_pattern=r"L:(\w+)", conclusion="L:")).message(8, 8)
    assert "Check oar_answer_pattern" in fitted and "still the maths" not in fitted


# The oar settings added after the first runs were made, each declared by added_setting: the outcome settings,
# the CPU sampler and the step balance.
ADDED_SINCE = ("conclusion", "answer_pattern", "answer_finder", "sampler", "step_balance", "step_delimiter")


def test_runs_made_before_the_outcome_settings_keep_their_settings_file_and_fingerprint():
    """At their defaults the new settings are left out of a run's settings file and of its checkpoints'
    fingerprint (the resolved settings' hash as it was before they existed); set, they are in both."""
    from oar.training.run import settings_fingerprint
    from validated_registry import validated_registry

    given = {"run_id": "r", "model": "m", "train_file": "f", "method": "oar_g", "oar": {"tau": 0.3}}
    resolved = resolve_settings(given)
    before = {**resolved, "oar": {k: v for k, v in resolved["oar"].items() if k not in ADDED_SINCE}}
    assert settings_fingerprint(resolved) == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
    labelled = resolve_settings({**given, "oar": {"tau": 0.3, "conclusion": "Label:"}})
    assert settings_fingerprint(labelled) != settings_fingerprint(resolved)

    cfg = yaml.safe_load((ROOT / "tests" / "data" / "registry_config.yaml").read_text())
    oar = validated_registry(cfg).run_settings("smollm2", "oar_g", 0)["oar"]
    assert not set(ADDED_SINCE) & set(oar)
    cfg["training"]["oar"] |= {"conclusion": "Label:", "answer_pattern": r"Label:(\s*\w+)"}
    oar = validated_registry(cfg).run_settings("smollm2", "oar_g", 0)["oar"]
    assert (oar["conclusion"], oar["answer_pattern"]) == ("Label:", r"Label:(\s*\w+)") and "answer_finder" not in oar


def test_the_held_out_scripts_read_the_outcome_settings():
    """The workflow's held-out scripts (heldout.py, oracle_tokens.py, score_heldout.py) build their probes
    with the training's outcome settings: their shared options carry them into the probe options."""
    import sys

    sys.path.insert(0, str(ROOT / "workflow_scripts"))
    try:
        from _script_io import model_script_parser, probe_options
    finally:
        sys.path.remove(str(ROOT / "workflow_scripts"))
    parser = model_script_parser(None, "a held-out script")
    assert probe_options(parser.parse_args(["--model", "m"])).conclusion == CONCLUDE_TEXT
    given = parser.parse_args(["--model", "m", "--conclusion", "Label:", "--answer-pattern", r"Label:(\s*\w+)"])
    options = probe_options(given)
    assert (options.conclusion, options.answer_pattern, options.answer_finder) == ("Label:", r"Label:(\s*\w+)", "")
    smk = (ROOT / "rules" / "analysis.smk").read_text()
    assert all(f'"{key}"' in smk for key in ("conclusion", "answer_pattern", "answer_finder"))
