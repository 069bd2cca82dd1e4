"""What the measurement scripts share: timing, their common options, writing a result table, and counting
the host synchronisations and model calls of one call under torch.profiler.

A measurement script runs as ``python perf/<name>.py``, which puts perf/ on the path, so ``import harness`` finds this
file; tests load it by its path. It imports torch only where a function needs it, and nothing beyond the
project's packages (perf/gpu_check.py runs on a GPU machine with the project on PYTHONPATH alone).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oar.files import atomic_write_json, atomic_write_text

# Operators that make the host wait for the device (on a GPU): reading a value (aten::item, which reads
# through aten::_local_scalar_dense) or a data-dependent shape (aten::nonzero).
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero")


# ------------------------------------------------------------------------------------------- timing


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(median wall seconds of ``repeats`` calls of ``fn``, the last call's result)."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn``."""
    return timed(fn, repeats)[0]


# ------------------------------------------------------------------------------------------ options


def add_model(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument("--model", required=True, help=help or "model folder")


def add_threads(parser: argparse.ArgumentParser, default: int | None = 1) -> None:
    parser.add_argument("--threads", type=int, default=default,
                        help="torch CPU threads" + (" (default: torch's own choice)" if default is None else ""))


def add_repeats(parser: argparse.ArgumentParser, default: int,
                help: str = "timing repeats (the median is reported)") -> None:
    parser.add_argument("--repeats", type=int, default=default, help=help)


def add_out(parser: argparse.ArgumentParser, help: str, type: Callable[[str], Any] = str) -> None:
    parser.add_argument("--out", type=type, help=help)


# ------------------------------------------------------------------------------------------ results


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A Markdown table: the header, its rule (``align``: one ``l`` or ``r`` a column, left by default) and
    one line a row of cells (already formatted)."""
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(columns), "l"))
    lines = ["| " + " | ".join(columns) + " |", rule]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_table(path: str | Path, text: str, record: Any = None) -> None:
    """The printed table (text) to ``path`` and, given its raw numbers, them as JSON beside it (``.json``);
    both written atomically."""
    path = Path(path)
    atomic_write_text(path, text if text.endswith("\n") else text + "\n")
    if record is not None:
        atomic_write_json(path.with_suffix(".json"), record)


# ------------------------------------------------------------------------------------ profiling


def sync_counts(events: Any) -> dict[str, int]:
    """Calls of each host-synchronising operator (``SYNC_OPS``) in a finished ``torch.profiler`` trace's
    ``key_averages()``."""
    counts = dict.fromkeys(SYNC_OPS, 0)
    for event in events:
        if event.key in counts:
            counts[event.key] += event.count
    return counts


def host_waits(counts: dict[str, int]) -> int:
    """The host's waits in ``sync_counts``: aten::item reads through aten::_local_scalar_dense, so each
    wait is counted once."""
    return counts["aten::_local_scalar_dense"] + counts["aten::nonzero"]


def calls_and_syncs(model: Any, fn: Callable[[], Any]) -> tuple[int, dict[str, int]]:
    """(forwards of ``model``, counted by a hook; ``sync_counts``) of one call of ``fn`` profiled on the CPU."""
    from torch.profiler import ProfilerActivity, profile

    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    finally:
        hook.remove()
    return len(calls), sync_counts(prof.key_averages())
