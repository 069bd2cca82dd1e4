"""The prompt template: chat models get their chat template, base models plain text, same everywhere."""

from __future__ import annotations

import pytest

from oar.prompting import (
    INSTRUCTION,
    build_prompt,
    build_prompts,
    encode_prompts,
    plain_prompt,
    prompt_messages,
    use_chat,
)

PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many in total?"


def test_instruction_asks_for_boxed_answer():
    assert "\\boxed{}" in INSTRUCTION
    assert "step by step" in INSTRUCTION


def test_messages_hold_problem_and_instruction():
    msgs = prompt_messages(PROBLEM)
    assert msgs == [{"role": "user", "content": f"{PROBLEM}\n\n{INSTRUCTION}"}]


def test_plain_prompt_for_base_models():
    text = build_prompt(PROBLEM)
    assert text == plain_prompt(PROBLEM)
    assert text.startswith("Question: " + PROBLEM)
    assert INSTRUCTION in text and text.endswith("Answer:")


def test_chat_template_used_when_tokenizer_has_one(tiny_model):
    _, tok = tiny_model
    assert use_chat(tok)
    text = build_prompt(PROBLEM, tok)
    expected = tok.apply_chat_template(prompt_messages(PROBLEM), tokenize=False, add_generation_prompt=True)
    assert text == expected
    assert PROBLEM in text and INSTRUCTION in text and text != plain_prompt(PROBLEM)
    # forcing plain text on a chat tokenizer (a base model that ships a template)
    assert build_prompt(PROBLEM, tok, chat=False) == plain_prompt(PROBLEM)


def test_chat_without_template_is_an_error(tiny_model):
    _, tok = tiny_model
    with pytest.raises(ValueError, match="chat template"):
        build_prompt(PROBLEM, None, chat=True)


def test_encoding_matches_tokenized_chat_template(tiny_model):
    """Chat prompts rendered to text and re-encoded give the ids apply_chat_template(tokenize=True) gives:
    no second BOS or other special token is added."""
    _, tok = tiny_model
    [ids] = encode_prompts(tok, build_prompts([PROBLEM], tok))
    direct = tok.apply_chat_template(prompt_messages(PROBLEM), tokenize=True, add_generation_prompt=True)
    if isinstance(direct, dict) or hasattr(direct, "keys"):
        direct = direct["input_ids"]
    assert ids == list(direct)


def test_packaged_tokenizer_prompt(packaged_tokenizer):
    text = build_prompt(PROBLEM, packaged_tokenizer)
    assert text.rstrip().endswith("assistant")
    assert PROBLEM in text
