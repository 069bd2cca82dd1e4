"""The tested set installs: constraints.txt pins a version inside each of pyproject.toml's ranges and
envs/oar.yaml repeats it; pip's resolver (``pip install --dry-run --ignore-installed``, under
constraints.txt as ``make`` installs) on the base install, the ``workflow`` and ``test`` extras, the ``gpu`` extra
(vLLM), the cluster's environment of
``make setup-gpu`` (``.[gpu,workflow]``, here and, wheels only, for Linux x86_64 as on a GPU node: CUDA
torch) and the pip section of ``envs/oar.yaml``. Nothing is installed. The resolver needs the package index: these
tests carry the
``network`` marker (``pytest -m "not network"`` leaves them out offline). The GPU resolutions fetch
vLLM's dependency metadata; the first run downloads several hundred MB of wheels into pip's cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV_FILE = ROOT / "envs" / "oar.yaml"
CONSTRAINTS = ROOT / "constraints.txt"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_pins() -> dict[str, str]:
    """The tested set, name -> version: constraints.txt (what ``make`` installs over pyproject's ranges)."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
            assert m, f"constraints.txt: {line!r} is not name==version"
            pins[canonical(m.group(1))] = m.group(2)
    return pins


def pyproject_requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [r.split("#")[0].strip() for r in
            project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]]


def test_every_range_admits_the_tested_version_and_every_requirement_is_pinned():
    """Offline: each of pyproject.toml's requirements has its version in constraints.txt, inside its range,
    and constraints.txt pins nothing the project does not require."""
    from packaging.requirements import Requirement

    pins = pyproject_pins()
    required = set()
    for line in pyproject_requirements():
        requirement = Requirement(line)
        name = canonical(requirement.name)
        required.add(name)
        assert name in pins, f"{name} has no tested version in constraints.txt"
        assert requirement.specifier.contains(pins[name]), (name, str(requirement.specifier), pins[name])
        assert requirement.specifier, f"{name}: give it a range (its tested version is {pins[name]})"
    assert set(pins) == required, set(pins) ^ required


def env_pip_requirements() -> list[str]:
    deps = yaml.safe_load(ENV_FILE.read_text())["dependencies"]
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    return pip


class IndexLacks(Exception):
    """The package index has no distribution of a package the project does not pin itself (a partial
    mirror): the resolution cannot be judged here."""


