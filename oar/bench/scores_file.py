"""An entry's per-token scores, saved beside its leaderboard JSON: ``<entry>.scores.npz``.

So that a row can be looked at, re-analysed and checked without scoring again. One NumPy ``.npz`` archive
(compressed) with four arrays, every row of the response set in file order:

- ``scores``: float32, every response's reasoning-token scores, concatenated;
- ``offsets``: int64, ``len(rows) + 1`` entries: response i's scores are ``scores[offsets[i]:offsets[i+1]]``
  (its length is the row's ``reasoning_len``);
- ``problem``, ``sample``: int32, each response's problem and sample (the response set's keys).

float32 keeps the file small (1,600 responses in well under a megabyte); the metrics are computed from
the scorer's float64 scores, so recomputing them from the file can differ only where two scores differ
below float32's precision. :func:`content_sha256` hashes the offsets' and the scores' bytes, not the
archive's (a zip records times), so the same scores give the same hash on every machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oar.files import atomic_open

SUFFIX = ".scores.npz"


def path_for(entry_json: str | Path) -> Path:
    """The scores file beside an entry's JSON (``truth.json`` -> ``truth.scores.npz``)."""
    entry_json = Path(entry_json)
    return entry_json.with_name(entry_json.stem + SUFFIX)


def pack(scores: Sequence[np.ndarray], rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """The file's arrays from each row's scores."""
    if len(scores) != len(rows):
        raise ValueError(f"{len(scores)} score rows for {len(rows)} responses")
    lengths = [len(s) for s in scores]
    return {"scores": np.concatenate([np.asarray(s, dtype=np.float32) for s in scores]) if scores
            else np.zeros(0, np.float32),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "problem": np.array([int(r["problem"]) for r in rows], dtype=np.int32),
            "sample": np.array([int(r["sample"]) for r in rows], dtype=np.int32)}


def content_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 of the offsets' bytes (int64, little-endian) followed by the scores' (float32, little-endian)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(arrays["offsets"], dtype="<i8").tobytes())
    h.update(np.ascontiguousarray(arrays["scores"], dtype="<f4").tobytes())
    return h.hexdigest()


def write(path: str | Path, scores: Sequence[np.ndarray], rows: Sequence[Mapping[str, Any]]) -> str:
    """Write the scores file atomically; returns its :func:`content_sha256`."""
    arrays = pack(scores, rows)
    with atomic_open(path, "wb", encoding=None) as f:
        np.savez_compressed(f, scores=arrays["scores"], offsets=arrays["offsets"], problem=arrays["problem"],
                            sample=arrays["sample"])
    return content_sha256(arrays)


def read(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a scores file; stops naming the file where one is missing or the offsets do not fit."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no scores file")
    with np.load(path) as archive:
        missing = {"scores", "offsets", "problem", "sample"} - set(archive.files)
        if missing:
            raise ValueError(f"{path}: not a scores file (missing {', '.join(sorted(missing))})")
        arrays = {k: archive[k] for k in ("scores", "offsets", "problem", "sample")}
    offsets = arrays["offsets"]
    if len(offsets) != len(arrays["problem"]) + 1 or offsets[0] != 0 or offsets[-1] != len(arrays["scores"]) \
            or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{path}: its offsets do not cut its scores into one row per response")
    return arrays


def rows_of(arrays: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Each response's scores (float32) from a file's arrays."""
    offsets = arrays["offsets"]
    return [arrays["scores"][offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
