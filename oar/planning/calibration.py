"""A cost plan's hardware calibrated by measured step times: the ``calibration.json`` files of
``perf/gpu_check.py`` read and checked (:func:`calibration_rows`), the sustained rates and fixed costs
fitted from their rows (:func:`calibrate`), and the plan's settings of one row (:func:`check_settings`).

    python -m oar.planning.cost_plan --config config/paper.yaml --hardware h200 \\
        --calibration perf/calibration/h200-2026-11/calibration_1024.json \\
                      perf/calibration/h200-2026-11/calibration_256.json
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping
from pathlib import Path

from oar.planning.cost_model import (SCHEDULES, Assumptions, Work, calibrated_scorer, generation_work, reasoning_probe,
                                     scaled, scoring_work, update_work)
from oar.planning.hardware import Hardware
from oar.planning.memory_plan import PlanError
from oar.planning.shapes import Shape, shape_name, shape_of
from oar.training.settings import OARSettings

CALIBRATION_ROW_FIELDS = ("method", "prompt_tokens", "completion_length", "batch", "generate_s", "score_s",
                          "update_s", "step_s")
CALIBRATED_METHODS = ("grpo", "oar_p", "oar_g", "grad_norm", "entropy")
# phases a scorer's row may leave out (null, named in its ``unmeasured``) where only its generation and
# scoring were recorded, e.g. from the trainer's logged metrics of a process stopped before it wrote its row
UNMEASURABLE = ("update_s", "step_s")


def calibration_rows(path: str | Path, require_grpo: bool = True) -> tuple[dict, list[dict]]:
    """(header, rows) of a ``calibration.json``: the current format (``rows``: one per method and length)
    or the earlier one (``methods`` at one ``response_tokens``), normalised to the current one. Stops with
    a :class:`PlanError` naming the field that is missing or of the wrong type, or, with ``require_grpo``,
    when no row is GRPO's (a file calibrated beside others of its shape may leave GRPO to them)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise PlanError(f"--calibration {path}: {error}") from error
    where = f"--calibration {path}"
    if not isinstance(data, dict):
        raise PlanError(f"{where}: not a JSON object (written by perf/gpu_check.py)")
    for key in ("shape", "batch") + (() if "rows" in data else ("prompt_tokens", "response_tokens", "methods")):
        if key not in data:
            raise PlanError(f"{where}: no key {key!r} (written by perf/gpu_check.py)")
    if not isinstance(data["shape"], dict):
        raise PlanError(f"{where}: field 'shape' is not a mapping of a Qwen2 config's sizes")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size"):
        if not isinstance(data["shape"].get(key), int):
            raise PlanError(f"{where}: field 'shape.{key}' is missing or not an integer")
    if "rows" in data:
        if not isinstance(data["rows"], list):
            raise PlanError(f"{where}: field 'rows' is not a list")
        rows = [dict(r) if isinstance(r, dict) else r for r in data["rows"]]
    else:  # the earlier format: one length, per method; its scorers ran on the per-response schedule
        if not isinstance(data["methods"], dict):
            raise PlanError(f"{where}: field 'methods' is not a mapping of method to times")
        rows = []
        for method, r in data["methods"].items():
            if not isinstance(r, dict):
                raise PlanError(f"{where}: field 'methods.{method}' is not a mapping")
            rows.append({"method": method, "prompt_tokens": data["prompt_tokens"],
                         "completion_length": r.get("completion_length") or data["response_tokens"],
                         "batch": data["batch"], "num_generations": data.get("num_generations", data["batch"]),
                         "chunk_tokens": data.get("chunk_tokens", OARSettings.chunk_tokens), "span_tokens": 1,
                         "window_tokens": data.get("oar_p_window_tokens", OARSettings.window_tokens),
                         "probe": "as_mean",
                         "scorer_schedule": "per_response", "generation_backend": "transformers",
                         "gradient_checkpointing": data.get("gradient_checkpointing", False),
                         "frac_scored": r.get("frac_scored", 0.0 if method == "grpo" else 1.0),
                         **{k: r.get(k) for k in ("generate_s", "score_s", "update_s", "step_s")}})
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise PlanError(f"{where}: field 'rows[{n}]' is not a mapping")
        row.setdefault("batch", data["batch"])
        if not isinstance(row.get("method"), str):
            raise PlanError(f"{where}: field 'rows[{n}].method' is missing or not a string")
        if row["method"] not in CALIBRATED_METHODS:
            raise PlanError(f"{where}: field 'rows[{n}].method': {row['method']!r} is not one of {CALIBRATED_METHODS}")
        unmeasured = row.get("unmeasured", [])
        if not isinstance(unmeasured, list) or not set(unmeasured) <= set(UNMEASURABLE) or (
                unmeasured and row["method"] == "grpo"):
            raise PlanError(f"{where}: field 'rows[{n}].unmeasured': {unmeasured!r} is not a list of "
                            f"{UNMEASURABLE} (and a GRPO row has every phase measured)")
        for key in CALIBRATION_ROW_FIELDS[1:]:
            value = row.get(key)
            if key in unmeasured and value is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise PlanError(f"{where}: field {key!r} of the {row['method']} row (rows[{n}].{key}) is missing "
                                "or not a number >= 0")
        schedule = row.setdefault("scorer_schedule", "per_response")
        if schedule not in SCHEDULES:
            raise PlanError(f"{where}: field 'rows[{n}].scorer_schedule': {schedule!r} is not one of {SCHEDULES}")
    if require_grpo and not any(r["method"] == "grpo" for r in rows):
        raise PlanError(f"{where}: no GRPO row (field 'method' = 'grpo' in no row): the update, generation and "
                        "per-call costs are fitted from GRPO's step")
    return data, rows


