"""Benchmark evaluation: generate, grade, write per-sample JSONL, summarise; resumable.

Files in an evaluation folder:

- ``samples.jsonl``: one line per sample (``problem_id``, ``sample_index``, ``response``,
  ``extracted_answer``, ``answer_kind``, ``reference``, ``correct``, ``undecided`` (the grader's symbolic
  check timed out twice; ``correct`` is then false), ``num_tokens``, ``finish_reason``, ``wall_s``). The lines
  of one problem are appended together, once all its ``n`` samples are graded,
  and flushed, so a kill loses at most the problems in flight.
- ``eval_config.json``: the settings that determine the samples (model, benchmark checksum, n,
  temperature, top-p, max new tokens, seed, backend, chunking). A rerun with different settings in the
  same folder stops with an error naming the setting, unless it is told the samples are stale
  (``replace_stale``: the workflow reruns an evaluation only when its model or settings changed, so the
  old samples are deleted, saying which setting differed, and generated again).
- ``summary.json``: written last (by the caller, atomically) from the samples alone, so deleting it and
  rerunning regenerates it without generating anything.

Resuming: a rerun reads ``samples.jsonl``, drops a trailing partial line and any problem with fewer than
``n`` samples, and generates only the problems still missing. Problems are cut into fixed chunks from the
start of the benchmark and chunk ``c`` is generated with a seed derived from ``(seed, c)``, so an
interrupted-then-resumed run reproduces the uninterrupted one except inside a chunk that was cut in two.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from oar.evaluation.generation import GenerationOutput, Generator
from oar.prompting import build_prompts

SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "eval_config.json"
# settings that may change between a run and its resumption (they do not change what a sample means)
NOT_CHECKED_ON_RESUME = ("chunk_size", "grading_timeout_s")
# settings newer than some evaluation folders, with the value that folders without them were made with
ADDED_SETTINGS = {"answer_statement": False}


class EvalConfigMismatch(ValueError):
    """Existing samples were generated with other settings."""


@dataclass(frozen=True)
class EvalSettings:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    chunk_size: int = 1  # problems per generate() call (fixed chunks from the start of the benchmark)
    fallback_last_number: bool = True
    grading_timeout_s: float = 5.0
    answer_statement: bool = True

    def __post_init__(self):
        if self.n < 1 or self.chunk_size < 1 or self.max_new_tokens < 1:
            raise ValueError(f"n, chunk_size and max_new_tokens must be >= 1: {self}")


def chunk_seed(seed: int, chunk_index: int) -> int:
    """A well-mixed 31-bit seed for chunk ``chunk_index`` of a run seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, chunk_index]).generate_state(1)[0] & 0x7FFFFFFF)


def k_values(n: int) -> list[int]:
    """k for pass@k: the powers of two up to n, and n itself."""
    ks = [k for k in (2**i for i in range(0, 20)) if k <= n]
    return sorted(set(ks + [n]))


# ------------------------------------------------------------------------------------------ samples


def read_samples(path: Path, n: int, repair: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Complete problems in ``samples.jsonl`` (problem id -> its ``n`` samples in index order).

    A trailing line without newline or that does not parse (a kill mid-write) and problems with fewer than
    ``n`` samples are dropped; with ``repair`` the file is rewritten without them (atomically).
    """
    if not path.exists():
        return {}
    raw = path.read_bytes()
    by_problem: dict[str, dict[int, dict[str, Any]]] = {}
    order: list[str] = []
    good_lines = 0
    dirty = False
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines = lines[:-1]
    elif lines:
        dirty = True  # last line has no newline: a partial write
        lines = lines[:-1]
    for lineno, line in enumerate(lines, start=1):
        try:
            rec = json.loads(line)
            pid, idx = str(rec["problem_id"]), int(rec["sample_index"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
            if lineno == len(lines):
                dirty = True
                break
            raise ValueError(f"{path}:{lineno}: malformed sample line "
                             f"(not a partial last line; fix or delete the file)")
        if pid not in by_problem:
            by_problem[pid] = {}
            order.append(pid)
        by_problem[pid][idx] = rec
        good_lines += 1
    complete = {pid: [by_problem[pid][i] for i in range(n)] for pid in order
                if all(i in by_problem[pid] for i in range(n))}
    if len(complete) != len(order) or any(len(v) != n for v in by_problem.values()):
        dirty = True
    if dirty and repair:
        tmp = path.with_name(f".{path.name}.repair.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for pid in complete:
                for rec in complete[pid]:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return complete


def grade_outputs(problem: Mapping[str, Any], outputs: Sequence[GenerationOutput], wall_s: float,
                  settings: EvalSettings) -> list[dict[str, Any]]:
    from oar.grading.grader import grade

    lines = []
    for j, out in enumerate(outputs):
        g = grade(out.text, problem["answer"], fallback_last_number=settings.fallback_last_number,
                  timeout_s=settings.grading_timeout_s, answer_statement=settings.answer_statement)
        lines.append({
            "problem_id": problem["id"],
            "sample_index": j,
            "response": out.text,
            "extracted_answer": None if g.answer is None else g.answer.text,
            "answer_kind": None if g.answer is None else g.answer.kind,
            "reference": problem["answer"],
            "correct": bool(g.correct),
            "undecided": bool(g.undecided),
            "num_tokens": int(out.num_tokens),
            "finish_reason": out.finish_reason,
            "wall_s": wall_s,
        })
    return lines


def check_config(path: Path, config: Mapping[str, Any], replace_stale: bool = False) -> None:
    """Write ``eval_config.json``, or check an existing one matches ``config``. With ``replace_stale`` a
    mismatch deletes the folder's samples and config (reported on stderr) instead of stopping."""
    if path.exists() and replace_stale:
        try:
            check_config(path, config)
            return
        except EvalConfigMismatch as stale:
            print(f"replacing stale samples: {stale}", file=sys.stderr)
            (path.parent / SAMPLES_FILE).unlink(missing_ok=True)
            path.unlink()
    if path.exists():
        old = json.loads(path.read_text())
        for key in sorted(set(old) | set(config)):
            # a setting added after the folder was made reads as its default there
            if old.get(key, ADDED_SETTINGS.get(key)) != config.get(key):
                raise EvalConfigMismatch(
                    f"{path}: existing samples were made with {key}={old.get(key)!r}, this run asks"
                    f" {key}={config.get(key)!r}; use another output folder or delete it"
                )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dict(config), indent=2, default=str) + "\n")
    os.replace(tmp, path)


