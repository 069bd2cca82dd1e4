r"""The credit-assignment testbed's task: chains of k arithmetic steps with a known set of decisive tokens.

A problem names a start value and k operations; its solution writes one equation per step, each
starting from the previous result, and ends in the outcome probe's own template::

    Start with 7. Add 5, then multiply by 2, then subtract 3. What is the result?

    7 + 5 = 12. 12 * 2 = 24. 24 - 3 = 21. Therefore, the final answer is \boxed{21}.

Three knobs shape the solutions a model is pretrained on (:func:`solution`):

- ``filler``: after every step, ``filler`` remarks drawn from :data:`REMARKS` (no digits, no effect on the
  answer), so the response grows while the number of decisive tokens stays the same. A remark is one
  choice among eight; its later words are forced by its first;
- ``distractors``: after every step, a note of ``distractors`` words each drawn uniformly from
  :data:`DISTRACTOR_WORDS` (``Note: owl teal cat.``). Every word is a fresh choice the policy must make
  token by token, at an entropy of log 16, and none can change the answer: reward-irrelevant tokens
  that carry real gradient, the paper's premise about long reasoning;
- ``error_rate``: each step is, with this probability, a sloppy estimate written with ``~`` instead of
  ``=`` and a result off by 1-3 (``12 * 2 ~ 25.``); the chain goes on from the written value. A model
  pretrained on such solutions learns exact arithmetic after ``=`` and errs by choosing ``~``: a choice
  at one token per step that decides the answer, and that RL can learn to avoid.

Because the grammar is fixed, the decisive tokens of any response can be found by parsing it
(:func:`decisive_spans`): each step's relation (``=`` or ``~``) and the digits of its result, the only
places where a sampled token decides the answer. Copies of a result into the next equation and the
operands copied from the problem are forced by the text before them, and the remarks cannot change the
answer.

Generation is deterministic: problem ``i`` of a split depends only on ``(split, i)``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

MAX_VALUE = 20  # every correct intermediate result stays in 0..20: facts a small model learns in minutes
MAX_FILLER = 3
MAX_DISTRACTORS = 32
MAX_STEPS = 6

REMARKS = (
    "Let me check that.",
    "That looks right.",
    "Now the next operation.",
    "Keep going.",
    "So far so good.",
    "Careful here.",
    "This step is done.",
    "Moving on.",
)
# Sixteen words without digits, relations or operation names; each is one token of the testbed's vocabulary.
DISTRACTOR_WORDS = ("red", "blue", "green", "gold", "gray", "pink", "teal", "navy",
                    "cat", "dog", "owl", "fox", "bee", "elk", "ant", "yak")
DISTRACTOR_NOTE = "Note:"
FINAL = "Therefore, the final answer is \\boxed{{{answer}}}."

_WORDS = {"+": "add", "-": "subtract", "*": "multiply by"}


@dataclass(frozen=True)
class ChainProblem:
    start: int
    ops: tuple[tuple[str, int], ...]  # (operator, operand) per step

    @property
    def values(self) -> list[int]:
        """The correct result of every step."""
        out, value = [], self.start
        for op, operand in self.ops:
            value = apply(value, op, operand)
            out.append(value)
        return out

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def text(self) -> str:
        steps = [f"{_WORDS[op]} {operand}" for op, operand in self.ops]
        said = ", then ".join(steps)
        return f"Start with {self.start}. {said[0].upper()}{said[1:]}. What is the result?"


def apply(value: int, op: str, operand: int) -> int:
    return value + operand if op == "+" else value - operand if op == "-" else value * operand


def _check(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in {low}..{high}, got {value!r}")


def problem(split: str, index: int, steps: int = 3) -> ChainProblem:
    """Problem ``index`` of ``split``: a start of 2-9 and ``steps`` operations that keep every result in
    0..:data:`MAX_VALUE` (add/subtract 1-9, multiply by 2 or 3)."""
    _check("steps", steps, 1, MAX_STEPS)
    rng = random.Random(f"oar-chains/{split}/{steps}/{index}")
    value = rng.randint(2, 9)
    start, ops = value, []
    for _ in range(steps):
        choices = [("+", rng.randint(1, 9)), ("-", rng.randint(1, 9)), ("*", rng.choice((2, 3)))]
        legal = [(op, x) for op, x in choices if 0 <= apply(value, op, x) <= MAX_VALUE]
        op, operand = rng.choice(legal)
        value = apply(value, op, operand)
        ops.append((op, operand))
    return ChainProblem(start, tuple(ops))


def split(name: str, count: int, steps: int = 3, exclude: frozenset[str] = frozenset()) -> list[ChainProblem]:
    """``count`` distinct problems of split ``name`` whose text is not in ``exclude`` (e.g. the test split
    when drawing pretraining or RL problems)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    out: list[ChainProblem] = []
    seen = set(exclude)
    index = 0
    while len(out) < count:
        p = problem(name, index, steps)
        index += 1
        if p.text not in seen:
            seen.add(p.text)
            out.append(p)
        if index > 50 * count + 1000:
            raise ValueError(f"split {name!r}: only {len(out)} distinct problems of {steps} steps, {count} asked")
    return out