def calibrate(paths, base: Hardware) -> Hardware:
    """Sustained rates and fixed costs from one or more ``calibration.json`` files of
    ``perf/gpu_check.py`` (one model shape; the rows of every file together):

    - the update: FLOP rate R and a fixed time U per micro-batch, t = FLOPs / R + U, from the updates at
      two or more lengths (least squares; one length: U = 0, R = FLOPs / t): every row's where the check
      timed it to completion (``update_timing: synchronised...``; the update does not depend on the
      scorer), else GRPO's;
    - generation: the fixed cost of a decode step of the backend that generated (``generation_backend``):
      what its time leaves beside the prefill and the decode's roofline; for transformers' eager
      ``generate`` this is also taken as the fixed cost of one forward call of the trainer's model
      (``call_s``); the first step's, where recorded (``first_generate_s``), from the rows generated
      without cuDNN's attention (``generation_attention: no_cudnn``) where there are such;
    - each scorer: its fixed cost per model call on the schedule it ran on (``scorer_schedule``): what
      its ``score_s`` leaves beside its FLOPs at R, over its model calls (the plan's count, scaled to the
      counted forwards where the file records ``score_forwards``); the rows that scored without cuDNN's
      attention (``scoring_attention: no_cudnn``, the default) where there are such, else the others.

    The FLOP rate replaces the peak (utilisation 1); the decode bandwidth stays the base's assumption (a
    decode of a few sequences is bound by fixed costs and says nothing of bandwidth)."""
    from transformers import Qwen2Config

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise PlanError("--calibration: no file given")
    rows, header, shape_spec = [], None, None
    for path in paths:
        data, file_rows = calibration_rows(path, require_grpo=False)
        spec = {k: v for k, v in sorted(data["shape"].items())}
        if shape_spec is not None and spec != shape_spec:
            raise PlanError(f"--calibration {path}: field 'shape' differs from {paths[0]}'s: the files of one "
                            "calibration must time one model shape")
        shape_spec, header = spec, header or data
        rows += file_rows
    shape = shape_of(Qwen2Config(**shape_spec))
    grpo = [r for r in rows if r["method"] == "grpo"]
    if not grpo:
        raise PlanError(f"--calibration {', '.join(str(p) for p in paths)}: no GRPO row (field 'method' = 'grpo' in "
                        "no row of this shape): the update, generation and per-call costs are fitted from GRPO's step")

    # the update: t = F / R + U over the lengths of the rows whose update was timed to completion (the
    # update is the same work whatever the method scored), else over GRPO's
    complete = [r for r in rows if r.get("update_timing", "").startswith("synchronised") and r["update_s"] > 0]
    points = sorted({(scaled(update_work(shape, r["prompt_tokens"], r["completion_length"], r["batch"],
                                         bool(r.get("gradient_checkpointing")), 0), r["batch"]).flops, r["update_s"])
                     for r in (complete or grpo) if r["update_s"] > 0})
    if not points:
        raise PlanError(f"--calibration {paths[0]}: field 'update_s' of every GRPO row is 0")
    rate, fixed = points[-1][0] / points[-1][1], 0.0
    if len({f for f, _ in points}) >= 2:
        mf = sum(f for f, _ in points) / len(points)
        mt = sum(t for _, t in points) / len(points)
        slope = sum((f - mf) * (t - mt) for f, t in points) / sum((f - mf) ** 2 for f, _ in points)
        if slope > 0 and mt - slope * mf >= 0:
            rate, fixed = 1 / slope, mt - slope * mf
    # the check runs one micro-batch per update: its fixed time is taken per micro-batch (the larger reading)
    measured = dataclasses.replace(base, peak_flops=rate, mfu=1.0, update_fixed_s=fixed)

    # generation: the decode step's fixed cost, for the one backend that generated
    backends = {r.get("generation_backend", "transformers") for r in grpo}
    if len(backends) > 1:
        raise PlanError(f"--calibration: field 'generation_backend' differs between the GRPO rows "
                        f"({sorted(backends)}); calibrate with one backend's rows")
    backend = backends.pop()

    def decode_fixed(r, key):
        gen = generation_work(shape, r["batch"], r["prompt_tokens"], int(round(r["completion_length"])), r["batch"])
        (step_flops, step_bytes, count), = gen.decode
        roof = max(step_flops / measured.flops, step_bytes / measured.bytes_per_s)
        # the prefill is one more call, its fixed cost taken to be a decode step's
        return max(0.0, (r[key] - gen.flops / measured.flops - count * roof) / (count + 1))

    # a length generated for the first time in its process is not a steady generation
    steady = [r for r in grpo if not r.get("generate_first_at_length")] or grpo
    decode_s = statistics.median(decode_fixed(r, "generate_s") for r in steady)
    # A process's first generation to a length ran about 3x its later ones while transformers' generate
    # used cuDNN's attention (a graph built per decoded length); rows generated without it
    # (``generation_attention: no_cudnn``) stand for the first step where a file has them.
    timed_first = _preferred([r for r in rows if r.get("first_generate_s")],
                             lambda r: r.get("generation_attention") == "no_cudnn")
    firsts = [decode_fixed(r, "first_generate_s") for r in timed_first]
    measured = dataclasses.replace(measured, decode_backend=backend, decode_step_s=decode_s,
                                   first_step_decode_s=statistics.median(firsts) if firsts else None,
                                   call_s=decode_s if backend == "transformers" else None)

    # scorers: each one's fixed cost per model call on its schedule, and one sustained scoring rate
    samples = []  # (method and schedule, scored without cuDNN's attention, calls, FLOPs, seconds)
    for r in rows:
        if r["method"] == "grpo" or not r.get("frac_scored"):
            continue
        work = check_scoring_work(shape, r)
        calls = work.calls
        if r.get("score_forwards") and work.forwards:
            calls *= r["score_forwards"] / work.forwards
        key = (calibrated_scorer(r["method"], r.get("grad_prompt", OARSettings.grad_prompt)), r["scorer_schedule"])
        samples.append((key, r.get("scoring_attention", "torch_default") == "no_cudnn", calls, work.flops,
                        r["score_s"]))
    # rows that scored without cuDNN's attention (the default) stand for the scorer where a file has them
    # beside rows with torch's own kernels (perf/gpu_check.py --attention-ab)
    chosen = []
    for key in sorted({k for k, *_ in samples}):
        mine = _preferred([s for s in samples if s[0] == key], lambda s: s[1])
        chosen += [(k, calls, flops, sec) for k, _current, calls, flops, sec in mine]
    scoring_rate, per_call = fit_scoring(chosen, measured.flops)
    measured = dataclasses.replace(measured, scoring_flops=scoring_rate)
    device = header.get("device", "unknown device")
    return dataclasses.replace(measured, name=f"{device} (calibrated)",
                               memory_gb=header.get("memory_gb") or base.memory_gb,
                               measured=f"{', '.join(str(p) for p in paths)} ({device})",
                               scorer_call_s=tuple((m, sched, sec) for (m, sched), sec in sorted(per_call.items())))


