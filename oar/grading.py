"""Final-answer extraction and answer equivalence: the verifier behind every reward and accuracy.

Three steps, each usable on its own:

* `extract_answer` finds a response's answer span (method.md section 2) by a cascade: the content of
  the last top-level ``\\boxed{...}``; else (optionally) the answer an explicit statement gives ("The
  answer is 7", "Final answer: 7", "Therefore, the final answer is 7"); else (optionally) the last number,
  widened to the whole LaTeX expression it closes (``\\frac{1}{4}``, ``\\sqrt{5}``, ``(-1, 6)``).
* `extract_reference` turns a dataset's reference (GSM8K ``#### 72`` solutions, MATH solutions with a
  ``\\boxed{}``, AMC floats such as ``27.0``) into a plain answer string.
* `answers_match` decides equivalence: a cheap normalised/numeric comparison first (percent signs,
  units, thousands separators, times of day, repeating decimals), then `math_verify` for everything
  symbolic.

Timeouts. math-verify's own timeouts use ``signal.alarm``, which raises outside the main thread and
cannot be used in worker threads at all, and counts wall-clock seconds, which a loaded machine stretches.
We switch them off and run math-verify in small helper processes started with `subprocess` (this very
file run as a script, see `_serve`). The limit ``timeout_s`` counts the helper's CPU seconds spent on
the one check (read from ``/proc``; wall-clock seconds where there is no ``/proc``), so the verdict does
not depend on what else runs on the machine; the helper's start-up (importing sympy, and a warm-up
check that builds math-verify's lazily compiled parsers) happens before it reports ready and is never
counted. A check over the limit kills its helper and is retried once on a fresh one; a second time-out
makes the verdict *undecided* (`match_answers` returns None, `Grade.undecided` is True), which rewards
count as no match and which the training metrics and the evaluation summaries count separately.
`subprocess` works from any thread and also from daemonic `multiprocessing` workers, which may not
start `multiprocessing` children. Helpers are pooled: one per concurrently checking thread, reused
across calls, so the ~0.5 s start-up is paid once per process and thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import numbers
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from fractions import Fraction

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------
# Answer spans
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerSpan:
    """Where the final answer sits in a response.

    Attributes:
        text: the answer string, ``response[start:end]``: the whitespace-stripped content of the last
            ``\\boxed{...}``, the answer a statement gives, or the last number (with the LaTeX
            expression it closes) exactly as written (``"1,000"``, ``"\\frac{1}{4}"``).
        start: character offset of the first character of ``text``.
        end: character offset one past its last character.
        reasoning_end: where the reasoning stops: the index of the backslash of the last ``\\boxed{``
            (kind ``"boxed"``), the first character of the statement's trigger (kind ``"statement"``:
            the ``T`` of "The answer is") or ``start`` (kind ``"last_number"``).
        kind: ``"boxed"``, ``"statement"`` or ``"last_number"``.
    """

    text: str
    start: int
    end: int
    reasoning_end: int
    kind: str


_BOXED_RESPONSE = re.compile(r"\\boxed\s*\{")
# MATH reference solutions occasionally use \fbox for the final answer.
_BOXED_REFERENCE = re.compile(r"\\(?:boxed|fbox)\s*\{")
# MATH writes a one-token answer without braces a few times: "\\boxed 2".
_BARE_BOXED = re.compile(r"\\(?:boxed|fbox)\s+([^\s${}\\]+)")

# A number as a model writes it. The minus sign only counts when it cannot be a binary minus
# ("12-7" ends in 7, "x = -3" ends in -3). Thousands groups must be exactly three digits so that the
# list "1,2,3" ends in 3. A decimal point needs a digit after it, so "is 19." gives "19".
_NUMBER = re.compile(
    r"""
    (?:(?<![\w)\]}])-)?
    (?:
        (?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?
      | \.\d+
    )
    """,
    re.VERBOSE,
)


def _closing_brace(text: str, open_index: int) -> int | None:
    """Index of the ``}`` matching the ``{`` at ``open_index``, or None when it is never closed.

    Escaped braces (``\\{``, ``\\}``) are literal characters in LaTeX and do not nest.
    """
    depth = 0
    i = open_index
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # skip the escaped character, whatever it is
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _last_boxed(text: str, pattern: re.Pattern[str]) -> tuple[int, int, int] | None:
    """(backslash index, content start, content end) of the last top-level boxed group.

    Boxes nested inside an earlier box are part of that box's content. None when there is no box,
    or when the last top-level box is never closed (a truncated response has no final answer).
    """
    last = None
    position = 0
    while (match := pattern.search(text, position)) is not None:
        open_index = match.end() - 1
        close_index = _closing_brace(text, open_index)
        if close_index is None:
            return None  # everything after an unclosed box lies inside it
        last = (match.start(), open_index + 1, close_index)
        position = close_index + 1
    return last


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink [start, end) so that ``text[start:end]`` has no surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


# An explicit answer statement: "The answer is", "the final answer is" (the testbed's and the probes'
# template "Therefore, the final answer is"), "Final answer:", "Answer:". Only the last one counts.
_STATEMENT = re.compile(r"\b(?:the\s+)?(?:final\s+)?answer\s*(?:is\b\s*:?|:)", re.IGNORECASE)
# Math delimiters an answer may sit in after a statement, longest first.
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# A statement's answer ends at a line break, a semicolon or a sentence period (one followed by
# whitespace or the end, so "2.5" and "p.m." are kept whole).
_STATEMENT_END = re.compile(r"\n|;|\.(?=\s|$)")
# "18 dollars", "$18 per hour": a leading number followed by words is that number.
_LEADING_NUMBER = re.compile(r"(?:\\?\$\s*)?(" + _NUMBER.pattern + r")(?=\s+[A-Za-z])", re.VERBOSE)
_PRICE = re.compile(r"\\?\$\s*(" + _NUMBER.pattern + r")", re.VERBOSE)
_WHOLE_NUMBER = re.compile(
    r"(?<![\d,])\d{1,3}(?:(?:,\\!|\{,\}|\\,)\d{3})+(?!\d)"  # 900,\!000,\!000 and 10{,}000
    r"|(?<!\d)\d{1,2}:\d{2}(?:\s*[ap]\.?\s?m\b\.?)?"  # 4:30, 4:30 p.m.
)
_TEXT_OPEN = re.compile(r"\\(?:text|mbox|mathrm)\{")
# LaTeX commands whose arguments are one expression with the numbers inside them.
_EXPRESSION_COMMAND = re.compile(r"\\(?:[dt]?frac|sqrt)(?![A-Za-z])")
# What may follow an expression that ends the text: spaces, closing math delimiters, punctuation.
_TRAILER = re.compile(r"(?:\s|\$|\\\)|\\\]|[.,;:!])*")


def _command_end(text: str, start: int) -> int | None:
    """One past the end of the ``\\frac``/``\\sqrt`` command at ``start`` with its arguments (``\\frac12``
    and ``\\sqrt[3]{x}`` included), or None when its arguments are unclosed or missing."""
    name = _EXPRESSION_COMMAND.match(text, start)
    i = name.end()
    arguments = 1 if name.group().endswith("sqrt") else 2
    if arguments == 1 and text.startswith("[", i):
        close = text.find("]", i)
        if close < 0:
            return None
        i = close + 1
    for _ in range(arguments):
        while i < len(text) and text[i] == " ":
            i += 1
        if i >= len(text):
            return None
        if text[i] == "{":
            close = _closing_brace(text, i)
            if close is None:
                return None
            i = close + 1
        elif text[i].isalnum():
            i += 1  # \frac12: single-character arguments
        else:
            return None
    return i


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) of a number widened to the LaTeX expression it belongs to.

    A number inside the arguments of ``\\frac``, ``\\dfrac``, ``\\tfrac`` or ``\\sqrt`` is part of that
    command (repeatedly, for nested ones), with a coefficient written right before it (``2\\sqrt{3}``)
    and a unary minus. A tuple or interval of plain numbers that ends the text (``(-1, 6)``,
    ``[2, 5)``) is taken whole. So are thousands grouped the LaTeX way (``900,\\!000``, ``10{,}000``),
    a time of day (``4:30 p.m.``), a following ``\\pi`` (``7\\pi``) and a short text wrapper the number
    sits in (``\\text{4:30 p.m.}``).
    """
    # thousands grouped the LaTeX way (900,\!000,\!000; 10{,}000; 3\,250), or a time of day (4:30)
    for whole in _WHOLE_NUMBER.finditer(text, max(0, start - 40), min(len(text), end + 20)):
        if whole.start() <= start and whole.end() >= end:
            start, end = whole.span()
            break
    changed = True
    while changed:
        changed = False
        for command in reversed(list(_EXPRESSION_COMMAND.finditer(text, max(0, start - 400), start + 1))):
            command_end = _command_end(text, command.start())
            if command.start() <= start and command_end is not None and command_end >= end:
                start, end, changed = command.start(), command_end, True
                break
    while start > 0 and text[start - 1].isdigit():
        start -= 1  # the coefficient of 2\sqrt{3}
    if text.startswith("\\pi", end) and not text[end + 3 : end + 4].isalpha():
        end += 3  # 7\pi
    # the text wrapper a number sits in: \text{4:30 p.m.}
    base = max(0, start - 40)
    for wrapper in reversed(list(_TEXT_OPEN.finditer(text, base, start))):
        close = _closing_brace(text, wrapper.end() - 1)
        if close is not None and close >= end and close - wrapper.end() < 20:  # a short answer, not prose
            start, end = wrapper.start(), close + 1
            break
    if start > 0 and text[start - 1] == "-" and (start < 2 or not re.match(r"[\w)\]}]", text[start - 2])):
        start -= 1
    # a tuple or interval that ends the text
    line_start = text.rfind("\n", 0, start) + 1
    opener = max(text.rfind("(", line_start, start), text.rfind("[", line_start, start))
    if opener >= 0:
        closer = re.compile(r"[^()\[\]\n]*?[)\]]").match(text, end)
        if closer is not None:
            inner = text[opener + 1 : closer.end() - 1]
            bare = re.sub(r"\\[A-Za-z]+", "", inner)
            if ("," in inner and not re.search(r"[A-Za-z]", bare) and not re.search(r"[()\[\]]", inner)
                    and _TRAILER.fullmatch(text, closer.end())):
                start, end = opener, closer.end()
    return start, end


def _statement_answer(response: str) -> AnswerSpan | None:
    """The answer the last explicit answer statement gives, or None (no statement, or nothing that
    reads as an answer after it: "the answer is not obvious yet" is no answer)."""
    last = None
    for last in _STATEMENT.finditer(response):
        pass
    if last is None:
        return None
    i = last.end()
    while i < len(response) and response[i] in " \t":
        i += 1
    for left, right in _MATH_DELIMITERS:
        if response.startswith(left, i):
            close = response.find(right, i + len(left))
            if close < 0 or (left == "$" and "\n" in response[i:close]):
                continue  # "$18." is a price, not an unclosed formula
            start, end = _strip_span(response, i + len(left), close)
            break
    else:
        stop = _STATEMENT_END.search(response, i)
        start, end = _strip_span(response, i, len(response) if stop is None else stop.start())
        while end > start and response[end - 1] in ".,:!":
            end -= 1
        if (number := _LEADING_NUMBER.match(response, start, end)) is not None:
            start, end = number.span(1)
        elif (price := _PRICE.fullmatch(response, start, end)) is not None:
            start, end = price.span(1)
    text = response[start:end]
    if re.match(r"\\(?:boxed|fbox)", text) or not re.search(r"[A-Za-z0-9]", text):
        return None  # a box that step 1 did not accept (truncated, "\\boxed{14") is no answer either
    # An answer starts like one ("7", "-3", "\\frac", "(1, 2)", "$5") or is a few words ("Evelyn",
    # "x = 3"); "the answer is not obvious yet, but..." states none.
    if not text or not (re.match(r"[-+(\[{\\$\d.]", text) or len(text.split()) <= 3):
        return None
    return AnswerSpan(text, start, end, reasoning_end=last.start(), kind="statement")


def extract_answer(response: str, fallback_last_number: bool = True, answer_statement: bool = True) -> AnswerSpan | None:
    """The final answer span of a model response, or None when there is none.

    A cascade; the first step that finds an answer gives it:

    1. The last top-level ``\\boxed{...}`` (``\\boxed {`` accepted) with properly nested braces; its
       content, stripped of surrounding whitespace, is the answer. If the last ``\\boxed{`` is never
       closed (truncated generation) or its content is blank, there is no boxed answer. A box nested
       inside another belongs to the outer one; of several boxes the last one is the answer, also
       when a statement after it names another.
    2. When ``answer_statement`` is True, the last explicit statement ("The answer is", "the final
       answer is", "Final answer:", "Answer:", any case): the math it opens (``$...$``, ``\\(...\\)``,
       ``\\[...\\]``), else the rest of its sentence, where a leading number followed by words
       (``18 dollars``) is that number.
    3. When ``fallback_last_number`` is True, the last number in the response: optionally negative,
       with optional thousands separators (``1,000``), decimals (``2.5``) or a simple fraction
       (``3/4``), without a trailing sentence period, widened to the LaTeX expression it closes: the
       ``\\frac``/``\\sqrt`` around it (``\\frac{1}{4}``, not ``4``), a tuple or interval of numbers
       that ends the text (``(-1, 6)``, not ``6``), LaTeX thousands (``3,\\!250``, not ``250``), a time
       of day (``4:30 p.m.``), ``7\\pi`` (not ``7``); see `_widen`.
    4. Otherwise None.
    """
    if not isinstance(response, str):
        raise ValueError(f"response must be a str, got {type(response).__name__}")
    boxed = _last_boxed(response, _BOXED_RESPONSE)
    if boxed is not None:
        backslash, content_start, content_end = boxed
        start, end = _strip_span(response, content_start, content_end)
        if start < end:
            return AnswerSpan(response[start:end], start, end, reasoning_end=backslash, kind="boxed")
    if answer_statement and (stated := _statement_answer(response)) is not None:
        return stated
    if not fallback_last_number:
        return None
    last = None
    for last in _NUMBER.finditer(response):
        pass
    if last is None:
        return None
    start, end = _widen(response, last.start(), last.end())
    return AnswerSpan(response[start:end], start, end, reasoning_end=start, kind="last_number")


# ---------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------

# GSM8K puts "#### answer" on the last line; a "####" elsewhere is a markdown heading (AoPS solutions).
_GSM8K_ANSWER = re.compile(r"####([^\n]*)$")
_THOUSANDS_SEPARATOR = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_INTEGRAL_DECIMAL = re.compile(r"^([+-]?\d+)\.0+$")


def extract_reference(raw) -> str:
    """Normalise a dataset's reference answer to a plain string.

    * int -> ``str(raw)``; float (AMC stores ``27.0``) -> ``"27"`` when integral, else ``repr`` (``"0.5"``).
    * str whose last line starts with ``####`` (GSM8K solution) -> the rest of that line, without
      thousands separators (``"#### 1,000"`` -> ``"1000"``).
    * str containing ``\\boxed{}`` or ``\\fbox{}`` (MATH solution) -> the content of the last one;
      a brace-less ``\\boxed 2`` (a few MATH solutions) -> its single token.
    * any other str -> stripped; an integral decimal such as ``"27.0"`` becomes ``"27"``.

    Raises ValueError for None, bool, non-finite floats, empty answers, an unclosed box, or any
    other type.
    """
    if raw is None:
        raise ValueError("reference answer is None")
    if isinstance(raw, bool):
        raise ValueError(f"reference answer is a bool ({raw}), expected a number or a string")
    if isinstance(raw, numbers.Integral):
        return str(int(raw))
    if isinstance(raw, numbers.Real):
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(f"reference answer is not finite: {value}")
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(raw, str):
        raise ValueError(f"reference answer must be a str or a number, got {type(raw).__name__}")

    text = raw.strip()
    if (gsm8k := _GSM8K_ANSWER.search(text)) is not None:
        text = _THOUSANDS_SEPARATOR.sub("", gsm8k.group(1).strip())
    elif _BOXED_REFERENCE.search(text):
        boxed = _last_boxed(text, _BOXED_REFERENCE)
        if boxed is None:
            raise ValueError(f"reference solution has an unclosed \\boxed{{: {raw[-80:]!r}")
        text = text[boxed[1] : boxed[2]].strip()
    elif bare := _BARE_BOXED.findall(text):
        text = bare[-1].rstrip(".")
    text = _INTEGRAL_DECIMAL.sub(r"\1", text)
    if not text:
        raise ValueError(f"reference answer is empty: {raw!r}")
    return text


# ---------------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------------

_TEXT_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}$")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)?(?:\.\d+)?$")
_PLAIN_FRACTION = re.compile(r"^[+-]?\d+/\d+$")