@dataclass
class RunStats:
    generated_problems: int = 0
    generated_samples: int = 0
    generated_tokens: int = 0
    generation_wall_s: float = 0.0
    resumed_problems: int = 0


def run_generation(
    problems: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    make_generator: Callable[[], Generator],
    settings: EvalSettings,
    run_config: Mapping[str, Any] | None = None,
    progress: bool = True,
    replace_stale: bool = False,
) -> tuple[dict[str, list[dict[str, Any]]], RunStats]:
    """Generate and grade what is missing in ``out_dir/samples.jsonl``; return all samples by problem.

    ``make_generator`` is only called when something is left to generate (a rerun with complete samples
    loads no model).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sample_settings = {k: v for k, v in asdict(settings).items() if k not in NOT_CHECKED_ON_RESUME}
    check_config(out_dir / CONFIG_FILE, {**(run_config or {}), **sample_settings}, replace_stale)
    samples_path = out_dir / SAMPLES_FILE
    done = read_samples(samples_path, settings.n)
    stats = RunStats(resumed_problems=sum(1 for p in problems if p["id"] in done))
    ids = [p["id"] for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids repeat in the benchmark file")
    chunks = [list(range(s, min(s + settings.chunk_size, len(problems))))
              for s in range(0, len(problems), settings.chunk_size)]
    pending = [(c, [i for i in idx if problems[i]["id"] not in done]) for c, idx in enumerate(chunks)]
    pending = [(c, idx) for c, idx in pending if idx]
    if pending:
        generator = make_generator()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=sum(len(i) for _, i in pending), desc="problems", unit="problem")
        with open(samples_path, "a", encoding="utf-8") as f:
            for c, idx in pending:
                batch = [problems[i] for i in idx]
                prompts = build_prompts([p["problem"] for p in batch], generator.tokenizer,
                                        chat=getattr(generator, "chat", None))
                start = time.perf_counter()
                outs = generator.generate(prompts, n=settings.n, temperature=settings.temperature,
                                          top_p=settings.top_p, max_new_tokens=settings.max_new_tokens,
                                          seed=chunk_seed(settings.seed, c))
                wall = time.perf_counter() - start
                per_sample = wall / (len(batch) * settings.n)
                for problem, problem_outs in zip(batch, outs):
                    lines = grade_outputs(problem, problem_outs, per_sample, settings)
                    f.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
                    f.flush()
                    os.fsync(f.fileno())
                    done[problem["id"]] = lines
                    stats.generated_tokens += sum(x["num_tokens"] for x in lines)
                stats.generated_problems += len(batch)
                stats.generated_samples += len(batch) * settings.n
                stats.generation_wall_s += wall
                if bar is not None:
                    bar.update(len(batch))
        if bar is not None:
            bar.close()
    return {p["id"]: done[p["id"]] for p in problems}, stats


# ------------------------------------------------------------------------------------------ summary


def summarize(samples: Mapping[str, Sequence[Mapping[str, Any]]], n: int, n_boot: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Summary of graded samples (problem id -> n samples): accuracy, pass@k, answer and cost counts."""
    from oar.method.metrics import mean_accuracy, pass_at_k

    if not samples:
        raise ValueError("no samples to summarise")
    pids = list(samples)
    correct = np.array([[bool(s["correct"]) for s in samples[p]] for p in pids], dtype=float)
    if correct.shape[1] != n:
        raise ValueError(f"expected {n} samples per problem, got {correct.shape[1]}")
    acc = mean_accuracy(correct, n_boot=n_boot, seed=seed, confidence=0.95)
    flat = [s for p in pids for s in samples[p]]
    num_correct = correct.sum(axis=1).astype(int)
    tokens = int(sum(s["num_tokens"] for s in flat))
    wall = float(sum(s.get("wall_s", 0.0) for s in flat))
    kinds = Counter(s.get("answer_kind") or "none" for s in flat)
    return {
        "num_problems": len(pids),
        "samples_per_problem": n,
        "num_samples": len(flat),
        "pass@1": float(acc.mean),
        "pass@1_ci95": [float(acc.ci_low), float(acc.ci_high)],
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in num_correct]))
                      for k in k_values(n)},
        "problems_solved_any": int((num_correct > 0).sum()),
        "unparsable": int(sum(s["extracted_answer"] is None for s in flat)),
        # graded wrong because the symbolic check timed out twice (samples written before it was counted: 0)
        "undecided": int(sum(bool(s.get("undecided")) for s in flat)),
        "answer_kinds": dict(kinds),
        "truncated": int(sum(s["finish_reason"] == "length" for s in flat)),
        "tokens_generated": tokens,
        "mean_response_tokens": tokens / len(flat),
        "generation_wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "bootstrap": {"n_boot": n_boot, "seed": seed, "unit": "problem"},
    }