def calibrate_by_shape(paths, base: Hardware, require_fit: bool = True) -> dict[str, tuple[Hardware | None, list]]:
    """:func:`calibrate` for each model shape among ``paths`` (files of several shapes): shape name
    (``oar.planning.shapes.shape_name``) -> (its hardware, its files). Without ``require_fit`` a
    shape whose files hold no GRPO row gets no hardware (None): its rows still bound the rates."""
    from transformers import Qwen2Config

    groups: dict[str, list] = {}
    for path in ([paths] if isinstance(paths, (str, Path)) else list(paths)):
        data, rows = calibration_rows(path, require_grpo=False)
        groups.setdefault(shape_name(shape_of(Qwen2Config(**data["shape"]))), []).append((path, rows))
    if not groups:
        raise PlanError("--calibration: no file given")
    fits = {}
    for name, files in groups.items():
        has_grpo = any(r["method"] == "grpo" for _, rows in files for r in rows)
        hw = calibrate([p for p, _ in files], base) if has_grpo or require_fit else None
        fits[name] = (hw, [p for p, _ in files])
    return fits


def _preferred(items: list, current) -> list:
    """The items measured as the code runs now (``current(item)``), where there are such; else all."""
    return [item for item in items if current(item)] or items


def fit_scoring(samples, update_rate: float) -> tuple[float | None, dict]:
    """A scoring call's time as ``calls x c + FLOPs / S``: each scorer's fixed cost per model call ``c``
    (per method and schedule) and one sustained scoring rate ``S`` for every scorer, fitted by least squares
    in relative error over ``samples`` ((method and schedule, calls, FLOPs, seconds) of each row). ``S`` is
    fitted only where some scorer's rows differ in FLOPs per call by 1.5x or more (forwards of different
    sizes: ``chunk_tokens``), else it is the update's ``update_rate`` (returned as None) and each ``c`` the
    median of what its rows leave beside their FLOPs at that rate. A call's fixed cost does not hide behind
    the compute of the calls queued after it: on the H200 a scorer's 8,192-token forwards took their FLOPs'
    time plus their calls' fixed cost, not the larger of the two."""
    import numpy as np

    keys = sorted({k for k, *_ in samples})
    spread = any(max(r) >= 1.5 * min(r) for r in ([f / c for k, c, f, _ in samples if k == key and c > 0]
                                                  for key in keys) if r)
    if spread:
        a = np.array([[c if k == key else 0.0 for key in keys] + [f] for k, c, f, _ in samples])
        t = np.array([sec for *_, sec in samples])
        scale = np.abs(a).max(axis=0)
        weighted = a / scale / t[:, None]  # relative error: every row counts alike, short or long
        if np.linalg.matrix_rank(weighted) == len(keys) + 1:
            x = np.linalg.lstsq(weighted, np.ones_like(t), rcond=None)[0] / scale
            if (x > 0).all():
                return 1.0 / float(x[-1]), {key: float(c) for key, c in zip(keys, x[:-1])}
    return None, {key: statistics.median(max(0.0, sec - f / update_rate) / c if c else 0.0
                                         for k, c, f, sec in samples if k == key) for key in keys}