def resolve(*args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """name -> version that pip would install for ``args``, resolved as on an empty environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", "-", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, cwd=ROOT, env=env)
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location"))
    missing = re.search(r"No matching distribution found for ([A-Za-z0-9_.-]+)", errors)
    if proc.returncode and missing and canonical(missing.group(1)) not in pyproject_pins():
        raise IndexLacks(missing.group(0))
    assert proc.returncode == 0, f"{' '.join(args)} does not resolve:\n{errors[-4000:]}"
    report = json.loads(proc.stdout)
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


def gpu_requirements() -> list[str]:
    """The project's requirements with its gpu extra, at their tested versions: the platform-specific part
    of ``make setup-gpu``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [r.split("#")[0].strip() for r in project["dependencies"] + project["optional-dependencies"]["gpu"]]
    return reqs + [f"-c {CONSTRAINTS}"]


# A GPU node: Linux x86_64, CPython 3.11, wheels only (pip's condition for resolving for another platform;
# the workflow extra, pure Python with source-only dependencies, is resolved with the rest above). Only the
# package index is used, not this machine's pip configuration (local CPU wheels, constraints).
LINUX_X86_64 = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"]
LINUX_CUDA_ARGS = ["--target", "{target}", *(f"--platform={p}" for p in LINUX_X86_64), "--python-version", "3.11",
                   "--implementation", "cp", "--abi", "cp311", "--only-binary=:all:", "-r", "{gpu_requirements}"]


def index_only_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_CONSTRAINT")}
    return env | {"PIP_CONFIG_FILE": os.devnull}


def assert_pinned(resolved: dict[str, str], names: list[str]) -> None:
    pins = pyproject_pins()
    for name in names:
        # a local CPU build of torch reads 2.13.0+cpu: the same release
        assert resolved[name].split("+")[0] == pins[name], (name, resolved[name], pins[name])


def test_env_file_repeats_the_project_pins():
    """envs/oar.yaml pins what pyproject.toml pins (offline check)."""
    pins = pyproject_pins()
    env = {}
    for req in env_pip_requirements():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", req)
        if m:
            env[canonical(m.group(1))] = m.group(2)
    # the test tools and the optional TensorBoard logger are not part of the cluster's environment
    tools = ("pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "snakefmt", "ruff", "mypy", "peft",
             "tensorboard")
    wanted = {k: v for k, v in pins.items() if k not in tools}
    assert env == wanted


# The four resolutions run at once (each mostly waits on the index), in a module-scoped pool: the
# tests take about as long as the slowest one rather than their sum.
PIN = ["-c", str(CONSTRAINTS)]
TARGETS = {
    "base": [*PIN, "."],
    "workflow_test": [*PIN, ".[workflow,test,tensorboard]"],
    "gpu": [*PIN, ".[gpu]"],
    "setup_gpu": [*PIN, ".[gpu,workflow]"],
    "env": ["-r", "{env_requirements}"],
    "linux_cuda": LINUX_CUDA_ARGS,
}


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("env")
    paths = {"env_requirements": folder / "requirements.txt", "gpu_requirements": folder / "gpu.txt",
             "target": folder / "target"}
    paths["env_requirements"].write_text("\n".join(env_pip_requirements()) + "\n")
    paths["gpu_requirements"].write_text("\n".join(gpu_requirements()) + "\n")
    pool = ThreadPoolExecutor(max_workers=len(TARGETS))
    futures = {name: pool.submit(resolve, *[a.format(**paths) for a in args],
                                 env=index_only_env() if name == "linux_cuda" else None)
               for name, args in TARGETS.items()}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_base_install_resolves(resolutions):
    resolved = resolutions["base"].result()
    assert_pinned(resolved, ["torch", "transformers", "trl", "numpy", "scipy"])
    # the library alone: no workflow, analysis or GPU stack
    assert not {"snakemake", "vllm", "matplotlib", "jsonschema", "gguf"} & set(resolved)


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_workflow_and_test_extras_resolve(resolutions):
    resolved = resolutions["workflow_test"].result()
    assert_pinned(resolved, ["snakemake", "snakemake-executor-plugin-slurm", "numpy", "pandas", "pytest", "tensorboard",
                             "matplotlib", "jsonschema"])


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_gpu_extra_resolves(resolutions):
    resolved = resolutions["gpu"].result()
    assert_pinned(resolved, ["vllm", "torch", "transformers", "numpy"])


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_conda_env_pip_section_resolves(resolutions):
    resolved = resolutions["env"].result()
    assert_pinned(resolved, ["vllm", "snakemake", "snakemake-executor-plugin-slurm", "numpy", "pandas", "torch"])


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_setup_gpu_set_resolves(resolutions):
    """What `make setup-gpu` installs, resolved on this platform."""
    resolved = resolutions["setup_gpu"].result()
    assert_pinned(resolved, ["vllm", "torch", "transformers", "trl", "snakemake", "snakemake-executor-plugin-slurm",
                             "numpy", "pandas"])


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_gpu_set_resolves_for_a_linux_cuda_node(resolutions):
    try:
        resolved = resolutions["linux_cuda"].result()
    except IndexLacks as lack:
        pytest.skip(f"this package index is incomplete for Linux x86_64 CUDA wheels: {lack}")
    assert_pinned(resolved, ["vllm", "torch", "transformers", "trl", "numpy"])
    assert resolved["torch"] == "2.13.0"  # PyPI's CUDA build, not a +cpu local build
    assert any(name.startswith("nvidia-") for name in resolved), "no CUDA libraries: not a CUDA torch"
