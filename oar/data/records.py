"""The dataset record: how a raw row becomes one, and the prepared JSON Lines files that hold them.

Record (one JSON object per line in ``results/data/<name>.jsonl``)::

    {"id": "math500/test/precalculus/807.json", "problem": "...", "answer": "\\frac{3}{56}",
     "source": "math500", "level": 2}

- ``id``: ``<dataset>/<original id>`` where the source has an id field, else ``<dataset>/<row index>``
  (0-based, in file order); stable across runs.
- ``answer``: a string, normalised with :func:`oar.grading.extraction.extract_reference` (GSM8K ``#### 72``
  -> ``72``, a MATH solution -> its last ``\\boxed{}``, AMC's float ``27.0`` -> ``27``).
- ``source``: the dataset the row came from (for ``math12k``: ``math_train`` or ``math_test``).
- ``level``: MATH difficulty 1-5 where the source has one (``"Level 3"`` and ``3`` both give 3), else null.

A malformed row raises :class:`DataError` with ``file:line: what is wrong``; nothing is dropped silently.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from oar.data.catalogue import FieldMap
from oar.data.data_error import DataError
from oar.data.sources import RawRow, iter_jsonl

RECORD_KEYS = ("id", "problem", "answer", "source", "level")

_WS = re.compile(r"\s+")
# A box with braces, or the brace-less "\\boxed 2" of two MATH train solutions (extract_reference reads both).
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{|\\(?:boxed|fbox)\s+[^\s${}]")


def normalise_problem_text(text: str) -> str:
    """Key for duplicate/overlap detection: whitespace collapsed, surrounding space stripped."""
    return _WS.sub(" ", text).strip()


def _normalise_level(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    m = re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", str(value), flags=re.IGNORECASE)
    return int(m.group(1)) if m else None  # MATH train has two "Level ?" rows: unknown level


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or (
        isinstance(value, str) and not value.strip()
    )


def normalise_answer(raw: Any, fmt: str, where: str, field_name: str) -> str:
    from oar.grading.extraction import extract_reference

    if _is_missing(raw):
        raise DataError(f"{where}: empty answer in field {field_name!r}")
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise DataError(f"{where}: answer field {field_name!r} is a {type(raw).__name__}, not a string or number")
    if fmt == "hash" and (not isinstance(raw, str) or "####" not in raw):
        raise DataError(f"{where}: field {field_name!r} has no '#### <answer>' line")
    if fmt == "boxed" and (not isinstance(raw, str) or not _BOXED.search(raw)):
        raise DataError(f"{where}: field {field_name!r} has no \\boxed{{}} answer")
    try:
        answer = extract_reference(raw)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{where}: cannot read the answer in field {field_name!r} ({str(e)[:120]})") from None
    if _is_missing(answer):
        raise DataError(f"{where}: empty answer after normalising field {field_name!r} ({str(raw)[-60:]!r})")
    return str(answer).strip()


class _Resolver:
    """Chooses, from the first row, which candidate field feeds each record key."""

    def __init__(self, fields: FieldMap, first: Mapping[str, Any], where: str):
        def pick(cands: Sequence[str], required: bool, key: str) -> str | None:
            for c in cands:
                if c in first:
                    return c
            if required:
                raise DataError(
                    f"{where}: missing field for {key!r} (looked for {', '.join(map(repr, cands))};"
                    f" row has {', '.join(map(repr, first)) or 'no fields'})"
                )
            return None

        self.problem = pick(fields.problem, True, "problem")
        answer_names = [name for name, _ in fields.answer]
        name = pick(answer_names, True, "answer")
        self.answer = (name, dict(fields.answer)[name])
        self.id = pick(fields.id, False, "id")
        self.level = pick(fields.level, False, "level")


def _normalise_row(row: RawRow, resolver: _Resolver, dataset: str) -> dict[str, Any]:
    for key in (resolver.problem, resolver.answer[0], resolver.id):
        if key is not None and key not in row.data:
            raise DataError(f"{row.where}: missing field {key!r}")
    problem = row.data[resolver.problem]
    if not isinstance(problem, str) or not problem.strip():
        raise DataError(f"{row.where}: empty or non-text problem in field {resolver.problem!r}")
    answer = normalise_answer(row.data[resolver.answer[0]], resolver.answer[1], row.where, resolver.answer[0])
    if resolver.id is not None:
        raw_id = row.data[resolver.id]
        if _is_missing(raw_id):
            raise DataError(f"{row.where}: empty id in field {resolver.id!r}")
        rid = f"{dataset}/{raw_id}"
    else:
        rid = f"{dataset}/{row.index}"
    level = _normalise_level(row.data.get(resolver.level)) if resolver.level else None
    return {"id": rid, "problem": problem, "answer": answer, "source": dataset, "level": level}


def normalise_rows(rows: Iterable[RawRow], dataset: str, fields: FieldMap,
                   skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Raw rows -> records.

    The first malformed row raises :class:`DataError`, unless a ``skipped`` list is given: then rows
    with bad content (not an object, a missing field, an empty problem, an unreadable answer) are left
    out and their one-line errors appended to it, for the caller to report. Invalid JSON and repeated
    ids always stop.
    """
    records: list[dict[str, Any]] = []
    resolver: _Resolver | None = None
    seen_ids: dict[str, str] = {}
    for row in rows:
        try:
            if not isinstance(row.data, Mapping):
                raise DataError(f"{row.where}: row is a {type(row.data).__name__}, not a JSON object")
            if resolver is None:
                resolver = _Resolver(fields, row.data, row.where)
            record = _normalise_row(row, resolver, dataset)
        except DataError as e:
            if skipped is None or resolver is None:
                raise
            skipped.append(str(e))
            continue
        if record["id"] in seen_ids:
            raise DataError(f"{row.where}: id {record['id']!r} repeats the id of {seen_ids[record['id']]}")
        seen_ids[record["id"]] = row.where
        records.append(record)
    return records


def write_records(records: Iterable[Mapping[str, Any]], f) -> None:
    for r in records:
        f.write(json.dumps({k: r[k] for k in RECORD_KEYS}, ensure_ascii=False) + "\n")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a prepared ``<name>.jsonl`` (records as written by :func:`write_records`), validating it."""
    records = []
    for row in iter_jsonl(Path(path)):
        if not isinstance(row.data, Mapping):
            raise DataError(f"{row.where}: row is not a JSON object")
        for key in ("id", "problem", "answer"):
            value = row.data.get(key)
            if not isinstance(value, str) or not value.strip():
                raise DataError(f"{row.where}: missing or empty field {key!r}")
        records.append(dict(row.data))
    if not records:
        raise DataError(f"{path}: no rows")
    return records
