"""Probes of prompts and responses built as ``OARTrainer`` builds them, for scoring outside training.

``oar.score(method, model, probes)`` scores the reasoning tokens of ``oar.Probe`` objects. :func:`make_probes`
builds them from what a TRL user holds: each prompt as TRL's dataset gives it (a text, or a conversation
that the tokenizer's chat template renders with the generation prompt, as ``GRPOTrainer`` does) or as token
ids, and each response as a text, TRL's conversational completion (a list of messages, the last one's
``content``) or the generated token ids. The probes are read under a run's settings (``OARSettings``, an
``OARConfig``, or the defaults), so they equal the trainer's for the same tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from oar.method.probes import Probe, ProbeOptions
from oar.training.settings import OARSettings

# A prompt or response: a text, TRL's conversational form (a list of {"role", "content"} messages) or token ids.
Text = Union[str, Sequence[Mapping[str, Any]], Sequence[int]]


def _is_ids(value: Any) -> bool:
    return not isinstance(value, str) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def prompt_ids(tokenizer, prompt: Text) -> list[int]:
    """A prompt's token ids as ``GRPOTrainer`` makes them: a text tokenized as it is (with the tokenizer's
    special tokens), a conversation through the chat template with the generation prompt."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    if _is_ids(prompt):
        return list(prompt)
    rendered = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True,
                                             return_dict=True)
    return list(rendered["input_ids"])


def response_ids(tokenizer, response: Text) -> list[int]:
    """A response's token ids: a text (or a conversational completion's last message) tokenized without
    special tokens; ids as they are. Scoring the ids the policy generated is exact; a text re-tokenized may
    split differently from how it was generated."""
    if isinstance(response, str):
        return list(tokenizer(response, add_special_tokens=False)["input_ids"])
    if _is_ids(response):
        return list(response)
    return response_ids(tokenizer, str(response[-1]["content"]))


def make_probes(tokenizer, prompts: Sequence[Text], responses: Sequence[Text],
                settings: Any = None) -> list[Probe]:
    """One ``oar.Probe`` per (prompt, response) pair, read under ``settings``: an ``OARSettings``, an
    ``OARConfig`` (its ``oar_*`` settings) or None (the defaults), the settings that say where the answer
    span is and how OAR-P substitutes."""
    if len(prompts) != len(responses):
        raise ValueError(f"make_probes: {len(prompts)} prompts for {len(responses)} responses")
    if settings is None:
        settings = OARSettings()
    elif hasattr(settings, "oar_settings"):  # an OARConfig
        settings = settings.oar_settings()
    if not isinstance(settings, OARSettings):
        raise TypeError(f"make_probes: settings must be an OARSettings or an OARConfig, got {type(settings).__name__}")
    return ProbeOptions.of(settings).build(tokenizer, [prompt_ids(tokenizer, p) for p in prompts],
                                           [response_ids(tokenizer, r) for r in responses])
