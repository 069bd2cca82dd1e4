"""Reading the run outputs every question starts from: evaluation summaries into one accuracy row per
(run, benchmark), each run's ``metrics.jsonl`` into one row per logged step, a method variant's accuracy
per seed, and a scorer's held-out scores per response.

Run metadata (model, method, tau, beta, probe, seed per run id) is passed in by the caller. Nothing here
writes a file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oar.analysis.formatting import is_missing
from oar.method.metrics import STEP_CREDIT

META_COLUMNS = ("run", "model", "method", "tau", "beta", "probe", "seed")
# what identifies a method variant across seeds
VARIANT_COLUMNS = ("model", "method", "tau", "beta", "probe")
CURVE_METRICS = (
    "reward", "reward_std", "entropy", "completion_length", "loss", "ess_ratio", "top_mass", "frac_scored",
    "frac_active",
    "fallback_no_answer", "fallback_nonfinite", "grading_undecided", "time_generate_s", "time_score_s", "time_update_s",
    "step_time_s", "peak_memory_mb", "score_peak_memory_mb", "peak_memory_max_mb", "score_peak_memory_max_mb",
)


def _meta_row(run: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    return {"run": run, **{k: meta.get(k) for k in META_COLUMNS[1:]}}


def variant_key(row: Mapping[str, Any]) -> tuple:
    """What identifies a method variant across seeds: model, method, tau, beta, probe."""
    return tuple(None if is_missing(row.get(k)) else row.get(k) for k in VARIANT_COLUMNS)


# ------------------------------------------------------------------------------------ accuracy


def read_summary(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _share(count: int | None, total: int) -> float:
    return count / total if count is not None and total else math.nan


def accuracy_frame(runs: Mapping[str, Mapping[str, Any]],
                   summaries: Mapping[tuple[str, str], str | Path]) -> pd.DataFrame:
    """One row per (run, benchmark): pass@1 and its bootstrap interval over problems, with run metadata.

    ``summaries`` maps (run id, benchmark) to the evaluation's ``summary.json``.
    """
    rows = []
    for (run, bench), path in summaries.items():
        s = read_summary(path)
        ci = s.get("pass@1_ci95") or [math.nan, math.nan]
        rows.append({
            **_meta_row(run, runs[run]),
            "benchmark": bench,
            "pass@1": s["pass@1"],
            "ci_low": ci[0],
            "ci_high": ci[1],
            "num_problems": s["num_problems"],
            "samples_per_problem": s["samples_per_problem"],
            "unparsable": s.get("unparsable"),
            # share of responses in which the grader found no answer: a low score caused by format shows here
            "unparsable_share": _share(s.get("unparsable"),
                                       s.get("num_samples") or s["num_problems"] * s["samples_per_problem"]),
            "truncated": s.get("truncated"),
            "mean_response_tokens": s.get("mean_response_tokens"),
            # graded wrong because the symbolic check timed out twice (oar.grading): 0 unless the grader was starved
            "undecided": s.get("undecided", 0),
        })
    return pd.DataFrame(rows, columns=[*META_COLUMNS, "benchmark", "pass@1", "ci_low", "ci_high", "num_problems",
                                       "samples_per_problem", "unparsable", "unparsable_share", "truncated",
                                       "mean_response_tokens", "undecided"])


def variant_seed_averages(acc: pd.DataFrame, benchmarks: Sequence[str]) -> dict[tuple, dict[Any, float]]:
    """Variant key -> seed -> the run's accuracy averaged over ``benchmarks`` (trained runs that have
    every benchmark)."""
    acc = acc[acc["benchmark"].isin(benchmarks) & (acc["method"] != "base")]
    by_variant: dict[tuple, dict[Any, float]] = {}
    for _, g in acc.groupby("run", sort=False):
        if set(g["benchmark"]) == set(benchmarks):
            first = g.iloc[0].to_dict()
            by_variant.setdefault(variant_key(first), {})[first["seed"]] = float(g["pass@1"].mean())
    return by_variant


# ------------------------------------------------------------------------------------ training curves


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines of a run's ``metrics.jsonl`` (blank lines skipped; a torn last line dropped)."""
    rows = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # a run killed mid-write
            raise ValueError(f"{path}:{i + 1}: not a JSON line") from None
    return rows


def training_curves(runs: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, str | Path]) -> pd.DataFrame:
    """Long frame: one row per (run, logged step) with the run metadata and every known metric; the
    step-credit shares (``oar.method.metrics.STEP_CREDIT``) only where some run logged them."""
    rows, logged = [], False
    for run, path in metrics.items():
        for m in read_metrics(path):
            if "step" not in m:
                raise ValueError(f"{path}: a metrics line has no 'step'")
            rows.append({**_meta_row(run, runs[run]), "step": int(m["step"]),
                         **{k: m.get(k) for k in (*CURVE_METRICS, *STEP_CREDIT)}})
            logged = logged or any(k in m for k in STEP_CREDIT)
    columns = [*CURVE_METRICS, *(STEP_CREDIT if logged else ())]
    frame = pd.DataFrame(rows, columns=[*META_COLUMNS, "step", *columns])
    for k in columns:
        frame[k] = pd.to_numeric(frame[k], errors="coerce")
    return frame


# ------------------------------------------------------------------------------------ held-out scores


def scores_by_index(rows: Sequence[Mapping[str, Any]]) -> dict[int, list[float]]:
    """A scorer's held-out score rows as held-out response index -> its per-token scores."""
    return {int(r["index"]): list(r["scores"]) for r in rows}