def _clean(answer: str) -> str:
    """Drop what never carries meaning: surrounding whitespace, ``$`` (math delimiters and escaped
    dollar signs ``\\$``), trailing punctuation (``.``, ``,``, ``;``, ``:``, ``!``)."""
    text = answer.replace("\\$", "").replace("$", "").strip()
    while text and text[-1] in ".,;:!" and not text.endswith("\\!"):
        text = text[:-1].rstrip()
    return text


# \left( and \right) only size their delimiter; \; and \: are spaces like \, and \!
_SIZED_DELIMITER = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr)\s*(?=[()\[\]|.]|\\[{}])")
_MATH_SPACE = re.compile(r"\\[;:]|~")
# whitespace that separates no two letters or digits: math mode ignores it (12 \frac{3}{5}, (3, \pi));
# between two alphanumerics it may carry meaning (\csc x, a mixed number 2 1/2, New York) and is kept
_LOOSE_SPACE = re.compile(r"(?<![A-Za-z0-9])\s+|\s+(?![A-Za-z0-9])")


def _spacing_free(text: str) -> str:
    """A `_normalise`d answer without the spacing math mode ignores: the exact-string shortcut's key,
    so that ``12 \\frac{3}{5}`` equals ``12\\frac{3}{5}`` and ``\\left( 3, \\frac{\\pi}{2} \\right)``
    equals ``(3,\\frac{\\pi}{2})`` without a symbolic check."""
    text = _MATH_SPACE.sub(" ", _SIZED_DELIMITER.sub("", text))
    return _LOOSE_SPACE.sub("", text)


