"""Formatting for the tables: numbers, p-values and intervals as cells, and a Markdown table.

A value a run output left out (None or nan) is shown as ``–`` everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def is_missing(v: Any) -> bool:
    """None or a float nan: a value a run output left out."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_num(v: Any, digits: int = 1, scale: float = 1.0) -> str:
    return "–" if is_missing(v) else f"{v * scale:.{digits}f}"


# What a decided test of a paired difference claims, by its declared alternative (an equivalence names its margin).
TEST_CLAIMS = {"greater": "above", "less": "below", "two-sided": "different from 0"}


def fmt_decision(test: str, decided: bool, margin: Any) -> str:
    """The decision cell of a declared test (``greater``, ``less``, ``two-sided``, ``equivalent``):
    ``decided: above 2.0`` (the margin in points, 0 where none is declared), ``decided: different from 0``,
    ``decided: equivalent within ±1.0``, ``not shown equivalent (no claim either way)`` or ``not decided``."""
    if not decided:
        return "not shown equivalent (no claim either way)" if test == "equivalent" else "not decided"
    if test == "equivalent":
        return f"decided: equivalent within ±{fmt_num(margin, 1, 100.0)}"
    what = TEST_CLAIMS[test]
    if test in ("greater", "less"):
        what += f" {fmt_num(0.0 if is_missing(margin) else margin, 1, 100.0)}"
    return f"decided: {what}"


def fmt_p(p: Any) -> str:
    """A p-value: ``0.031``, ``<0.001``; ``–`` where there is none."""
    if is_missing(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_cell(mean: float, low: float, high: float, scale: float = 100.0, digits: int = 1) -> str:
    """``48.3 [44.1, 52.0]`` (no brackets when there is no interval)."""
    if is_missing(mean):
        return "–"
    text = f"{mean * scale:.{digits}f}"
    if not is_missing(low) and not is_missing(high):
        text += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    return text


def fmt_interval(s: Mapping[str, Any] | None, digits: int = 3) -> str:
    """``0.412 [0.301, 0.523]`` from a spread record (mean and 95% interval)."""
    s = s or {}
    return fmt_cell(s.get("mean"), s.get("ci_low"), s.get("ci_high"), scale=1.0, digits=digits)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub Markdown table; ``align`` is one of l/r per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    esc = [[str(c).replace("|", "\\|") for c in row] for row in [headers, *rows]]
    rule = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(esc[0]) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines) + "\n"