def solution(p: ChainProblem, rng: random.Random, filler: int = 0, error_rate: float = 0.0,
             distractors: int = 0) -> tuple[str, bool]:
    """A solution of ``p`` in the task's grammar, and whether its answer is correct.

    With probability ``error_rate`` a step is a sloppy estimate: ``~`` and a result off by 1-3 (kept >= 0);
    later steps start from the written value, so one estimate makes a consistent chain to a wrong answer
    (its later results may leave 0..MAX_VALUE or go below 0). Without distractors the random draws are
    those of a solution without the knob, so existing policies are unchanged by it."""
    _check("filler", filler, 0, MAX_FILLER)
    _check("distractors", distractors, 0, MAX_DISTRACTORS)
    if not 0.0 <= error_rate < 1.0:
        raise ValueError(f"error_rate must be in [0, 1), got {error_rate!r}")
    parts, value = [], p.start
    for op, operand in p.ops:
        result, relation = apply(value, op, operand), "="
        if rng.random() < error_rate:
            wrong = [result + d for d in (1, 2, 3)] + [result - d for d in (1, 2, 3) if result - d >= 0]
            result, relation = rng.choice(wrong), "~"
        parts.append(f"{value} {op} {operand} {relation} {result}.")
        if distractors:
            parts.append(distractor_note(rng, distractors))
        parts.extend(rng.choice(REMARKS) for _ in range(filler))
        value = result
    parts.append(FINAL.format(answer=value))
    return " ".join(parts), value == p.answer


def distractor_note(rng: random.Random, words: int) -> str:
    """A note of ``words`` words drawn uniformly (with replacement) from :data:`DISTRACTOR_WORDS`."""
    return f"{DISTRACTOR_NOTE} {' '.join(rng.choice(DISTRACTOR_WORDS) for _ in range(words))}."


_EQUATION = re.compile(r"(-?\d+) ([-+*]) (\d+) ([=~]) (-?\d+)\.")


def decisive_spans(reasoning: str) -> list[tuple[int, int]]:
    """Character spans of the relation (``=`` or ``~``) and of the result of every equation in
    ``reasoning`` (the text before the answer template), in order: the decisive tokens of a response are
    the tokens overlapping these spans."""
    return [span for m in _EQUATION.finditer(reasoning) for span in (m.span(4), m.span(5))]


TOKEN_CLASSES = ("forced", "remark", "distractor", "relation", "result", "template")
_NOTE = re.compile(re.escape(DISTRACTOR_NOTE) + r"((?: [a-z]+)+)\.")
_REMARK = re.compile("|".join(re.escape(r) for r in REMARKS))


