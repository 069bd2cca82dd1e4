"""Preparing a dataset: one catalogued dataset read from its source into records, or a composite one
built from its parts; then filtered by level, checked for overlap with the benchmarks, counted for
duplicated problems, shuffled and cut (:func:`build_dataset`).

The catalogue is :mod:`oar.data.catalogue`, the sources :mod:`oar.data.sources`, the record and its
files :mod:`oar.data.records`. A malformed row raises :class:`DataError` with ``file:line: what is
wrong``; nothing is dropped silently.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from oar.data.catalogue import FieldMap, default_source, get_spec
from oar.data.data_error import DataError
from oar.data.records import normalise_problem_text, normalise_rows
from oar.data.sources import source_rows


@dataclass
class Loaded:
    records: list[dict[str, Any]]
    locations: list[str] = field(default_factory=list)  # files / hub ids read
    input_sha256: dict[str, str] = field(default_factory=dict)
    rows_read: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # one-line errors of rows left out (skip_bad_rows)


def load_dataset_records(
    name: str,
    source: str | None = None,
    path: str | Path | None = None,
    fields: str | Mapping[str, str] | FieldMap | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    hub_split: str | None = None,
    cache_dir: str | None = None,
    skip_bad_rows: bool = False,
) -> Loaded:
    """Read one registered dataset (not composite) from one source into records.

    ``source`` None is the dataset's :func:`default_source`. ``hub_id``/``hub_config``/``hub_split``
    override the catalogue (``hub_id`` may be a local dataset folder); ``path`` is the file for source
    ``local``; ``fields`` overrides the field mapping.
    ``skip_bad_rows`` leaves out rows with bad content and lists them in ``Loaded.skipped`` (default:
    the first one stops with its ``file:line``).
    """
    spec = get_spec(name)
    if spec.parts:
        raise DataError(f"{name!r} is composite ({' + '.join(spec.parts)}); use build_dataset()")
    fmap = fields if isinstance(fields, FieldMap) else FieldMap.parse(fields, spec.fields)
    source = source or default_source(name)
    rows, loc, sha = source_rows(name, source, path, hub_id, hub_config, hub_split, cache_dir)
    skipped: list[str] | None = [] if skip_bad_rows else None
    records = normalise_rows(rows, name, fmap, skipped)
    if not records:
        raise DataError(f"{loc}: no rows")
    return Loaded(records, [loc], sha, {name: len(records) + len(skipped or [])}, list(skipped or []))


def problem_keys(records: Iterable[Mapping[str, Any]]) -> set[str]:
    return {normalise_problem_text(r["problem"]) for r in records}


def count_duplicates(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows whose normalised problem text repeats an earlier row (kept, reported)."""
    first: dict[str, str] = {}
    dups: list[list[str]] = []
    for r in records:
        key = normalise_problem_text(r["problem"])
        if key in first:
            dups.append([first[key], r["id"]])
        else:
            first[key] = r["id"]
    return {"count": len(dups), "pairs": dups[:20]}


def overlap(records: Sequence[Mapping[str, Any]], against: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of ``records`` whose normalised problem text is in ``against``."""
    keys = problem_keys(against)
    return [r["id"] for r in records if normalise_problem_text(r["problem"]) in keys]


@dataclass
class Prepared:
    records: list[dict[str, Any]]
    summary: dict[str, Any]


def build_dataset(
    name: str,
    source: str | None = None,
    path: str | Path | None = None,
    fields: str | Mapping[str, str] | None = None,
    levels: Sequence[int] | None = None,
    limit: int | None = None,
    shuffle_seed: int | None = None,
    against: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    on_overlap: str = "error",
    hub_id: str | None = None,
    hub_config: str | None = None,
    hub_split: str | None = None,
    cache_dir: str | None = None,
    skip_bad_rows: bool = False,
) -> Prepared:
    """Load, combine, filter and check one dataset; returns records and a summary (no files written).

    Order of operations: load (composite: parts in order, then drop MATH-500 problems) -> level filter
    -> overlap check against the ``against`` benchmarks (``on_overlap``: ``"error"`` stops,
    ``"exclude"`` removes and counts, ``"report"`` only counts) -> optional seeded shuffle
    (``random.Random(shuffle_seed)``; ``None`` keeps file order) -> first ``limit`` rows.
    Duplicated problem texts are counted and kept. Rows skipped with ``skip_bad_rows`` are listed in
    ``summary["skipped_rows"]``.
    """
    spec = get_spec(name)
    source = source or default_source(name)
    summary: dict[str, Any] = {"dataset": name, "role": spec.role, "source": source}
    if spec.parts:
        if source not in ("packaged", "hub"):
            raise DataError(f"{name!r} is built from {', '.join(spec.parts)} and math500; use source packaged or hub")
        parts = [load_dataset_records(p, source, fields=fields, cache_dir=cache_dir, skip_bad_rows=skip_bad_rows)
                 for p in spec.parts]
        m500 = load_dataset_records("math500", source, cache_dir=cache_dir)
        records = [r for part in parts for r in part.records]
        drop = set(overlap(records, m500.records))
        records = [r for r in records if r["id"] not in drop]
        loaded = Loaded(
            records,
            [loc for p in parts + [m500] for loc in p.locations],
            {k: v for p in parts + [m500] for k, v in p.input_sha256.items()},
            {k: v for p in parts for k, v in p.rows_read.items()},
            [e for p in parts for e in p.skipped],
        )
        summary["excluded_math500"] = len(drop)
    else:
        loaded = load_dataset_records(name, source, path, fields, hub_id, hub_config, hub_split, cache_dir,
                                      skip_bad_rows)
        records = loaded.records
    summary.update(locations=loaded.locations, input_sha256=loaded.input_sha256, rows_read=loaded.rows_read,
                   skipped_rows={"count": len(loaded.skipped), "errors": loaded.skipped})

    if levels:
        wanted = {int(v) for v in levels}
        if all(r["level"] is None for r in records):
            raise DataError(f"dataset {name!r}: a level filter was given but its rows have no level")
        records = [r for r in records if r["level"] in wanted]
        summary["levels_kept"] = sorted(wanted)
        summary["rows_after_level_filter"] = len(records)

    summary["overlap"] = {}
    for bench, bench_records in (against or {}).items():
        ids = overlap(records, bench_records)
        summary["overlap"][bench] = {"count": len(ids), "ids": ids[:20]}
        if ids and on_overlap == "error":
            raise DataError(
                f"dataset {name!r}: {len(ids)} problems also in benchmark {bench!r} (first: {ids[0]});"
                " use on_overlap exclude or report"
            )
        if ids and on_overlap == "exclude":
            drop = set(ids)
            records = [r for r in records if r["id"] not in drop]
            summary["overlap"][bench]["excluded"] = len(ids)
    summary["on_overlap"] = on_overlap

    summary["duplicates"] = count_duplicates(records)
    if shuffle_seed is not None:
        records = list(records)
        random.Random(shuffle_seed).shuffle(records)
    summary["shuffle_seed"] = shuffle_seed
    if limit is not None:
        if limit < 1:
            raise DataError(f"dataset {name!r}: limit must be >= 1, got {limit}")
        records = records[:limit]
    summary["limit"] = limit
    summary["rows"] = len(records)
    summary["level_counts"] = {str(k): v for k, v in sorted(Counter(r["level"] for r in records).items(),
                                                            key=lambda kv: (kv[0] is None, kv[0] or 0))}
    summary["source_counts"] = dict(Counter(r["source"] for r in records))
    return Prepared(records, summary)