def check_scoring_work(shape: Shape, row: Mapping, schedule: str | None = None) -> Work:
    """The scoring work of one row of a calibration file (the check's settings), on its own schedule or
    ``schedule``."""
    reasoning, probe = reasoning_probe(row["prompt_tokens"], row["completion_length"])
    keep = 1 if row.get("probe", OARSettings.probe) == "lt_logits" else Assumptions.answer_tokens + 1
    oar = {name: row.get(name, getattr(OARSettings, name))
           for name in ("chunk_tokens", "grad_chunk_tokens", "span_tokens", "window_tokens", "grad_prompt")}
    return scoring_work(shape, row["method"], oar, row["prompt_tokens"], reasoning, probe, keep,
                        row["batch"] * row.get("frac_scored", 1.0), row.get("num_generations", row["batch"]),
                        schedule or row.get("scorer_schedule", "per_response"))


def check_settings(row: Mapping, run_id: str = "check") -> dict:
    """``Registry.run_settings``-like settings of one calibration row (the check's own), for
    ``oar.planning.gpu_hours.step_plan`` with ``Assumptions(prompt_tokens=row's, completion_fill=1, ...)``."""
    return {"run_id": run_id, "method": row["method"],
            "oar": {**{name: row.get(name, getattr(OARSettings, name))
                       for name in ("chunk_tokens", "grad_chunk_tokens", "span_tokens", "window_tokens", "probe",
                                    "grad_prompt")},
                    "score_all": True},
            "trainer": {"max_completion_length": row["completion_length"], "per_device_train_batch_size": row["batch"],
                        "gradient_accumulation_steps": 1, "num_generations": row.get("num_generations", row["batch"]),
                        "gradient_checkpointing": row.get("gradient_checkpointing", False), "use_vllm":
                        row.get("generation_backend", "transformers") == "vllm", "beta": 0.0}}
