"""The install matrix: the wheel built from this tree, installed into a fresh environment on each Python
and each end of the torch range, trains the example of docs/library.md with GRPO, OAR-G and OAR-P.

    PYTHONPATH=$PWD .venv/bin/python perf/install_matrix.py      # `make test-install-matrix`

A cell is one Python and one torch: ``low`` is the range's low end (pyproject.toml's ``torch>=``), ``newest``
the newest torch inside the range that has a wheel for that Python. In a new virtual environment the cell
installs that torch first (as a user with their own torch has it), then the wheel with no constraints, so
pip picks the newest transformers, TRL, accelerate and the rest inside pyproject.toml's ranges that this
Python can take, checks that every installed version lies inside its range, imports ``oar`` from outside
the source tree, and trains ``examples/train_with_trl.py`` for two steps on a tiny random model with each
method. One row a cell: the versions installed, pass or the step that failed, seconds. The table goes to
``--out`` (``matrix.md``, with ``matrix.json`` beside it; results/ is git-ignored).

It downloads what pip's cache lacks: on Linux x86_64 every torch on PyPI is a CUDA build, several GB with
its NVIDIA libraries, and each cell's environment holds one (removed when the cell ends, ``--keep`` keeps
it). A site-wide pip constraint file (``PIP_CONSTRAINT`` or pip's configuration) is replaced by an empty
one: the cell chooses torch itself. Nothing here is part of ``make test`` or CI, which run the 3.11 row
against constraints.txt (tests/test_wheel_install.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_with_trl.py"
METHODS = ("grpo", "oar_g", "oar_p")
# The packages a row names, in its column order (the rest of the ranges are checked, not shown).
SHOWN = ("torch", "transformers", "trl", "accelerate")
COLUMNS = ("Python", "torch", "transformers", "TRL", "accelerate", "result", "seconds")


@dataclass
class Cell:
    """One row of the matrix."""

    python: str  # the interpreter's X.Y.Z
    torch_end: str  # "low" or "newest"
    versions: dict[str, str] = field(default_factory=dict)  # every installed distribution's version
    failed_step: str | None = None  # None: passed
    detail: str = ""  # the failing step's last output lines
    seconds: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)  # seconds of each step

    @property
    def result(self) -> str:
        return "pass" if self.failed_step is None else f"FAIL: {self.failed_step}"

    def row(self) -> list[str]:
        return [self.python, *(self.versions.get(name, "-") for name in SHOWN), self.result, f"{self.seconds:.0f}"]


class StepFailed(Exception):
    def __init__(self, step: str, detail: str):
        super().__init__(step)
        self.step, self.detail = step, detail


def project() -> dict:
    """pyproject.toml's [project] table (tomllib where it exists; this script runs on the project's 3.11)."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements() -> dict:
    """Each dependency's name (normalised) -> its Requirement."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    reqs = [Requirement(line.split("#")[0]) for line in project()["dependencies"]]
    return {canonicalize_name(r.name): r for r in reqs}


def torch_spec(end: str) -> str:
    """What pip installs for a torch end: the range's low end exactly, or the whole range (pip takes the
    newest release in it with a wheel for this Python)."""
    torch = requirements()["torch"]
    if end == "newest":
        return f"torch{torch.specifier}"
    (low,) = [s.version for s in torch.specifier if s.operator == ">="]
    return f"torch=={low}"


def out_of_range(installed: dict[str, str]) -> list[str]:
    """The dependencies missing from ``installed`` or installed at a version outside their range."""
    wrong = []
    for name, req in requirements().items():
        version = installed.get(name)
        if version is None or not req.specifier.contains(version.split("+")[0], prereleases=True):
            wrong.append(f"{name} {version} not in {req.specifier}")
    return wrong


def pythons_here() -> list[Path]:
    """The CPython 3.10-3.13 interpreters pyenv holds (the newest patch release of each), else python3.X on PATH."""
    found: dict[str, Path] = {}
    root = os.environ.get("PYENV_ROOT") or (shutil.which("pyenv") and subprocess.run(
        ["pyenv", "root"], capture_output=True, text=True).stdout.strip())
    if root and (Path(root) / "versions").is_dir():
        for folder in sorted((Path(root) / "versions").iterdir(), key=lambda p: p.name):
            minor = ".".join(folder.name.split(".")[:2])
            exe = folder / "bin" / f"python{minor}"
            if minor in ("3.10", "3.11", "3.12", "3.13") and exe.exists():
                found[minor] = exe
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        if minor not in found and shutil.which(f"python{minor}"):
            found[minor] = Path(shutil.which(f"python{minor}"))
    return [found[m] for m in sorted(found)]


def run(step: str, cmd: list[str], env: dict, cwd: Path, timeout: int) -> str:
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StepFailed(step, f"timed out after {timeout} s") from None
    if proc.returncode != 0:
        raise StepFailed(step, "\n".join((proc.stdout + proc.stderr).splitlines()[-30:]))
    print(f"    {step}: {time.perf_counter() - started:.0f} s", flush=True)
    return proc.stdout


def build_wheel(out: Path) -> Path:
    """The wheel of a copy of the files a release holds (tests/test_wheel_install.py builds it the same way)."""
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "oar", source / "oar", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
                   check=True)
    (wheel,) = out.glob("oar_trl-*.whl")
    return wheel


def tiny_model(out: Path) -> Path:
    """The tiny random Llama the example trains (the tests' ``tiny_model_dir``), built once with this tree."""
    from oar.models.sources import prepare_model

    return Path(prepare_model("tiny", out))


def step_lines(stdout: str) -> list[dict]:
    """The example's line a step (``{'step': 1, 'reward': ..., 'oar/frac_scored': ..., ...}``)."""
    return [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{'step'")]


def trained_as(method: str, steps: list[dict]) -> str | None:
    """None where the example's two steps show the method at work, else what is wrong: GRPO scores
    nothing; OAR-G and OAR-P score some responses and move their weights off 1 (ESS ratio below 1)."""
    if [s.get("step") for s in steps] != [1, 2]:
        return f"steps logged: {[s.get('step') for s in steps]}"
    reshaped = any(s.get("oar/frac_scored") and s.get("oar/ess_ratio") is not None and 0 < s["oar/ess_ratio"] < 1
                   for s in steps)
    if method == "grpo":
        return None if not any(s.get("oar/frac_scored") for s in steps) else "grpo scored responses"
    return None if reshaped else f"no response reshaped: {steps}"


def run_cell(python: Path, end: str, wheel: Path, model: Path, work: Path, keep: bool) -> Cell:
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    cell = Cell(python=version, torch_end=end)
    folder = work / f"py{version}-torch-{end}"
    shutil.rmtree(folder, ignore_errors=True)  # a fresh environment, also where --work is reused
    folder.mkdir(parents=True)
    empty = folder / "no-constraints.txt"
    empty.write_text("")
    # Not this tree's PYTHONPATH (`make test-install-matrix` sets it): pip would find the source tree's
    # oar_trl.egg-info there, take the wheel as installed already and skip it.
    pip_env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    pip_env.update(PIP_CONSTRAINT=str(empty), PIP_DISABLE_PIP_VERSION_CHECK="1")
    # the user's shell: no PYTHONPATH (the installed package, not this tree), offline hub, two threads
    user_env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2",
                "TOKENIZERS_PARALLELISM": "false"}
    venv = folder / "venv"
    exe = venv / "bin" / "python"
    started = time.perf_counter()

    def step(name: str, cmd: list[str], env: dict = pip_env, timeout: int = 3600) -> str:
        t0 = time.perf_counter()
        try:
            return run(name, cmd, env, folder, timeout)
        finally:
            cell.steps[name] = round(time.perf_counter() - t0, 1)

    print(f"== Python {version}, torch {end}", flush=True)
    try:
        step("venv", [str(python), "-m", "venv", str(venv)], timeout=600)
        step("install torch", [str(exe), "-m", "pip", "install", "--quiet", torch_spec(end)])
        step("install wheel", [str(exe), "-m", "pip", "install", "--quiet", str(wheel)])
        listed = step("pip list", [str(exe), "-m", "pip", "list", "--format", "json"], timeout=300)
        from packaging.utils import canonicalize_name

        cell.versions = {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed)}
        if wrong := out_of_range(cell.versions):
            raise StepFailed("ranges", "; ".join(wrong))
        where = step("import oar", [str(exe), "-c", "import oar, sys; print(oar.__file__, 'torch' in sys.modules)"],
                     env=user_env, timeout=300).split()
        if not where[0].startswith(str(venv)) or where[1] != "False":
            raise StepFailed("import oar", f"imported {where}")
        for method in METHODS:
            out = folder / f"out-{method}"
            stdout = step(f"train {method}", [str(exe), str(EXAMPLE), "--model", str(model), "--max-steps", "2",
                                              "--method", method, "--output-dir", str(out)],
                          env=user_env, timeout=1800)
            if problem := trained_as(method, step_lines(stdout)):
                raise StepFailed(f"train {method}", problem)
            if f"**Method: `{method}`**" not in (out / "README.md").read_text():
                raise StepFailed(f"train {method}", "the model card does not name the method")
    except StepFailed as failure:
        cell.failed_step, cell.detail = failure.step, failure.detail
        print(f"    FAILED at {failure.step}:\n{failure.detail}", flush=True)
    finally:
        cell.seconds = round(time.perf_counter() - started, 1)
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
    return cell


def markdown(cells: list[Cell]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    ordered = sorted(cells, key=lambda c: (tuple(int(n) for n in c.python.split(".")), c.torch_end != "low"))
    lines += ["| " + " | ".join(cell.row()) + " |" for cell in ordered]
    return "\n".join(lines) + "\n"


def parse_markdown(text: str) -> list[dict[str, str]]:
    """The rows of the table that :func:`markdown` wrote, found in ``text`` by its header (docs/library.md
    quotes one among other tables), as column -> cell; [] where there is none."""
    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == list(COLUMNS)), None)
    if header is None:
        return []
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(COLUMNS, cells(line))))
    return rows


