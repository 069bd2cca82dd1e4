"""Final-answer extraction: a response's answer span (``extract_answer``) and a dataset's reference
answer as a plain string (``extract_reference``)."""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

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


def extract_answer(response: str, fallback_last_number: bool = True,
                   answer_statement: bool = True) -> AnswerSpan | None:
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
