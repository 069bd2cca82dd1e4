"""An EGCA-style first-divergence oracle (Execution-Grounded Credit Assignment, arXiv 2603.16158) for the
chain testbed: the credit goes to the token where a wrong response first departs from the reference
solution, and nowhere else. A ground-truth entry: it reads the answer key (need ``reference_solution``).

EGCA runs a failing program and a reference solution under the same instrumentation, finds the earliest
point where their execution traces differ, and gives the advantage only to the tokens of that point,
masking the tokens downstream; a passing program keeps GRPO's uniform advantage. On the chains the trace
is the chain of step results, and the reference is computable from the problem: the correct result of
every step, solved from the problem statement in the prompt
("Start with 7. Add 5, then multiply by 2, ..."). Choices taken where the paper's definition is for code:

- **The divergence** is semantic, as EGCA's: the first equation of the reasoning whose written result is
  not the reference chain's value at that step (a ``~`` that happens to give the right value is no
  divergence; after the first divergence nothing is compared, as EGCA masks it).
- **Its token** is the first token where that equation's text departs from the reference equation's
  (``a op b = r.``): the ``~`` of a sloppy step, the first wrong digit of an exact-looking one, or an
  operand or operator copied wrong.
- **Scores**: 1 on that token, 0 on every other reasoning token (before and after it: EGCA credits only
  the divergence's span; no decay downstream). A response with no divergence (every written result the
  reference's: a right response, or a wrong one that miscopied its box or stopped early) scores 1 on
  every token: GRPO's uniform credit, which a ranking reads as all ties.

The prompt's statement must be a chain problem: a row whose prompt holds none stops, naming the scorer
and the row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

SCORER = "first_divergence"
_STATEMENT = re.compile(r"Start with (\d+)\. (.+?)\. What is the result\?")
_OPERATION = re.compile(r"(add|subtract|multiply by) (\d+)")
_OPERATORS = {"add": "+", "subtract": "-", "multiply by": "*"}
_EQUATION = re.compile(r"(-?\d+) ([-+*]) (\d+) ([=~]) (-?\d+)\.")


@dataclass(frozen=True)
class ReferenceChain:
    """A chain problem as its statement gives it: the start and each step's (operator, operand). The same
    fields as :class:`oar.data.chains.ChainProblem`, kept here because the data layer sits above the method
    layer (a scorer reads only what its batch carries)."""

    start: int
    ops: tuple[tuple[str, int], ...]

    @property
    def values(self) -> list[int]:
        """The correct result of every step."""
        out, value = [], self.start
        for op, operand in self.ops:
            value = value + operand if op == "+" else value - operand if op == "-" else value * operand
            out.append(value)
        return out


def problem_from_statement(text: str) -> ReferenceChain | None:
    """The chain problem stated in ``text`` (the inverse of ``oar.data.chains.ChainProblem.text``), or None
    where ``text`` states none."""
    m = _STATEMENT.search(text)
    if m is None:
        return None
    ops = []
    for part in m.group(2).split(", then "):
        op = _OPERATION.fullmatch(part.strip().lower())
        if op is None:
            return None
        ops.append((_OPERATORS[op.group(1)], int(op.group(2))))
    return ReferenceChain(int(m.group(1)), tuple(ops))


def divergence_char(reasoning: str, problem: ReferenceChain) -> int | None:
    """The character of ``reasoning`` where it first departs from ``problem``'s reference chain (module
    docstring), or None where every written result is the reference's."""
    values = problem.values
    previous = problem.start
    for step, m in enumerate(_EQUATION.finditer(reasoning)):
        if step >= len(values):
            return None
        if int(m.group(5)) != values[step]:
            op, operand = problem.ops[step]
            reference = f"{previous} {op} {operand} = {values[step]}."
            written = m.group(0)
            at = next((i for i, (a, b) in enumerate(zip(written, reference)) if a != b), min(len(written),
                                                                                            len(reference)))
            return m.start() + at
        previous = values[step]
    return None


def first_divergence_scores(probes: Sequence, tokenizer) -> list[Tensor]:
    """Per probe, 1 on the reasoning token holding its first divergence from the reference chain and 0
    elsewhere, or 1 everywhere where it has none (module docstring)."""
    from oar.method.probes import token_char_spans

    if tokenizer is None:
        raise ValueError(f"scorer {SCORER!r} reads the prompt's problem and the reasoning's text: the call has no "
                         "tokenizer (ScoringBatch.tokenizer)")
    rows = []
    for i, p in enumerate(probes):
        problem = problem_from_statement(tokenizer.decode(list(p.prompt_ids), skip_special_tokens=True))
        if problem is None:
            raise ValueError(f"scorer {SCORER!r}, row {i}: the prompt states no chain problem ('Start with N. ... "
                             "What is the result?'), so there is no reference chain to diverge from")
        text, starts, ends = token_char_spans(tokenizer, p.response_ids[: p.reasoning_len])
        at = divergence_char(text, problem)
        if at is None:
            rows.append(torch.ones(p.reasoning_len, dtype=torch.float32))
            continue
        row = torch.zeros(p.reasoning_len, dtype=torch.float32)
        # the token holding that character (the last one starting at or before it, should spans leave a gap)
        row[max(j for j, s in enumerate(starts) if s <= at)] = 1.0
        rows.append(row)
    return rows
