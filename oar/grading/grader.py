"""Grading one response: its answer span (``oar.grading.extraction``), then whether that answer equals
the reference (``oar.grading.equivalence``)."""

from __future__ import annotations

from dataclasses import dataclass

from oar.grading.equivalence import match_answers
from oar.grading.extraction import AnswerSpan, extract_answer


@dataclass(frozen=True)
class Grade:
    """Outcome of grading one response: its answer span (None when none was found), correctness, and
    whether the symbolic check timed out twice (``undecided``; ``correct`` is then False)."""

    answer: AnswerSpan | None
    correct: bool
    undecided: bool = False


def grade(response: str, reference: str, fallback_last_number: bool = True, timeout_s: float = 5.0,
          answer_statement: bool = True) -> Grade:
    """`extract_answer` then `match_answers`; a response without an answer is incorrect."""
    answer = extract_answer(response, fallback_last_number=fallback_last_number, answer_statement=answer_statement)
    if answer is None:
        return Grade(answer=None, correct=False)
    verdict = match_answers(answer.text, reference, timeout_s=timeout_s)
    return Grade(answer=answer, correct=verdict is True, undecided=verdict is None)
