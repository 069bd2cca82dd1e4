"""What the calibration rows measured, and how far a plan may lean on it: no phase runs faster than any row
ran, and a phase at a shape, batch or parallelism that no row measured is marked extrapolated, with the
rule that carried a rate to it and the row that would measure it.

Each row of a ``calibration.json`` (``perf/gpu_check.py``) gives, by the cost model's FLOPs over its
measured seconds, an achieved rate for its update (per micro-batch of its size) and its scoring (per model
call of its size, per scorer and prompt layout): ``measurements``. A plan's phase is then

- **measured** when rows of its kind ran at its shape, with its gradient checkpointing, on one process,
  at a work per call (or micro-batch) within the sizes they ran: the fit stands;
- **extrapolated** otherwise, and each reason is named. Its rate is capped at the fastest any row of its
  kind achieved (the update's: every row's update; scoring's: every scorer's, at any shape) for the low
  and central plans, and at the rate of the row most like it (its kind and scorer at its shape where
  there is one, else at another; of those within 10% of the largest work a call, the slowest) for the
  high plan.

Rates carry from one shape to another by one rule only (``CARRY``): between the Qwen2 decoders of 28
layers (Qwen2.5-1.5B and -7B), whose model calls launch the same kernels; a planned model of any other shape
needs rows of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oar.planning.memory_plan import PlanError
from oar.planning.shapes import QWEN_SHAPES, shape_name

CARRY = "Qwen2 decoders of 28 layers (Qwen2.5-1.5B and -7B): the same kernels and launches a model call"
# the preflight command that would measure a phase of a shape (perf/gpu_check.py, one GPU)
PREFLIGHT = "make gpu-preflight GPU_PREFLIGHT_ARGS='--shape {shape} --methods {method}'"


def carries(source: str, target: str) -> bool:
    """Whether rates measured at shape ``source`` may stand for shape ``target`` (capped)."""
    return source == target or (source in QWEN_SHAPES and target in QWEN_SHAPES)


@dataclass(frozen=True)
class Measurement:
    """One phase of one calibration row: its achieved rate and the size of its work."""

    kind: str  # "update" or "scoring"
    scorer: str  # the calibrated scorer ("oar_p", "oar_g", "oar_g inline"); "" for the update
    shape: str
    rate: float  # FLOP/s
    work: float  # FLOPs per micro-batch (update) or per model call (scoring)
    checkpointing: bool
    row: str  # file and row


def measurements(paths: Iterable) -> list[Measurement]:
    """Every row's update (timed to completion, or GRPO's) and scoring, by the cost model's FLOPs."""
    from transformers import Qwen2Config

    from oar.planning.calibration import calibration_rows, check_scoring_work
    from oar.planning.cost_model import calibrated_scorer, scaled, update_work
    from oar.planning.shapes import shape_of
    from oar.training.settings import OARSettings

    found = []
    for path in paths:
        data, rows = calibration_rows(path, require_grpo=False)
        shape = shape_of(Qwen2Config(**data["shape"]))
        name = shape_name(shape)
        for n, r in enumerate(rows):
            label = f"{path}: {r.get('row') or r['method'] + '-' + str(int(r['completion_length']))}"
            checkpointing = bool(r.get("gradient_checkpointing"))
            timed = r.get("update_s") and (r["method"] == "grpo" or r.get("update_timing", "").startswith("synch"))
            if timed:
                flops = scaled(update_work(shape, r["prompt_tokens"], r["completion_length"], r["batch"], checkpointing,
                                           0), r["batch"]).flops
                found.append(Measurement("update", "", name, flops / r["update_s"], flops, checkpointing, label))
            if r["method"] != "grpo" and r.get("frac_scored") and r["score_s"] > 0:
                work = check_scoring_work(shape, r)
                calls = r.get("score_forwards") and work.forwards and work.calls * r["score_forwards"] / work.forwards
                scorer = calibrated_scorer(r["method"], r.get("grad_prompt", OARSettings.grad_prompt))
                found.append(Measurement("scoring", scorer, name, work.flops / r["score_s"],
                                         work.flops / (calls or work.calls), checkpointing, label))
    return found