def _normalise(answer: str) -> str:
    """`_clean` plus LaTeX spacing and a whole-answer ``\\text{...}`` wrapper removed.

    Only used for the exact-string shortcut: math-verify gets the `_clean` form, because unwrapping
    ``\\text{Evelyn}`` would make it parse as the commutative product E*v*e*l*y*n.
    """
    text = _clean(answer).replace("{,}", ",").replace("\\!", "").replace("\\,", "")
    if (wrapped := _TEXT_WRAPPER.match(text)) is not None:
        text = wrapped.group(1).strip()
    return " ".join(text.split())


def _as_number(text: str) -> Fraction | None:
    """The exact value of a plain number (``-3``, ``1,000``, ``0.50``, ``3/4``), else None."""
    if _PLAIN_FRACTION.match(text):
        numerator, denominator = text.split("/")
        return Fraction(int(numerator), int(denominator)) if int(denominator) != 0 else None
    if any(c.isdigit() for c in text) and _PLAIN_NUMBER.match(text):
        return Fraction(text.replace(",", ""))
    return None


# Decorations a number may carry that do not change it: a percent sign (``35.0\%``, ``12.5 percent``),
# a degree sign, a unit in words or in a text wrapper (``12\text{ cm}``, ``18 dollars``).
_PERCENT = re.compile(r"\s*(?:\\?%|\\text\{\s*percent\s*\}|percent)$")
_DEGREES = re.compile(r"\s*(?:\^\s*\{?\\circ\}?|°)$")
_UNIT = re.compile(r"\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z .]*\}$|\s+[A-Za-z][A-Za-z.]+(?:\s+[A-Za-z.]+)*$")
# A repeating decimal: 0.\overline{3}, 1.2\overline{45}.
_LATEX_FRACTION = re.compile(r"^([+-]?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_REPEATING = re.compile(r"^([+-]?)(\d*)\.(\d*)\\overline\{(\d+)\}$")


@dataclass(frozen=True)
class _Value:
    value: Fraction
    percent: bool  # a percent sign was dropped: 35\% is compared as 35


def _number_value(text: str) -> _Value | None:
    """The value of a number with the decorations above removed, or of a repeating decimal; None for
    anything else. A unit is only dropped from a number (``5 x`` stays, ``5 \\text{ cm}`` is 5)."""
    percent = False
    for _ in range(3):  # "35 \text{ percent}", "90^\circ", "12 \text{cm}" in any combination
        if (match := _PERCENT.search(text)) is not None and match.start() > 0:
            text, percent = text[: match.start()], True
        elif (match := _DEGREES.search(text)) is not None and match.start() > 0:
            text = text[: match.start()]
        elif (match := _UNIT.search(text)) is not None and match.start() > 0:
            text = text[: match.start()]
        else:
            break
    text = text.strip()
    if (repeating := _REPEATING.match(text)) is not None:
        sign, whole, fixed, period = repeating.groups()
        value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed)) + Fraction(
            int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
        return _Value(-value if sign == "-" else value, percent)
    if (fraction := _LATEX_FRACTION.match(text)) is not None and int(fraction.group(3)) != 0:
        value = Fraction(int(fraction.group(2)), int(fraction.group(3)))
        return _Value(-value if fraction.group(1) == "-" else value, percent)
    value = _as_number(text)
    return None if value is None else _Value(value, percent)


# A number times one variable, written together: 4t, -2.5x (a unit needs a space or a text wrapper).
_MONOMIAL = re.compile(r"^[+-]?(?:\d+(?:\.\d+)?|\.\d+)[A-Za-z]$")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?:([ap])\.?m\.?)?$")


