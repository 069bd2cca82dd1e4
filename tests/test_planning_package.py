"""The planner as its own package: the old commands say where it went, and the wheel leaves out what runs
from a clone only (the registry and the planner), keeping the library and the benchmark."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", ["memory_plan", "cost_plan", "calibration_check"])
def test_an_old_command_exits_naming_the_new_one(command):
    proc = subprocess.run([sys.executable, "-m", f"oar.experiment.{command}", "--config", "config/paper.yaml"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: oar.experiment.{command} has moved: run python -m oar.planning.{command} (the same options)"]
    with pytest.raises(ImportError, match=f"python -m oar.planning.{command}"):
        __import__(f"oar.experiment.{command}")


def test_the_wheel_leaves_out_the_registry_and_the_planner():
    """setuptools' package search as pyproject.toml configures it (tests/test_wheel_install.py builds the
    wheel itself, with the network)."""
    from setuptools import find_packages

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(str(ROOT), include=found["include"], exclude=found["exclude"]))
    assert {"oar", "oar.training", "oar.method", "oar.bench", "oar.analysis"} <= shipped
    assert not {p for p in shipped if p.split(".")[:2] in (["oar", "experiment"], ["oar", "planning"])}