@dataclass(frozen=True)
class Verdict:
    """How a plan's phase stands against the rows."""

    extrapolated: tuple  # the reasons; empty: measured
    fast: float | None  # the fastest rate any row of the phase's kind achieved
    slow: float | None  # the rate of the row most like it
    like: str  # that row
    to_measure: str  # what would measure it (empty when measured)

    def cap(self, scenario: str) -> float | None:
        return self.slow if scenario == "high" and self.extrapolated else self.fast


def verdict(found: list[Measurement], kind: str, scorer: str, shape: str, work: float, checkpointing: bool,
            processes: int, method: str) -> Verdict:
    """The phase ``kind`` (of ``scorer``) of a plan at ``shape``, ``work`` FLOPs per micro-batch or call."""
    of_kind = [m for m in found if m.kind == kind]
    if not of_kind:
        return Verdict((f"no row timed {kind}",), None, None, "", PREFLIGHT.format(shape=shape, method=method))
    own = [m for m in of_kind if m.scorer == scorer]
    at_shape = [m for m in own if m.shape == shape]
    reasons = []
    if not own:
        reasons.append(f"no row of {scorer}")
    elif not at_shape:
        reasons.append(f"shape {shape} (measured: {', '.join(sorted({m.shape for m in own}))}; rule: {CARRY})")
    else:
        sizes = [m.work for m in at_shape]
        if not min(sizes) * 0.999 <= work <= max(sizes) * 1.001:
            unit = "a micro-batch" if kind == "update" else "a model call"
            spread = max(sizes) > 1.001 * min(sizes)
            measured = f"{min(sizes) / 1e12:,.1f}" + (f"-{max(sizes) / 1e12:,.1f}" if spread else "")
            reasons.append(f"{work / 1e12:,.1f} TFLOP {unit} (measured {measured})")
        # the scorers run the model in eval mode, where checkpointing does nothing (oar.method.importance.score)
        if kind == "update" and checkpointing and not any(m.checkpointing for m in at_shape):
            reasons.append("gradient checkpointing (measured without)")
    if processes > 1 and kind == "update":
        reasons.append(f"{processes} processes under FSDP (measured on one GPU: no collective timed)")
    # the row most like it: of its kind and scorer, at its shape where there is one, the largest work a call
    # (within 10%), and of those the slowest
    pool = at_shape or own or of_kind
    largest = max(m.work for m in pool)
    nearest = min((m for m in pool if m.work >= 0.9 * largest), key=lambda m: m.rate)
    to_measure = ""
    if reasons:
        to_measure = (PREFLIGHT.format(shape=shape, method=method) if not at_shape or kind == "scoring"
                      else PREFLIGHT.format(shape=shape, method="grpo"))
        if processes > 1 and kind == "update":
            to_measure += f"; the collectives: a {processes}-GPU FSDP step (not a one-GPU preflight row)"
    return Verdict(tuple(reasons), max(m.rate for m in of_kind), nearest.rate, nearest.row, to_measure)


def capped_seconds(seconds: float, flops: float, cap: float | None) -> float:
    """A phase's planned seconds, no faster than ``cap`` FLOP/s allows."""
    return seconds if not cap or not flops else max(seconds, flops / cap)


def check_carry(calibrated: Mapping[str, str], planned: Mapping[str, str]) -> None:
    """Each planned model's shape (model -> shape) must be calibrated, or carried by ``CARRY`` from a
    calibrated shape (shape -> the file that measured it); else stop naming the file and the model."""
    for model, shape in planned.items():
        if shape in calibrated or any(carries(s, shape) for s in calibrated):
            continue
        files = ", ".join(f"{path} ({s})" for s, path in calibrated.items())
        raise PlanError(f"--calibration {files}: no rule carries these rates to model {model}'s shape ({shape}); "
                        f"rates carry only between {CARRY.split(':')[0]}. Calibrate on that shape "
                        "(perf/gpu_check.py), or plan it without --calibration")
