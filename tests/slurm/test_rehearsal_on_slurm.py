"""The CPU rehearsal of the paper's DAG through the SLURM profile (`make rehearse`, docs/rehearsal.md):
`snakemake --profile slurm all --configfile config/paper.yaml config/rehearsal.yaml` in a temporary
copy of the workflow, on the one-node cluster of slurm/local_cluster.sh. Every rule of the paper's DAG
must run on SLURM and complete, the tables, figures and report must exist, and the big model's
training jobs must have run as 2 processes. Skipped unless OAR_REHEARSAL=1 (`make rehearse` sets it):
at an hour on 2 cores it is too long for `make test-slurm`.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from local_slurm import run_snakemake, sacct

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("config/paper.yaml", "config/rehearsal.yaml")
BIG_MODEL = "qwen2.5-7b"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(7200),
    pytest.mark.skipif(os.environ.get("OAR_REHEARSAL") != "1",
                       reason="the paper's DAG on SLURM takes long: run `make rehearse` (sets OAR_REHEARSAL=1)"),
]


def snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(cwd, "all", *args, "--profile", str(ROOT / "slurm"), "--configfile", *CONFIGS, timeout=7000)


def planned(log: str) -> Counter:
    """Jobs per rule from Snakemake's first job table."""
    counts = Counter()
    for line in log[log.index("Job stats:"):].splitlines()[3:]:
        name, _, count = line.partition(" ")
        if name == "total" or not count.strip():
            break
        counts[name] = int(count)
    return counts


def local_rules(workdir: Path) -> set[str]:
    """The rules the workflow declares local (run by the submitting Snakemake, never on SLURM): those of
    the Snakefile's `localrules:` list and those with `localrule: True`."""
    snakefile = (workdir / "Snakefile").read_text()
    block = snakefile[snakefile.index("localrules:"):].split("\n\n")[0]
    local = set(re.findall(r"^\s+(\w+),?$", block, flags=re.M))
    for path in [workdir / "Snakefile", *(workdir / "rules").glob("*.smk")]:
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t].*\n|\n)*)", path.read_text(), flags=re.M):
            if re.search(r"^\s+localrule:\s*True", body, flags=re.M):
                local.add(name)
    return local


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    wd = tmp_path_factory.mktemp("rehearsal")
    for name in ("Snakefile", "rules", "config", "workflow_scripts", "envs", "oar"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / name)
    local = local_rules(wd)
    started = time.perf_counter()
    proc = snakemake(wd, "--verbose")
    elapsed = time.perf_counter() - started
    log = proc.stdout + proc.stderr
    (wd / "snakemake.log").write_text(log)
    assert proc.returncode == 0, log[-6000:]
    run_uuid = re.search(r"SLURM run ID: (\S+)", log).group(1)
    jobs = sacct(run_uuid, ["JobID", "State", "Elapsed", "Comment"])
    results = wd / yaml.safe_load((ROOT / CONFIGS[1]).read_text())["results"]
    print(f"\nrehearsal through SLURM: {planned(log).total()} jobs, {len(jobs)} SLURM jobs, {elapsed:.0f} s "
          f"({elapsed / 60:.1f} min); log: {wd / 'snakemake.log'}")
    return wd, results, log, jobs, local


def test_every_rule_of_the_paper_dag_ran_on_slurm_and_completed(rehearsal):
    wd, results, log, jobs, local = rehearsal
    counts = planned(log)
    assert set(counts) == {
        "prepare_model", "prepare_data", "run_settings", "train", "evaluate", "heldout_responses", "oracle",
        "score_heldout", "accuracy", "credit", "cost_summary", "recall_analysis", "fidelity_analysis", "table",
        "figure", "html_report", "all"}
    remote = Counter({rule: n for rule, n in counts.items() if rule not in local})
    assert {"train", "evaluate", "heldout_responses", "oracle", "score_heldout"} <= set(remote)
    # each remote job is one SLURM job, named in its comment as rule_<rule>[_wildcards_...]
    ran = Counter(re.match(r"rule_(\w+?)(?:_wildcards_|$)", j["Comment"]).group(1)
                  for j in jobs if j["State"] == "COMPLETED")
    assert ran == remote
    assert all(j["State"] == "COMPLETED" for j in jobs), [j for j in jobs if j["State"] != "COMPLETED"]
    print(f"\n{remote.total()} SLURM jobs: {dict(remote)}")


def test_tables_figures_and_report_exist(rehearsal):
    wd, results, log, jobs, local = rehearsal
    tables = {p.stem for p in (results / "tables").glob("*.csv")}
    assert tables == {"main_table", "ablation_gating", "ablation_grid", "ablation_probe", "controls", "cost",
                      "causal_recall", "fidelity", "reproduction"}
    assert all((results / "tables" / f"{t}.md").stat().st_size > 0 for t in tables)
    # the paper's claims beside the rehearsal's tiny runs: one seed on CPUs decides none of them
    with open(results / "tables" / "reproduction.csv", newline="") as f:
        claims = list(csv.DictReader(f))
    assert len(claims) == 14 and {c["verdict"] for c in claims} == {"undecided"}, claims
    figures = {p.stem for p in (results / "figures").glob("*.png")}
    assert figures == {"training_curves", "cost_bars", "grid_heatmap", "recall_bars", "token_heatmap"}
    assert all((results / "figures" / f"{f}.pdf").stat().st_size > 0 for f in figures)
    assert (results / "report.html").stat().st_size > 1000


def test_the_big_model_trained_as_two_processes(rehearsal):
    wd, results, log, jobs, local = rehearsal
    runs = sorted(d for d in (results / "runs" / BIG_MODEL).iterdir() if d.is_dir())
    assert len(runs) == 3  # GRPO, OAR-P and OAR-G of the main table
    for run in runs:
        assert (run / "done").is_file()
        lines = [line for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        assert len(lines) == 2  # both steps, each logged once (by rank 0)
        # each rank saves its own random state in every checkpoint: two ranks, two files
        for checkpoint in sorted((run / "checkpoints").glob("checkpoint-*")):
            assert sorted(p.name for p in checkpoint.glob("rng_state*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
        assert (run / "checkpoints" / "checkpoint-2").is_dir()
    # ... and the small model's single process only one
    small = next((results / "runs" / "qwen2.5-math-1.5b").iterdir())
    assert [p.name for p in (small / "checkpoints" / "checkpoint-2").glob("rng_state*.pth")] == ["rng_state.pth"]
