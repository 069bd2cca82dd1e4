"""Procedurally generated arithmetic word problems: a training task a 135M model can learn on a CPU.

The packaged SmolLM2-135M almost never solves a GSM8K problem, so GRPO groups on GSM8K are all-wrong and
carry no advantage. These problems are GSM8K-shaped (a short story, one integer answer) but take one or
two operations on small numbers, so the base model's sampled pass rate sits between 0 and 1 and most
groups of G samples are mixed: exactly the groups that carry a non-zero GRPO advantage.

Generation is deterministic: problem ``i`` of a split depends only on ``(split seed, i)``, so a split
can be regenerated anywhere, and the train and test splits use different seeds (and are checked for
overlap by the data preparation like any other pair of sets).

``level`` is the number of operations of a word problem (1 or 2); level 0 is a bare single-digit fact with
no story ("What is 7 + 5?"), the easiest rung. The facts are a finite space (226 problems), so their train
and test splits (:func:`fact_split`) are one fixed partition of it rather than seeded draws.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

NAMES = ("Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Lena", "Max",
         "Nora", "Omar", "Pia", "Sam", "Tara", "Umar", "Vera", "Zoe")
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "books", "coins", "shells", "cards", "flowers")


@dataclass(frozen=True)
class Problem:
    problem: str
    answer: int
    level: int
    template: str


def facts() -> list[Problem]:
    """Every single-digit fact, in a fixed order: a + b and (a + b) - b for a, b in 1..9, a * b for a, b in
    2..9 (226 problems). The 135M model's sampled pass rate on these is 0.2-0.3 (two-digit operands: 0.05)."""
    out = [Problem(f"What is {a} + {b}?", a + b, 0, "bare_add") for a in range(1, 10) for b in range(1, 10)]
    out += [Problem(f"What is {a + b} - {b}?", a, 0, "bare_sub") for a in range(1, 10) for b in range(1, 10)]
    out += [Problem(f"What is {a} * {b}?", a * b, 0, "bare_mul") for a in range(2, 10) for b in range(2, 10)]
    return out


TEST_FACTS = 100  # held-out facts; the other 126 are the training split


def fact_split(part: str) -> list[Problem]:
    """The ``train`` or ``test`` part of :func:`facts`: one fixed shuffle, the first ``TEST_FACTS`` are test.
    Disjoint by construction, and each problem appears once (a finite space: drawing would repeat)."""
    if part not in ("train", "test"):
        raise ValueError(f"part must be 'train' or 'test', got {part!r}")
    order = facts()
    random.Random("oar-facts").shuffle(order)
    return order[:TEST_FACTS] if part == "test" else order[TEST_FACTS:]


_FACTS = tuple(facts())  # built once: _bare draws from it per problem


def _bare(rng: random.Random, name: str, item: str) -> Problem:
    return rng.choice(_FACTS)


def _one_step(rng: random.Random, name: str, item: str) -> Problem:
    kind = rng.choice(("add", "sub", "mul", "div"))
    if kind == "add":
        a, b = rng.randint(5, 60), rng.randint(5, 40)
        text = f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?"
        return Problem(text, a + b, 1, "add")
    if kind == "sub":
        a = rng.randint(20, 90)
        b = rng.randint(3, a - 5)
        text = f"{name} has {a} {item} and gives {b} of them away. How many {item} does {name} have left?"
        return Problem(text, a - b, 1, "sub")
    if kind == "mul":
        a, b = rng.randint(2, 9), rng.randint(3, 12)
        text = f"{name} has {a} bags with {b} {item} in each bag. How many {item} does {name} have in total?"
        return Problem(text, a * b, 1, "mul")
    b, k = rng.randint(2, 9), rng.randint(2, 10)
    text = f"{name} shares {b * k} {item} equally among {b} friends. How many {item} does each friend get?"
    return Problem(text, k, 1, "div")


def _two_step(rng: random.Random, name: str, item: str) -> Problem:
    kind = rng.choice(("add_sub", "mul_add", "mul_sub", "add_add"))
    if kind == "add_sub":
        a, b = rng.randint(10, 50), rng.randint(5, 30)
        c = rng.randint(2, a + b - 2)
        text = (f"{name} has {a} {item}. {name} buys {b} more and then gives {c} to a friend. "
                f"How many {item} does {name} have now?")
        return Problem(text, a + b - c, 2, "add_sub")
    if kind == "mul_add":
        a, b, c = rng.randint(2, 9), rng.randint(2, 10), rng.randint(2, 20)
        text = (f"{name} buys {a} boxes of {item} with {b} {item} in each box, and finds {c} more {item}. "
                f"How many {item} does {name} have?")
        return Problem(text, a * b + c, 2, "mul_add")
    if kind == "mul_sub":
        a, b = rng.randint(2, 9), rng.randint(3, 10)
        c = rng.randint(1, a * b - 1)
        text = (f"{name} has {a} bags with {b} {item} in each bag, and loses {c} {item}. "
                f"How many {item} are left?")
        return Problem(text, a * b - c, 2, "mul_sub")
    a, b, c = rng.randint(5, 40), rng.randint(5, 40), rng.randint(5, 40)
    text = (f"On Monday {name} collects {a} {item}, on Tuesday {b} {item} and on Wednesday {c} {item}. "
            f"How many {item} did {name} collect in all?")
    return Problem(text, a + b + c, 2, "add_add")


_LEVELS: dict[int, Callable[[random.Random, str, str], Problem]] = {0: _bare, 1: _one_step, 2: _two_step}


def problem(seed: int, index: int, levels: tuple[int, ...] = (1, 2)) -> Problem:
    """Problem ``index`` of the split with ``seed``; the level is drawn uniformly from ``levels``."""
    if not levels or any(level not in _LEVELS for level in levels):
        raise ValueError(f"levels must be a non-empty subset of {sorted(_LEVELS)}, got {levels}")
    # One independent stream per problem: problem i does not depend on how many came before it.
    rng = random.Random(f"oar-arith/{seed}/{index}")
    level = rng.choice(levels)
    return _LEVELS[level](rng, rng.choice(NAMES), rng.choice(ITEMS))


def generate(seed: int, count: int, levels: tuple[int, ...] = (1, 2)) -> Iterator[Problem]:
    """``count`` problems of the split with ``seed``."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    for i in range(count):
        yield problem(seed, i, levels)
