"""Peak memory of the training process, and of one phase of a step (the importance scoring).

A process-lifetime peak cannot say what scoring costs: the policy update's peak hides it. So the
tracker resets the peak counter at the start of a phase, reads it at the end, and keeps the process
peak itself across resets. On GPU the counter is the CUDA allocator's peak (bytes allocated); on CPU it
is the resident set's high-water mark, reset through ``/proc/self/clear_refs`` (Linux); where that
cannot be written, phase peaks are NaN (unknown) rather than the process peak passed off as one.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RESET_PEAK_RSS = "5"  # clear_refs code that resets VmHWM to the current RSS (Linux >= 4.0)


def _rss_high_water_mb() -> float:
    """VmHWM (peak RSS since start or the last reset); ru_maxrss where /proc is missing."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_rss_high_water() -> bool:
    try:
        _CLEAR_REFS.write_text(_RESET_PEAK_RSS)
        return True
    except OSError:
        return False


@dataclass
class PhasePeak:
    """Filled in when the phase ends: its peak in MiB (NaN when the counter could not be reset)."""

    mb: float = math.nan


class PeakMemory:
    """Process peak and per-phase peaks, in MiB, on the current CUDA device or else the CPU."""

    def __init__(self) -> None:
        self._process_peak_mb = 0.0

    @staticmethod
    def _counter_mb() -> float:
        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2**20
        return _rss_high_water_mb()

    def process_peak_mb(self) -> float:
        """Largest peak seen by this tracker or by the counter since its last reset."""
        self._process_peak_mb = max(self._process_peak_mb, self._counter_mb())
        return self._process_peak_mb

    @contextmanager
    def phase(self) -> Iterator[PhasePeak]:
        """``with tracker.phase() as peak: ...``; ``peak.mb`` is the peak within the block."""
        self.process_peak_mb()  # fold the peak so far in before the counter is reset
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
            reset = True
        else:
            reset = _reset_rss_high_water()
        peak = PhasePeak()
        try:
            yield peak
        finally:
            if reset:
                peak.mb = self._counter_mb()
            self.process_peak_mb()
