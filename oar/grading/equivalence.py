"""Answer equivalence: whether a predicted answer equals the reference (``match_answers``,
``answers_match``), by a normalised and numeric comparison first, then math-verify's symbolic check in a
time-limited helper process (``oar.grading.symbolic_helper``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from oar.grading.symbolic_helper import symbolic_match

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

    An empty prediction, or one whose braces do not pair up, never matches. Raises ValueError for non-str inputs,
    an empty reference, or a non-positive ``timeout_s``.
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
    return symbolic_match(_clean(predicted), _clean(reference), timeout_s)
