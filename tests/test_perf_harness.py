"""perf/harness.py, what the measurement scripts share: timing, the result table and its files, and the
count of model calls and host synchronisations of one call."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("harness", Path(__file__).resolve().parents[1] / "perf" / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


def test_timed_gives_the_median_and_the_last_result():
    results = iter(range(3))
    seconds, last = harness.timed(lambda: next(results), 3)
    assert last == 2 and seconds >= 0
    assert harness.median_seconds(lambda: None, 1) >= 0


def test_markdown_table_aligns_each_column_as_asked():
    text = harness.markdown_table(["name", "s"], [["a", "1.0"], ["b", 2]], "lr")
    assert text.splitlines() == ["| name | s |", "|---|---:|", "| a | 1.0 |", "| b | 2 |"]
    assert harness.markdown_table(["x", "y"], []).splitlines()[1] == "|---|---|"  # left by default


def test_write_table_writes_the_text_and_its_numbers_beside_it(tmp_path):
    out = tmp_path / "sub" / "t.md"
    harness.write_table(out, "| a |", {"a": 1})
    assert out.read_text() == "| a |\n"
    assert json.loads(out.with_suffix(".json").read_text()) == {"a": 1}
    harness.write_table(out, "text\n")
    assert out.read_text() == "text\n"


def test_calls_and_syncs_counts_forwards_and_each_wait_once():
    model = torch.nn.Linear(2, 2)

    def call():
        model(torch.ones(1, 2))
        model(torch.ones(1, 2)).sum().item()  # one wait: aten::item reads through _local_scalar_dense
        torch.nonzero(torch.ones(3))

    calls, counts = harness.calls_and_syncs(model, call)
    assert calls == 2
    assert set(counts) == set(harness.SYNC_OPS)
    assert counts["aten::item"] == 1 and counts["aten::_local_scalar_dense"] == 1 and counts["aten::nonzero"] == 1
    assert harness.host_waits(counts) == 2
