"""Moved: the calibration's check out of sample is ``python -m oar.planning.calibration_check`` (the
planner is its own package, oar.planning).

This module only says so, to an old command or import; it imports nothing of the planner."""

import sys

MOVED = "oar.experiment.calibration_check has moved: run python -m oar.planning.calibration_check (the same options)"
if __name__ != "__main__":
    raise ImportError(MOVED)
sys.exit(f"error: {MOVED}")
