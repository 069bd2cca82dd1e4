"""Where a response's final answer is, as the outcome probes read it (torch-free): the maths rules of
``oar.grading.extraction`` (the default), a regular expression whose one group is the answer, or a
function of the user's named by import path ``package.module:function``.

OAR's outcome is the model's distribution over the final answer, read after the probe's conclusion
(``prompt | reasoning | conclusion | answer``, ``oar.method.probes``). The answer span decides where the
reasoning stops and which tokens the answer-span outcomes teacher-force; the conclusion is the text that
leads into the answer. For a task whose answer is not a maths result the two are set together, e.g. the
conclusion ``"Label:"`` with the pattern ``r"Label:(\\s*\\w+)"``.

The settings' checks (:func:`pattern_problem`, :func:`finder_problem`) say what is wrong with a value
before any response is read; :class:`AnswerRule` finds the span of one response.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oar.grading.extraction import AnswerSpan, extract_answer

# The probes' conclusion for a maths answer: the paper's template, its box left open for the answer.
MATHS_CONCLUSION = "\n\nTherefore, the final answer is \\boxed{"

_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def pattern_problem(value: Any) -> str | None:
    """What is wrong with an answer pattern setting, or None: "" (the maths rules) or a regular
    expression with exactly one capturing group, the answer."""
    if not isinstance(value, str):
        return f"must be a regular expression (a string), got {value!r}"
    if not value:
        return None
    try:
        groups = re.compile(value).groups
    except re.error as error:
        return f"must be a regular expression, got {value!r} ({error})"
    if groups != 1:
        return (f"must have exactly one capturing group, the answer (write others as (?:...)), got {groups} in "
                f"{value!r}")
    return None


def finder_problem(value: Any) -> str | None:
    """What is wrong with an answer finder setting, or None: "" (the maths rules) or the import path
    ``package.module:function`` of a callable (imported here, so a path that does not resolve stops now)."""
    if not isinstance(value, str):
        return f"must be an import path 'package.module:function', got {value!r}"
    if not value:
        return None
    try:
        _import_finder(value)
    except ValueError as error:
        return str(error)
    return None


def _import_finder(path: str) -> Callable[[str], Any]:
    if not _IMPORT_PATH.fullmatch(path):
        raise ValueError(f"must be an import path 'package.module:function', got {path!r}")
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"names module {module_name!r} ({path!r}), which cannot be imported ({error})") from None
    function = getattr(module, attribute, None)
    if function is None:
        raise ValueError(f"names {path!r}, but module {module_name!r} has no {attribute!r}")
    if not callable(function):
        raise ValueError(f"names {path!r}, which is a {type(function).__name__}, not a function")
    return function


@dataclass(frozen=True)
class AnswerRule:
    """How the probes find a response's answer span: by ``pattern``, by ``finder``, or (both "") by the
    maths rules under their two switches. Built once per call of ``oar.method.probes.build_probes``.

    - maths: ``oar.grading.extraction.extract_answer`` (the last ``\\boxed{}``, an "answer is"
      statement, the last number); spans of kind ``boxed``, ``statement`` or ``last_number``.
    - ``pattern``: the last match whose group holds a non-blank answer; the answer is the group exactly
      as matched (so ``r"Label:(\\s*\\w+)"`` keeps the space that the response's own answer token starts
      with), the reasoning ends where the whole match starts. Kind ``pattern``.
    - ``finder``: ``function(response_text)`` returns the answer's character span ``(start, end)`` or
      None. The reasoning ends where the answer starts, or, when the response wrote the conclusion
      (``conclusion``, whitespace aside) right before the answer, where it wrote it, so that the probe
      does not say it twice. Kind ``finder``.
    """

    pattern: str = ""
    finder: str = ""
    conclusion: str = ""
    fallback_last_number: bool = True
    answer_statement: bool = True
    _compiled: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _function: Callable[[str], Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.pattern and self.finder:
            raise ValueError("give an answer pattern or an answer finder, not both")
        for name, problem in (("answer_pattern", pattern_problem(self.pattern)),
                              ("answer_finder", finder_problem(self.finder))):
            if problem:
                raise ValueError(f"{name} {problem}")
        if self.pattern:
            object.__setattr__(self, "_compiled", re.compile(self.pattern))
        if self.finder:
            object.__setattr__(self, "_function", _import_finder(self.finder))

    @property
    def is_maths(self) -> bool:
        return not (self.pattern or self.finder)

    def find(self, text: str) -> AnswerSpan | None:
        """The answer span of one response's text, or None when it has none."""
        if self._compiled is not None:
            return self._by_pattern(text)
        if self._function is not None:
            return self._by_finder(text)
        return extract_answer(text, fallback_last_number=self.fallback_last_number,
                              answer_statement=self.answer_statement)

    def _by_pattern(self, text: str) -> AnswerSpan | None:
        last = None
        for match in self._compiled.finditer(text):
            if match.group(1) is not None and match.group(1).strip():
                last = match
        if last is None:
            return None
        start, end = last.span(1)
        return AnswerSpan(text[start:end], start, end, reasoning_end=last.start(), kind="pattern")

    def _by_finder(self, text: str) -> AnswerSpan | None:
        found = self._function(text)
        if found is None:
            return None
        if not (isinstance(found, (tuple, list)) and len(found) == 2
                and all(isinstance(i, int) and not isinstance(i, bool) for i in found)
                and 0 <= found[0] < found[1] <= len(text)):
            raise ValueError(f"answer_finder {self.finder!r} returned {found!r} for a response of {len(text)} "
                             f"characters: it must return None or (start, end) with 0 <= start < end <= {len(text)}")
        start, end = found
        return AnswerSpan(text[start:end], start, end, reasoning_end=self._own_conclusion_start(text, start),
                          kind="finder")

    def _own_conclusion_start(self, text: str, answer_start: int) -> int:
        """Where the response's own copy of the conclusion starts, when it ends right before the answer
        (whitespace between them allowed); else the answer's start."""
        words = self.conclusion.strip()
        before = text[:answer_start].rstrip()
        return len(before) - len(words) if words and before.endswith(words) else answer_start