def _time_of_day(text: str) -> tuple[int, int, str] | None:
    """``4:30 p.m.``, ``\\text{4:30 p.m.}``, ``4:30 \\text{ pm}`` -> (4, 30, "p"); None if not a time."""
    unwrapped = re.sub(r"\\(?:text|mbox|mathrm)\{([^{}]*)\}", r"\1", text)
    match = _TIME.match(re.sub(r"[\s~]|\\[ ,;]", "", unwrapped).lower())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3) or ""


def _braces_balanced(text: str) -> bool:
    """Whether unescaped braces pair up; an answer that closes early would escape its ``\\boxed{}``."""
    depth = 0
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth < 0:
            return False
        i += 1
    return depth == 0


def answers_match(predicted: str, reference: str, timeout_s: float = 5.0) -> bool:
    """Whether a predicted answer is equivalent to the reference answer: `match_answers` with an
    undecided verdict (the symbolic check timed out twice) counted as no match."""
    return match_answers(predicted, reference, timeout_s) is True


def match_answers(predicted: str, reference: str, timeout_s: float = 5.0) -> bool | None:
    """Whether a predicted answer is equivalent to the reference answer; None when undecided.

    1. Exact match after `_normalise` (``$``, trailing punctuation, LaTeX spacing, a whole-answer
       ``\\text{}``) and `_spacing_free` (whitespace that separates no two letters or digits,
       ``\\left``/``\\right``) -> True.
    2. Both numbers (integers, decimals, thousands separators, ``a/b``, repeating decimals such as
       ``0.\\overline{3}``), each after dropping a percent sign, a degree sign or a unit (``12\\text{ cm}``,
       ``18 dollars``): exact value equality, so ``"27.0" == "27"``, ``"35.0\\%" == "35"``,
       ``"0.\\overline{3}" == "1/3"``, and ``"28" != "27"``, ``"0.333" != "1/3"``. When the values differ
       and a percent sign was dropped (``35\\%`` against ``0.35``), math-verify decides (step 4).
    A plain number never matches a number times a variable (``4`` against ``4t``).
    3. Both times of day (``4:30 p.m.``, ``\\text{4:30 p.m.}``, ``4:30 \\text{ pm}``): equal hour, minute
       and a.m./p.m.
    4. Otherwise ``math_verify.verify(parse(\\boxed{reference}), parse(\\boxed{predicted}))`` (the
       reference is math-verify's "gold" argument, which matters for ``x = 3`` style answers). This
       runs in a helper process; if it takes more than ``timeout_s`` CPU seconds (the helper's start-up
       not counted) the helper is killed and the check retried once on a fresh helper; a second
       time-out returns None (undecided). An error math-verify raises counts as wrong; a helper that
       dies (killed from outside, a crash in native code) is treated like a time-out.

    An empty prediction, or one whose braces do not pair up, never matches. Raises ValueError for non-str inputs, an empty reference, or a
    non-positive ``timeout_s``.
    """
    if not isinstance(predicted, str) or not isinstance(reference, str):
        raise ValueError(
            f"predicted and reference must be str, got {type(predicted).__name__} and {type(reference).__name__}"
        )
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if not _clean(reference):
        raise ValueError(f"reference answer is empty: {reference!r}")
    if not _clean(predicted):
        return False

    norm_predicted, norm_reference = _normalise(predicted), _normalise(reference)
    if norm_predicted == norm_reference or _spacing_free(norm_predicted) == _spacing_free(norm_reference):
        return True
    value_predicted, value_reference = _number_value(norm_predicted), _number_value(norm_reference)
    if value_predicted is not None and value_reference is not None:
        if value_predicted.value == value_reference.value:
            return True
        if not (value_predicted.percent or value_reference.percent):
            return False
        # 35\% against 0.35 is for math-verify to decide, as it was before percent signs were dropped
    if (value_predicted is None) != (value_reference is None):
        other = norm_predicted if value_predicted is None else norm_reference
        if _MONOMIAL.match(other):
            return False  # math-verify reads the t of "4t" as a unit (tonnes) and calls it 4
    time_predicted, time_reference = _time_of_day(norm_predicted), _time_of_day(norm_reference)
    if time_predicted is not None and time_reference is not None:
        return time_predicted == time_reference
    if not _braces_balanced(predicted) or not _braces_balanced(reference):
        return False  # "3}+{1" would be read as \boxed{3} followed by junk, i.e. as "3"
    return _POOL.verify(_clean(predicted), _clean(reference), timeout_s)


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


