"""Moved: the cost plan is ``python -m oar.planning.cost_plan`` (the planner is its own package, oar.planning).

This module only says so, to an old command or import; it imports nothing of the planner."""

import sys

MOVED = "oar.experiment.cost_plan has moved: run python -m oar.planning.cost_plan (the same options)"
if __name__ != "__main__":
    raise ImportError(MOVED)
sys.exit(f"error: {MOVED}")