def character_classes(text: str) -> list[str]:
    """The class of every character of a response in the task's grammar (:data:`TOKEN_CLASSES`):
    ``relation`` and ``result`` (the decisive spans), ``distractor`` (a note's words), ``remark`` (a
    remark's first word, the one choice a remark makes; its other words are forced by it), ``template``
    (from the concluding sentence on) and ``forced`` (everything the text before determines: operands and
    operators copied from the problem, a result copied into the next equation, punctuation, the note's
    marker). Text outside the grammar counts as forced."""
    classes = ["forced"] * len(text)

    def mark(start: int, end: int, name: str) -> None:
        classes[start:end] = [name] * (end - start)

    conclusion = text.find(FINAL.split("\\")[0].rstrip())
    if conclusion >= 0:
        mark(conclusion, len(text), "template")
    for m in _REMARK.finditer(text):
        first = m.group(0).split(" ")[0]
        mark(m.start(), m.start() + len(first), "remark")
    for m in _NOTE.finditer(text):
        for w in re.finditer(r"[a-z]+", m.group(1)):
            mark(m.start(1) + w.start(), m.start(1) + w.end(), "distractor")
    for start, end in decisive_spans(text):
        mark(start, end, "relation" if text[start:end] in "=~" else "result")
    return classes


def token_classes(text: str, starts: list[int], ends: list[int]) -> list[str]:
    """The class of each token [start, end) of ``text``: the most specific class (latest in
    :data:`TOKEN_CLASSES`) among its non-space characters; a token of spaces alone is forced."""
    chars = character_classes(text)
    rank = {name: i for i, name in enumerate(TOKEN_CLASSES)}
    out = []
    for start, end in zip(starts, ends):
        names = [chars[i] for i in range(start, end) if not text[i].isspace()]
        out.append(max(names, key=rank.__getitem__) if names else "forced")
    return out


def decisive_tokens(text: str, starts: list[int], ends: list[int]) -> list[int]:
    """Indices of the tokens [start, end) of ``text`` that overlap a decisive span."""
    spans = decisive_spans(text)
    return [j for j, (a, b) in enumerate(zip(starts, ends)) if any(a < e and s < b for s, e in spans)]


def final_step_tokens(text: str, starts: list[int], ends: list[int]) -> list[int]:
    """Indices of the tokens [start, end) of ``text`` that overlap the decisive spans (relation and result)
    of its last equation: the restatement the answer is copied from."""
    spans = decisive_spans(text)[-2:]
    return [j for j, (a, b) in enumerate(zip(starts, ends)) if any(a < e and s < b for s, e in spans)]


IRRELEVANT_CLASSES = ("remark", "distractor")  # choices that cannot change the answer


def irrelevant_tokens(text: str, starts: list[int], ends: list[int]) -> list[int]:
    """Indices of the tokens [start, end) of ``text`` whose class is a choice that cannot change the answer
    (a remark's first word, a distractor note's words: :data:`IRRELEVANT_CLASSES`)."""
    return [j for j, name in enumerate(token_classes(text, starts, ends)) if name in IRRELEVANT_CLASSES]


def step_errors(reasoning: str) -> list[str | None]:
    """Per equation of ``reasoning``, in order: ``"sloppy"`` (the relation is ``~``), ``"wrong"`` (an
    exact-looking ``=`` whose result is not its operands' value) or None (right). Each step is judged
    against its own written operands, so an error is counted where it is made, not where it propagates."""
    out = []
    for m in _EQUATION.finditer(reasoning):
        if m.group(4) == "~":
            out.append("sloppy")
        else:
            out.append(None if apply(int(m.group(1)), m.group(2), int(m.group(3))) == int(m.group(5)) else "wrong")
    return out


def results(reasoning: str) -> list[int]:
    """The written result of every equation, in order."""
    return [int(m.group(5)) for m in _EQUATION.finditer(reasoning)]


def corpus_for_tokenizer(distractors: bool = False) -> list[str]:
    """Texts the testbed's BPE vocabulary is trained on: every word of the grammar, remarks and problem
    statements (numbers are single digits under the pre-tokenizer, so a few problems cover them), and
    with ``distractors`` the notes' words (only then, so policies without notes keep their vocabulary)."""
    rng = random.Random("oar-chains/tokenizer")
    texts = [problem("tokenizer", i, s).text for s in (1, 3, 6) for i in range(30)]
    texts += [solution(problem("tokenizer", i, 3), rng, filler=2, error_rate=0.5)[0] for i in range(30)]
    if distractors:
        note_rng = random.Random("oar-chains/tokenizer-notes")
        texts += [distractor_note(note_rng, 24) for _ in range(60)]
    return texts + ["user", "assistant"]
