"""The one prompt template, shared by training and evaluation.

A problem becomes a prompt in one of two ways:

- chat (instruct) models, whose tokenizer carries a chat template: one user turn holding the problem and
  the ``\\boxed{}`` instruction, rendered with ``tokenizer.apply_chat_template(...,
  add_generation_prompt=True)``;
- base models (no chat template): plain text, ``Question: ...`` / instruction / ``Answer:``.

The instruction sits in the user turn, not in a system turn, so templates without a system role work and
a template's own default system prompt (SmolLM2 has one) is left as its authors meant it.

Chat prompts rendered to text already contain the template's special tokens; they must be tokenized with
``add_special_tokens=False`` (what ``apply_chat_template(tokenize=True)`` does). Plain-text prompts are
tokenized with the tokenizer's usual special tokens (a BOS where the model expects one).
:func:`encode_prompts` applies that rule; both generation backends use it.
"""

from __future__ import annotations

from typing import Any

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

# Plain-text template for base models (no chat template).
PLAIN_TEMPLATE = "Question: {problem}\n{instruction}\nAnswer:"


def user_content(problem: str) -> str:
    """Text of the user turn: the problem, a blank line, the boxed-answer instruction."""
    return f"{problem.strip()}\n\n{INSTRUCTION}"


def prompt_messages(problem: str) -> list[dict[str, str]]:
    """Conversational prompt (list of messages), e.g. for TRL's ``GRPOTrainer``."""
    return [{"role": "user", "content": user_content(problem)}]


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def use_chat(tokenizer: Any = None, chat: bool | None = None) -> bool:
    """Resolve the ``chat`` setting: ``None`` means "when the tokenizer has a chat template"."""
    if chat is None:
        return tokenizer is not None and has_chat_template(tokenizer)
    if chat and (tokenizer is None or not has_chat_template(tokenizer)):
        raise ValueError("chat=True needs a tokenizer with a chat template")
    return bool(chat)


def plain_prompt(problem: str) -> str:
    return PLAIN_TEMPLATE.format(problem=problem.strip(), instruction=INSTRUCTION)


def build_prompt(problem: str, tokenizer: Any = None, chat: bool | None = None) -> str:
    """The prompt string for one problem.

    ``chat=None`` (default) uses the chat template when the tokenizer has one, plain text otherwise;
    ``chat=False`` forces plain text (e.g. a base model whose tokenizer ships a template anyway).
    """
    if use_chat(tokenizer, chat):
        return tokenizer.apply_chat_template(
            prompt_messages(problem), tokenize=False, add_generation_prompt=True
        )
    return plain_prompt(problem)


def build_prompts(problems: list[str], tokenizer: Any = None, chat: bool | None = None) -> list[str]:
    return [build_prompt(p, tokenizer, chat) for p in problems]


def encode_prompts(tokenizer: Any, prompts: list[str], chat: bool | None = None) -> list[list[int]]:
    """Token ids of prompt strings made by :func:`build_prompt` (same ``chat`` setting).

    Chat-rendered prompts already hold their special tokens, so none are added; plain prompts get the
    tokenizer's usual ones.
    """
    add_special = not use_chat(tokenizer, chat)
    return [tokenizer(p, add_special_tokens=add_special)["input_ids"] for p in prompts]
