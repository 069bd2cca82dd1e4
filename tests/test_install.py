"""The pinned installs resolve: pip's resolver (``pip install --dry-run --ignore-installed``) on the base
install, the ``workflow`` and ``test`` extras, the ``gpu`` extra (vLLM) and the pip section of
``envs/oar.yaml``. Nothing is installed. The resolver needs the package index: these tests carry the
``network`` marker (``pytest -m "not network"`` leaves them out offline). The GPU resolutions fetch
vLLM's dependency metadata; the first run downloads several hundred MB of wheels into pip's cache."""

from __future__ import annotations

import json
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


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_pins() -> dict[str, str]:
    """Exact pins (name -> version) of pyproject.toml, extras included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for req in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^\s;#]+)", req.split("#")[0].strip())
        if m:
            pins[canonical(m.group(1))] = m.group(2)
    return pins


def env_pip_requirements() -> list[str]:
    deps = yaml.safe_load(ENV_FILE.read_text())["dependencies"]
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    return pip


def resolve(*args: str) -> dict[str, str]:
    """name -> version that pip would install for ``args``, resolved as on an empty environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", "-", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, cwd=ROOT)
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location"))
    assert proc.returncode == 0, f"{' '.join(args)} does not resolve:\n{errors[-4000:]}"
    report = json.loads(proc.stdout)
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


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
    wanted = {k: v for k, v in pins.items() if k not in ("pytest", "pytest-timeout", "hypothesis", "snakefmt")}
    assert env == wanted


# The four resolutions run at once (each mostly waits on the index), in a module-scoped pool: the
# tests take about as long as the slowest one rather than their sum.
TARGETS = {
    "base": ["."],
    "workflow_test": [".[workflow,test]"],
    "gpu": [".[gpu]"],
    "env": ["-r", "{env_requirements}"],
}


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    requirements = tmp_path_factory.mktemp("env") / "requirements.txt"
    requirements.write_text("\n".join(env_pip_requirements()) + "\n")
    pool = ThreadPoolExecutor(max_workers=len(TARGETS))
    futures = {name: pool.submit(resolve, *[a.format(env_requirements=requirements) for a in args])
               for name, args in TARGETS.items()}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_base_install_resolves(resolutions):
    resolved = resolutions["base"].result()
    assert_pinned(resolved, ["torch", "transformers", "trl", "numpy", "pandas"])
    assert "snakemake" not in resolved and "vllm" not in resolved


@pytest.mark.network
@pytest.mark.timeout(1200)
def test_workflow_and_test_extras_resolve(resolutions):
    resolved = resolutions["workflow_test"].result()
    assert_pinned(resolved, ["snakemake", "snakemake-executor-plugin-slurm", "numpy", "pandas", "pytest"])


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