def earlier_cells(out: Path) -> list[Cell]:
    """The cells of the table already in ``out`` (``--add``)."""
    path = out / "matrix.json"
    if not path.exists():
        return []
    names = set(Cell.__dataclass_fields__)
    return [Cell(**{k: v for k, v in record.items() if k in names}) for record in json.loads(path.read_text())]


def write(cells: list[Cell], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.md").write_text(markdown(cells))
    (out / "matrix.json").write_text(json.dumps([{**asdict(c), "result": c.result} for c in cells], indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", nargs="+", type=Path, help="interpreters (default: CPython 3.10-3.13 found here)")
    parser.add_argument("--torch", nargs="+", choices=("low", "newest"), default=["low", "newest"],
                        help="the ends of the torch range to install")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "install_matrix",
                        help="folder for matrix.md and matrix.json (rewritten after every cell)")
    parser.add_argument("--work", type=Path, help="folder for the environments (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep each cell's environment")
    parser.add_argument("--add", action="store_true",
                        help="keep the rows already in --out of the cells this run does not repeat")
    args = parser.parse_args(argv)

    pythons = args.python or pythons_here()
    work = args.work or Path(tempfile.mkdtemp(prefix="oar-install-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"pythons: {[str(p) for p in pythons]}; torch ends: {args.torch}; work: {work}", flush=True)
    wheel = build_wheel(Path(tempfile.mkdtemp(dir=work, prefix="wheel-")))
    model = tiny_model(work / "tiny")
    earlier = earlier_cells(args.out) if args.add else []
    cells: list[Cell] = []
    for end in args.torch:  # one end on every Python first: the order given is the order of priority
        for python in pythons:
            cells.append(run_cell(python, end, wheel, model, work, args.keep))
            ran = {(c.python, c.torch_end) for c in cells}
            write([c for c in earlier if (c.python, c.torch_end) not in ran] + cells, args.out)
    print(markdown(cells))
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(c.failed_step is None for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
