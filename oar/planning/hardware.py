"""The hardware a cost plan times its work on: per GPU kind, peak figures (vendor data sheets, dense
bf16) and the share of them assumed sustained, or the sustained rates and fixed costs measured by
``perf/gpu_check.py`` (:func:`oar.planning.calibration.calibrate`).

Each model call also costs a fixed time (kernel launches, Python, small memory-bound kernels): what
dominates small models, CPUs, and eager transformers forwards on a GPU. It adds to the call's compute:
on the H200 it did not hide behind the compute of the calls queued after it, even without host
synchronisations between them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from oar.planning.memory_plan import PlanError


@dataclass(frozen=True)
class Hardware:
    """Peak figures (vendor data sheets, dense bf16) and the share of them assumed sustained, or the
    sustained figures and fixed costs measured by ``perf/gpu_check.py`` (``oar.planning.calibration``)."""

    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s of GPU memory
    memory_gb: float
    mfu: float = 0.4  # assumed: sustained share of peak FLOP/s in training matmuls
    bandwidth_util: float = 0.65  # assumed: sustained share of bandwidth in a decode step
    layer_overhead_s: float = 20e-6  # assumed: fixed time per layer per forward call (a dozen kernel launches)
    measured: str = ""  # where the sustained figures come from when calibrated
    # Measured fixed costs (None: layers x layer_overhead_s per call, nothing per update)
    call_s: float | None = None  # one eager transformers forward call (the trainer's: prefill, scoring, update)
    update_fixed_s: float | None = None  # per update micro-batch beyond its FLOPs (backward, clipping, AdamW, launches)
    decode_backend: str = ""  # the generation backend the decode calibration was measured with
    decode_step_s: float | None = None  # that backend's fixed cost per decode step
    first_step_decode_s: float | None = None  # the same in a run's first step (allocator and kernel warm-up)
    # fixed cost per model call of each scorer, measured from score_s, and the schedule it was measured on
    scorer_call_s: tuple = ()  # ((method, schedule, seconds), ...)
    # the scorers' sustained FLOP rate, fitted beside their per-call costs from forwards of two or more
    # sizes (None: the update's)
    scoring_flops: float | None = None

    @property
    def flops(self) -> float:
        return self.peak_flops * self.mfu

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth * self.bandwidth_util

    def fixed_call_s(self, layers: int) -> float:
        """Fixed cost of one eager forward (or backward) call of a model of ``layers`` layers."""
        return self.call_s if self.call_s is not None else layers * self.layer_overhead_s

    def scorer_call(self, method: str, schedule: str) -> float | None:
        """The measured fixed cost per model call of ``method``'s scorer run on ``schedule``, if any."""
        for m, sched, seconds in self.scorer_call_s:
            if m == method and sched == schedule:
                return seconds
        return None


HARDWARE = {
    "a100": Hardware("A100 80GB SXM", 312e12, 2.0e12, 80),
    "h100": Hardware("H100 SXM", 989e12, 3.35e12, 80),
    "h200": Hardware("H200", 989e12, 4.8e12, 141),
}


def hardware(name: str, **overrides) -> Hardware:
    if name not in HARDWARE:
        raise PlanError(f"--hardware: {name!r} is not one the plan knows ({', '.join(HARDWARE)})")
    return dataclasses.replace(HARDWARE[name], **{k: v for k, v in overrides.items() if v is not None})
