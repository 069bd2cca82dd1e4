"""No-model structure heuristics, trivial baselines of the token-credit benchmark: scores read off the
response's own text, by where its relation signs and the numbers after them stand. No policy, no outcome,
no answer key: each reads only the reasoning tokens' text (``ScoringBatch.tokenizer``).

On the chain testbed a step is written ``a op b = r.`` (or ``~ r.`` for a sloppy estimate), and the tokens
that decide the answer are every step's relation and the digits of its result. A heuristic that finds
those by their spelling therefore finds the decisive tokens without knowing anything about credit: a
method's recall is to be read against these rows, not against chance alone.

The heuristics (each a 0/1 mark, or two levels for ``tilde_first``, over the reasoning tokens):

- ``last_step_digits``: the digits after the reasoning's last ``=`` or ``~`` (the result the answer is
  copied from: where OAR-P and OAR-G put their credit);
- ``last_step``: that last ``=`` or ``~`` and the digits after it (the last step's decisive tokens, as
  the grammar spells them);
- ``step_results``: the digits after every ``=`` or ``~``;
- ``relations_and_results``: every ``=`` or ``~`` and the digits after it;
- ``tilde_first``: ``relations_and_results`` with every ``~`` scored 2 and the rest of them 1: the sloppy
  sign read as the suspect, which any reader of the grammar can do.

"The digits after" a sign are the integer (a minus sign included) that follows it after optional spaces;
a sign followed by no integer marks only the sign. A token scores where it overlaps a marked character.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

RELATION_AND_RESULT = re.compile(r"([=~])(?:\s*(-?\d+))?")


def relation_spans(text: str) -> list[tuple[tuple[int, int], tuple[int, int] | None, str]]:
    """Every relation sign of ``text`` in order: (its character span, the span of the integer after it or
    None, the sign)."""
    return [(m.span(1), m.span(2) if m.group(2) is not None else None, m.group(1))
            for m in RELATION_AND_RESULT.finditer(text)]


def marks(text: str, rule: str) -> list[tuple[tuple[int, int], float]]:
    """The character spans ``rule`` marks in ``text`` with their scores (module docstring)."""
    spans = relation_spans(text)
    if rule == "last_step_digits":
        return [(spans[-1][1], 1.0)] if spans and spans[-1][1] is not None else []
    if rule == "last_step":
        return [(span, 1.0) for span in spans[-1][:2] if span is not None] if spans else []
    if rule == "step_results":
        return [(result, 1.0) for _, result, _ in spans if result is not None]
    if rule in ("relations_and_results", "tilde_first"):
        out = []
        for sign_span, result, sign in spans:
            out.append((sign_span, 2.0 if rule == "tilde_first" and sign == "~" else 1.0))
            if result is not None:
                out.append((result, 1.0))
        return out
    raise ValueError(f"unknown structure heuristic {rule!r}; known: {', '.join(RULES)}")


RULES = ("last_step_digits", "last_step", "step_results", "relations_and_results", "tilde_first")


def token_scores(starts: Sequence[int], ends: Sequence[int], marked: Sequence[tuple[tuple[int, int], float]]) -> Tensor:
    """Per token (character spans ``[starts[j], ends[j])``), the highest score of a marked span it overlaps,
    else 0."""
    row = torch.zeros(len(starts), dtype=torch.float32)
    for (a, b), value in marked:
        for j, (s, e) in enumerate(zip(starts, ends)):
            if s < b and a < e and value > row[j]:
                row[j] = value
    return row


def structure_scores(probes: Sequence, tokenizer, rule: str, scorer: str) -> list[Tensor]:
    """Each probe's reasoning tokens scored by ``rule`` from their decoded text; ``scorer`` names the entry
    in the error a call without a tokenizer gets."""
    from oar.method.probes import token_char_spans

    if tokenizer is None:
        raise ValueError(f"scorer {scorer!r} reads the reasoning tokens' text: the call has no tokenizer "
                         "(ScoringBatch.tokenizer)")
    rows = []
    for p in probes:
        text, starts, ends = token_char_spans(tokenizer, p.response_ids[: p.reasoning_len])
        rows.append(token_scores(starts, ends, marks(text, rule)))
    return rows


def scorer_for(rule: str) -> Callable:
    """The scorer of one rule: ``scorer(batch) -> scores`` (the built-ins' wiring calls it)."""
    if rule not in RULES:
        raise ValueError(f"unknown structure heuristic {rule!r}; known: {', '.join(RULES)}")
    return lambda batch: structure_scores(batch.probes, batch.tokenizer, rule, rule)