# ---------------------------------------------------------------------------------------------------
# math-verify helper processes
# ---------------------------------------------------------------------------------------------------

_STARTUP_TIMEOUT_S = 120.0  # importing sympy on a cold disk can take a while; never counted as a check
_HELPER_MEMORY_LIMIT = 4 * 2**30  # bytes of address space; huge integer powers die with MemoryError
# A check whose CPU time cannot be read (a helper stuck off the CPU) is given up after this many times
# its limit in wall-clock seconds, and never before _WALL_BACKSTOP_MIN_S: on a machine loaded 20-fold a
# check still gets its CPU seconds.
_WALL_BACKSTOP_FACTOR = 20.0
_WALL_BACKSTOP_MIN_S = 60.0
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Checks the helper runs before it reports ready: math-verify compiles its parsers and sympy imports
# parts of itself on first use (0.1-0.2 s), which must not count against the first real check.
_WARM_UP = ((r"\frac{1}{2}", "0.5"), (r"12 \frac{3}{5}", r"\left(3, \frac{\pi}{2}\right)"), (r"\csc x", "x = 3"),
            (r"\{1, 2\}", r"[0, \infty)"), (r"2\sqrt{3}", r"10\%"))


class _Helper:
    """One math-verify helper process, speaking one JSON line in, one line ("1" or "0") out."""

    def __init__(self) -> None:
        # Run this file as a script rather than `-m oar.grading`, so the helper does not import the
        # `oar` package and whatever it pulls in (torch); -P keeps oar/ itself off sys.path.
        self._process = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        if self._read_line(_STARTUP_TIMEOUT_S) != b"ready":
            self.close()
            raise RuntimeError("the math-verify helper process failed to start (see its stderr above)")

    def _read_line(self, timeout_s: float) -> bytes | None:
        """The next line from the helper without its newline, or None on timeout or exit."""
        ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        if not ready:
            return None
        line = self._process.stdout.readline()
        return line.rstrip(b"\n") if line else None

    def cpu_s(self) -> float | None:
        """CPU seconds (user and system) the helper has used so far; None where ``/proc`` cannot tell."""
        try:
            with open(f"/proc/{self._process.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime: fields 14 and 15

    def _read_reply(self, timeout_s: float) -> bytes | None:
        """The helper's reply within ``timeout_s`` of its CPU time (wall-clock time without ``/proc``),
        or None on a time-out or its exit."""
        started_cpu, started = self.cpu_s(), time.monotonic()
        backstop = started + max(_WALL_BACKSTOP_MIN_S, _WALL_BACKSTOP_FACTOR * timeout_s)
        tick = min(0.1, timeout_s / 4)
        while True:
            ready, _, _ = select.select([self._process.stdout], [], [], tick)
            if ready:
                line = self._process.stdout.readline()
                return line.rstrip(b"\n") if line else None
            now, cpu = time.monotonic(), self.cpu_s()
            if started_cpu is None or cpu is None:
                if now - started > timeout_s:
                    return None
            elif cpu - started_cpu > timeout_s or now > backstop:
                return None

    def verify(self, predicted: str, reference: str, timeout_s: float) -> bool | None:
        """True/False from math-verify, or None when the helper timed out or died (it is then closed)."""
        try:
            self._process.stdin.write(json.dumps([predicted, reference]).encode() + b"\n")
            self._process.stdin.flush()
        except OSError:
            self.close()
            return None
        reply = self._read_reply(timeout_s)
        if reply not in (b"0", b"1"):
            self.close()
            return None
        return reply == b"1"

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        if self.alive:
            self._process.kill()
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _HelperPool:
    """Idle helpers of this process; a thread takes one (starting it if none is idle) per check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Helper] = []

    def verify(self, predicted: str, reference: str, timeout_s: float, tries: int = 2) -> bool | None:
        """math-verify's verdict; None (undecided) when ``tries`` checks in a row timed out."""
        for attempt in range(1, tries + 1):
            with self._lock:
                helper = self._idle.pop() if self._idle else None
            if helper is None:
                helper = _Helper()
            try:
                result = helper.verify(predicted, reference, timeout_s)
            except BaseException:  # e.g. KeyboardInterrupt mid-check: do not leave a busy helper running
                helper.close()
                raise
            if result is not None:
                with self._lock:
                    self._idle.append(helper)
                return result
            logger.warning(
                "math-verify gave no answer within %.1f CPU s or its helper died (try %d of %d) for predicted=%.80r "
                "reference=%.80r%s",
                timeout_s, attempt, tries, predicted, reference,
                "; undecided" if attempt == tries else "; retrying on a fresh helper",
            )
        return None

    def close(self) -> None:
        with self._lock:
            helpers, self._idle = self._idle, []
        for helper in helpers:
            helper.close()

    def forget(self) -> None:
        """In a forked child: the inherited helpers belong to the parent, so drop them untouched."""
        self._lock = threading.Lock()
        self._idle = []


_POOL = _HelperPool()
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=_POOL.forget)


def _serve() -> None:
    """Helper-process main loop: read ``[predicted, reference]`` JSON lines, answer "1" or "0".

    math-verify's signal-based timeouts are disabled (None): the parent enforces the time limit by
    killing this process. stdout carries only the protocol; anything else printed goes to stderr.
    """
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_HELPER_MEMORY_LIMIT, _HELPER_MEMORY_LIMIT))
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # silences "Timeout is disabled" notices

    from math_verify import parse, verify

    def check(predicted: str, reference: str) -> bool:
        try:
            gold = parse(f"\\boxed{{{reference}}}", parsing_timeout=None)
            target = parse(f"\\boxed{{{predicted}}}", parsing_timeout=None)
            return bool(verify(gold, target, timeout_seconds=None))
        except BaseException:  # noqa: BLE001 - MemoryError, RecursionError, sympy internals: all "no match"
            return False

    for predicted, reference in _WARM_UP:  # start-up work math-verify does lazily, before the clock runs
        check(predicted, reference)
    protocol.write(b"ready\n")
    for line in sys.stdin.buffer:
        try:
            predicted, reference = json.loads(line)
        except ValueError:
            matched = False
        else:
            matched = check(predicted, reference)
        protocol.write(b"1\n" if matched else b"0\n")


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
