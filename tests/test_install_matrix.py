"""Where the package installs: pyproject.toml's Python and dependency ranges agree with the install matrix
docs/library.md quotes (perf/install_matrix.py, `make test-install-matrix`), the wheel's modules stay
within the lowest Python the range admits, and the matrix script's own checks."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

pytestmark = pytest.mark.quick
ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RANGES = {Requirement(line.split("#")[0]).name: Requirement(line.split("#")[0]).specifier
          for line in PROJECT["dependencies"]}
PINS = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#"))

_spec = importlib.util.spec_from_file_location("install_matrix", ROOT / "perf" / "install_matrix.py")
matrix = importlib.util.module_from_spec(_spec)
sys.modules["install_matrix"] = matrix  # dataclasses look their module up
_spec.loader.exec_module(matrix)

LOWEST_PYTHON = Version(next(s.version for s in SpecifierSet(PROJECT["requires-python"])
                             if s.operator == ">=")).release[:2]
SHOWN = {"torch": "torch", "transformers": "transformers", "TRL": "trl", "accelerate": "accelerate"}


def documented_rows() -> list[dict[str, str]]:
    text = (ROOT / "docs" / "library.md").read_text()
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    return matrix.parse_markdown(install)


def minor(version: str) -> tuple[int, int]:
    return Version(version.split("+")[0]).release[:2]


def upper(specifier: SpecifierSet) -> tuple[int, int]:
    """The release a `<X.Y` bound stops before."""
    (bound,) = [s.version for s in specifier if s.operator == "<"]
    return Version(bound).release[:2]


def test_every_python_the_range_admits_is_a_classifier_and_a_passing_row_of_the_matrix():
    rows = [row for row in documented_rows() if row["result"] == "pass"]
    assert rows, "docs/library.md's Install section has no install matrix"
    admitted = SpecifierSet(PROJECT["requires-python"])
    (low,) = [s.version for s in admitted if s.operator == ">="]
    lowest, stop = Version(low).release[:2], upper(admitted)
    pythons = [f"3.{n}" for n in range(lowest[1], stop[1])]
    assert all(admitted.contains(f"{p}.0") for p in pythons) and not admitted.contains(f"3.{lowest[1] - 1}.9")
    classifiers = {c.rsplit(" ", 1)[1] for c in PROJECT["classifiers"] if re.fullmatch(r".*:: 3\.\d+", c)}
    assert classifiers == set(pythons)
    assert {".".join(row["Python"].split(".")[:2]) for row in rows} == set(pythons)


@pytest.mark.parametrize("column", SHOWN)
def test_each_end_of_a_range_was_run(column):
    """Every version the matrix ran lies in its range; the range's top minor release was run there, and its
    low end either is constraints.txt's pin (the whole suite's set) or was run in the matrix."""
    name, rows = SHOWN[column], [row for row in documented_rows() if row["result"] == "pass"]
    ran = {row[column] for row in rows}
    assert ran and all(RANGES[name].contains(v.split("+")[0]) for v in ran), (name, ran, RANGES[name])
    stop = upper(RANGES[name])
    assert max(minor(v) for v in ran) == (stop[0], stop[1] - 1), (name, ran, RANGES[name])
    (low,) = [s.version for s in RANGES[name] if s.operator == ">="]
    assert PINS[name] == low or low in {v.split("+")[0] for v in ran}, (name, low, ran)


def test_the_wheels_modules_stay_within_the_lowest_python():
    """The wheel's modules (oar/ without the clone-only oar.experiment and oar.planning) parse with the
    lowest Python's grammar and use no standard-library name that came later."""
    later = re.compile(r"\bimport tomllib\b|\bdatetime\.UTC\b|from datetime import [^\n]*\bUTC\b|\bStrEnum\b"
                       r"|from typing import [^\n]*\b(Self|Never|assert_never|LiteralString|Required|NotRequired)\b"
                       r"|\bTaskGroup\b|\bfile_digest\b|\bExceptionGroup\b|\bcontextlib\.chdir\b|\bbatched\("
                       r"|\.add_note\(|\bexcept\*")
    offenders = []
    for path in sorted((ROOT / "oar").rglob("*.py")):
        if path.relative_to(ROOT).parts[1] in ("experiment", "planning"):
            continue
        source = path.read_text()
        ast.parse(source, filename=str(path), feature_version=LOWEST_PYTHON)
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in later.finditer(source)]
    assert not offenders


def test_the_matrix_checks_each_method_by_its_logged_steps():
    reshaped = [{"step": 1, "oar/frac_scored": 0.5, "oar/ess_ratio": 0.8}, {"step": 2, "oar/frac_scored": 0.0,
                                                                             "oar/ess_ratio": None}]
    flat = [{"step": 1, "oar/frac_scored": 0.5, "oar/ess_ratio": 1.0}, {"step": 2, "oar/frac_scored": 0.5,
                                                                        "oar/ess_ratio": 1.0}]
    plain = [{"step": 1, "oar/frac_scored": None}, {"step": 2, "oar/frac_scored": None}]
    assert matrix.trained_as("oar_g", reshaped) is None and matrix.trained_as("oar_p", reshaped) is None
    assert matrix.trained_as("oar_g", flat) and matrix.trained_as("oar_g", reshaped[:1])
    assert matrix.trained_as("grpo", plain) is None and matrix.trained_as("grpo", reshaped)
    line = "{'step': 1, 'reward': 0.1, 'oar/frac_scored': 0.5, 'oar/ess_ratio': 0.8, 'time/score_s': 0.1}"
    assert matrix.step_lines(f"noise\n{line}\n") == [ast.literal_eval(line)]


def test_the_matrix_flags_a_version_outside_its_range_and_reads_back_its_table():
    inside = {name: (PINS.get(name) or str(next(s.version for s in spec if s.operator == ">=")))
              for name, spec in RANGES.items()}
    assert matrix.out_of_range({**inside, "torch": "2.13.0+cpu"}) == []
    assert [w.split()[0] for w in matrix.out_of_range({**inside, "trl": "1.17.0"})] == ["trl"]
    assert [w.split()[0] for w in matrix.out_of_range({k: v for k, v in inside.items() if k != "scipy"})] == ["scipy"]
    cells = [matrix.Cell("3.13.0", "newest", {"torch": "2.15.0", "trl": "1.16.0"}, seconds=12.3),
             matrix.Cell("3.10.13", "low", {"torch": "2.13.0"}, failed_step="train oar_p")]
    rows = matrix.parse_markdown("| package | range |\n|---|---|\n| torch | <2.16 |\n\n" + matrix.markdown(cells)
                                 + "\nafter the table\n| a | b |")
    assert [(r["Python"], r["torch"], r["TRL"], r["result"], r["seconds"]) for r in rows] == [
        ("3.10.13", "2.13.0", "-", "FAIL: train oar_p", "0"), ("3.13.0", "2.15.0", "1.16.0", "pass", "12")]
