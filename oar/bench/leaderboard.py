"""The benchmark's versioned leaderboards: one JSON file per entry and track, and the tables built from them.

Ground-truth track: ``<out>/credit/<policy>/v<version>/<entry>.json`` holds an entry's numbers
(:func:`oar.bench.credit.evaluate`) with what made them (benchmark version, the policy's and the response
set's sha256, the commit, the CPU kernels, the seed, the scoring time; its JSON Schema :data:`SCHEMA`),
``<entry>.scores.npz`` its per-token scores (``oar.bench.scores_file``); ``leaderboard.md`` and
``leaderboard.csv`` beside them rank every entry of that folder by average precision, with what each
reads and chance, then give their step-level scores (``oar.bench.step_level``).
Learning track: ``<out>/learning/<policy>/v<version>/<entry>.json`` and its tables (``oar.bench.learning``).
A result of another benchmark version lives in another folder and never shares a table. The docs keep the
current tables between markers (:func:`write_docs`).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oar.analysis.formatting import markdown_table
from oar.files import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).resolve().parent / "entry_record.schema.json"  # the ground-truth record's JSON Schema


def entry_slug(entry: str) -> str:
    """A file name for an entry: a registered name as it is, an import path with ``.`` for ``:``."""
    return re.sub(r"[^A-Za-z0-9_.-]", ".", entry)


def commit() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it (``unknown`` outside a git checkout)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


def folder(out: str | Path, track: str, policy: str, version: int) -> Path:
    return Path(out) / track / policy / f"v{version}"


def write_entry(out: str | Path, track: str, policy: str, version: int, entry: str, record: Mapping[str, Any]) -> Path:
    path = folder(out, track, policy, version) / f"{entry_slug(entry)}.json"
    atomic_write_json(path, dict(record))
    return path


def write_entry_with_scores(out: str | Path, track: str, policy: str, version: int, entry: str,
                            record: Mapping[str, Any], scores: Sequence, rows: Sequence[Mapping[str, Any]]) -> Path:
    """The entry's JSON with its per-token scores file beside it (``oar.bench.scores_file``), the record
    naming the file and its content hash. The scores are written first: a JSON never names a missing file."""
    from oar.bench import scores_file

    path = folder(out, track, policy, version) / f"{entry_slug(entry)}.json"
    digest = scores_file.write(scores_file.path_for(path), scores, rows)
    return write_entry(out, track, policy, version, entry,
                       {**record, "scores": {"file": scores_file.path_for(path).name, "sha256": digest}})


def validate_record(record: Mapping[str, Any], name: str = "the record") -> None:
    """Check a ground-truth record against :data:`SCHEMA`; stops with one line naming ``name`` and the key."""
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(record))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ValueError(f"{name}: {where}: {error.message}")


def read_entries(out: str | Path, track: str, policy: str, version: int) -> list[dict[str, Any]]:
    where = folder(out, track, policy, version)
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(where.glob("*.json"))] if where.is_dir() else []


def _interval(s: Mapping[str, Any], scale: float = 1.0, digits: int = 3) -> str:
    mean, low, high = (s.get(k, math.nan) for k in ("mean", "ci_low", "ci_high"))
    if mean is None or math.isnan(mean):
        return "n/a"
    if low is None or math.isnan(low):
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"


def _mean(s: Mapping[str, Any], digits: int = 2) -> str:
    mean = s.get("mean", math.nan)
    return "n/a" if mean is None or math.isnan(mean) else f"{mean:.{digits}f}"


GROUND_TRUTH_MARK = "†"  # an entry that reads the answer key (record["ground_truth"])


def _entry_cell(e: Mapping[str, Any]) -> str:
    return f"`{e['entry']}`" + (GROUND_TRUTH_MARK if e.get("ground_truth") else "")


def _reads(e: Mapping[str, Any]) -> str:
    """What the entry declared it reads (record["reads"]), as recorded; n/a for a record without it."""
    reads = e.get("reads")
    return "n/a" if reads is None else (", ".join(str(r) for r in reads) or "nothing")


def _step_level(e: Mapping[str, Any]) -> Mapping[str, Any]:
    return e["result"].get("step_level") or {}


def step_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """The step-level scores (``oar.bench.step_level``) of the entries, in the leaderboard's order, with
    chance's localisation; the sign's columns only where an entry is signed."""
    signed = any(e["result"].get("signed") for e in entries)
    rows = []
    for e in entries:
        s = _step_level(e)
        f1 = s.get("processbench_f1", math.nan)
        row = [_entry_cell(e), _interval(s.get("first_error", {})), _interval(s.get("processbench_wrong", {})),
               _interval(s.get("processbench_right", {})), "n/a" if f1 is None or math.isnan(f1) else f"{f1:.3f}"]
        if signed:
            row += [_interval(s["sign_wrong"]), _interval(s["sign_right"])] if e["result"].get("signed") else ["", ""]
        rows.append(row)
    s0 = _step_level(entries[0])
    chance = s0.get("chance_first_error", math.nan)
    rows.append(["chance (a step drawn uniformly)", "n/a" if chance is None or math.isnan(chance) else f"{chance:.3f}",
                 "", "", "", *(["0.500", "0.500"] if signed else [])])
    n = {k: s0.get(k, {}).get("n", "?") for k in ("first_error", "processbench_wrong", "processbench_right")}
    header = ["entry", f"first error located [95% CI] ({n['first_error']} wrong responses)",
              f"ProcessBench: erroneous, accuracy ({n['processbench_wrong']})",
              f"ProcessBench: correct, accuracy ({n['processbench_right']})", "ProcessBench F1",
              *(["sign: erring relation < 0", "sign: right decisive > 0"] if signed else [])]
    return ("Step-level scores: the step of most credit (mean |score| over a step's decisive tokens) against the "
            "first erring step; ProcessBench's judgement flags that step as the error when its credit exceeds "
            f"{s0.get('flag_ratio', 2.0):g} x the other steps' mean credit, else says \"no error\"; F1 is the "
            "harmonic mean of the two accuracies."
            + (" The sign columns score a signed entry's sign (a 0 counts half; 0.5 says nothing)." if signed else "")
            + "\n\n" + markdown_table(header, rows) + "\n")


def credit_table(entries: Sequence[Mapping[str, Any]]) -> tuple[pd.DataFrame, str]:
    """The ground-truth leaderboard of one policy and version: entries by average precision with what each
    reads, chance last; then their step-level scores in the same order (:func:`step_table`)."""
    if not entries:
        raise ValueError("no entries to tabulate")
    first = entries[0]
    steps = sorted({int(k) for e in entries for k in e["result"]["step_recall"]})
    ranked = sorted(entries, key=lambda e: -(e["result"]["average_precision"]["mean"]))
    rows, records = [], []
    for place, e in enumerate(ranked, start=1):
        r, s = e["result"], _step_level(e)
        rows.append([str(place), _entry_cell(e), _interval(r["recall"]), _interval(r["average_precision"]),
                     *(_mean(r["step_recall"].get(str(k), {})) for k in steps),
                     _interval(r["erring"], 100, 0), _reads(e), str(r["ranked"]), f"{e['seconds']:.1f}",
                     e["made_with"]["commit"][:10] + ("+" if e["made_with"].get("dirty") else "")])
        records.append({"place": place, "entry": e["entry"], "recall": r["recall"]["mean"],
                        "recall_low": r["recall"]["ci_low"], "recall_high": r["recall"]["ci_high"],
                        "average_precision": r["average_precision"]["mean"],
                        "average_precision_low": r["average_precision"]["ci_low"],
                        "average_precision_high": r["average_precision"]["ci_high"],
                        **{f"step_{k}": r["step_recall"].get(str(k), {}).get("mean", math.nan) for k in steps},
                        "erring": r["erring"]["mean"], "erring_low": r["erring"]["ci_low"],
                        "erring_high": r["erring"]["ci_high"],
                        **{f"{name}{tail}": s.get(name, {}).get(key, math.nan)
                           for name in ("first_error", "processbench_wrong", "processbench_right",
                                        "sign_wrong", "sign_right")
                           for tail, key in (("", "mean"), ("_low", "ci_low"), ("_high", "ci_high"))},
                        "processbench_f1": s.get("processbench_f1", math.nan),
                        "reads": _reads(e), "ground_truth": e.get("ground_truth"),
                        "ranked": r["ranked"], "seconds": e["seconds"], "commit": e["made_with"]["commit"]})
    chance = first["result"]["chance"]
    rows.append(["", "chance (a random ranking, expected)", f"{chance['recall']:.3f}",
                 f"{chance['average_precision']:.3f}", *(f"{chance['step_recall']:.2f}" for _ in steps), "50",
                 "", "", "", ""])
    header = ["#", "entry", "recall@10% [95% CI]", "average precision [95% CI]", *(f"step {k}" for k in steps),
              f"erring `~` outranks later right `=`, % [95% CI] ({first['result']['erring']['n']} responses)",
              "reads", "responses", "seconds", "commit"]
    # the instruction set torch ran, whether it was pinned (OAR_CPU_KERNELS) and on which CPU: kernels differ
    kernels = sorted({f"{e['made_with'].get('cpu_kernels')} ("
                      f"{'pinned' if e['made_with'].get('pinned') else 'unpinned'}"
                      f"{', ' + e['made_with']['cpu'] if e['made_with'].get('cpu') else ''})" for e in entries})
    footnote = (f"\n{GROUND_TRUTH_MARK} reads the answer key (the parsed positions, the reference solution or "
                "answer): a "
                "ceiling or an oracle, not a method.\n" if any(e.get("ground_truth") for e in entries) else "")
    text = (f"Benchmark version {first['version']}, policy `{first['policy']}` (weights sha256 "
            f"`{first['policy_sha256'][:16]}...`), response set sha256 `{first['response_set_sha256'][:16]}...` "
            f"({first['result']['responses']} responses, {first['result']['ranked']} with decisive tokens); CPU "
            f"kernels: {', '.join(kernels)}. Steps: the share of each chain step's decisive tokens in the top 10%. "
            "Ties count as the mean over their orders; intervals are robust to a problem's 8 responses being alike."
            "\n\n" + markdown_table(header, rows) + footnote + "\n" + step_table(ranked))
    return pd.DataFrame(records), text


def write_credit_table(out: str | Path, policy: str, version: int) -> tuple[Path, str]:
    from oar.analysis.table_file import write_table

    entries = read_entries(out, "credit", policy, version)
    frame, text = credit_table(entries)
    where = folder(out, "credit", policy, version)
    write_table(frame, f"## Token-credit benchmark: ground-truth track, `{policy}`\n\n" + text,
                where / "leaderboard.csv", where / "leaderboard.md")
    return where / "leaderboard.md", text


def write_docs(page: str | Path, marker: str, text: str) -> None:
    """Replace what lies between ``<!-- leaderboard:<marker> -->`` and ``<!-- /leaderboard:<marker> -->`` in
    ``page`` by ``text``; stops when the page lacks the markers."""
    page = Path(page)
    source = page.read_text(encoding="utf-8")
    begin, end = f"<!-- leaderboard:{marker} -->", f"<!-- /leaderboard:{marker} -->"
    if begin not in source or end not in source:
        raise ValueError(f"{page}: no markers {begin} ... {end} to write the table between")
    head, rest = source.split(begin, 1)
    _, tail = rest.split(end, 1)
    atomic_write_text(page, f"{head}{begin}\n{text.rstrip()}\n{end}{tail}")
