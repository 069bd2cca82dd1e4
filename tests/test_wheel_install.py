"""The package as a user installs it: the wheel built from this tree (not an editable install), installed
into a fresh environment on the Python that runs the suite (3.11 in CI) beside torch 2.13.0 with the newest
releases its ranges admit (the high end of every range but torch's; the low end, constraints.txt, is what
the rest of the suite runs on), then the example of docs/library.md trains with it from outside the source
tree. The other Pythons of the range and its newest torch are `make test-install-matrix`'s
(perf/install_matrix.py): their wheels are downloads of several GB.

Needs the package index (``network``); about 4 minutes on 2 cores with pip's cache warm, most of it
installing and the example's two training steps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from test_examples import run_example, scored_and_reshaped, step_metrics

pytestmark = [pytest.mark.network, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def pip(python: Path, *args: str, timeout: int = 1200) -> str:
    # Without the suite's PYTHONPATH: pip would find this tree's oar_trl.egg-info on it (left by a build of
    # the tree's metadata, as tests/test_install.py's resolutions make) and take the wheel as installed.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def build_wheel(out: Path) -> Path:
    """The wheel of a copy of the files a release holds (the build leaves nothing in this tree)."""
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "oar", source / "oar", ignore=shutil.ignore_patterns("__pycache__"))
    pip(Path(sys.executable), "wheel", "--no-deps", "--quiet", "-w", str(out), str(source))
    (wheel,) = out.glob("oar_trl-*.whl")
    return wheel


@pytest.mark.timeout(2400)
def test_the_wheel_installs_beside_torch_and_trains_the_example(tiny_model_dir, tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "oar/py.typed" in names and "oar/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "config/", "workflow_scripts/"))]
    assert not [n for n in names if n.startswith(("oar/experiment/", "oar/planning/"))]  # the clone's (pyproject)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    pip(python, "install", "--quiet", "torch==2.13.0")  # first, as a user with their own torch would have it
    pip(python, "install", "--quiet", str(wheel))  # no constraints: the newest release inside every range
    installed = {item["name"].lower(): item["version"]
                 for item in json.loads(pip(python, "list", "--format", "json"))}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ends = {}
    for line in project["dependencies"]:
        requirement = Requirement(line.split("#")[0])
        version = installed[requirement.name.lower()]
        assert requirement.specifier.contains(version.split("+")[0]), (requirement, version)
        ends[requirement.name] = version
    assert installed["oar-trl"] == project["version"] and installed["torch"].startswith("2.13.0")
    assert not {"snakemake", "vllm", "matplotlib", "jsonschema"} & set(installed)  # the library alone
    print("high ends installed:", ends)

    where = subprocess.run([str(python), "-c", "import oar, sys; print(oar.__file__, 'torch' in sys.modules)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}).stdout.split()  # a user's shell
    assert where[0].startswith(str(venv)) and where[1] == "False"  # the installed package; cheap to import
    out = tmp_path / "out"
    steps = step_metrics(run_example("train_with_trl.py", tiny_model_dir, out, python=str(python), cwd=tmp_path))
    assert scored_and_reshaped(steps), steps
    assert "**Method: `oar_g`**" in (out / "README.md").read_text()
