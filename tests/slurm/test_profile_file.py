"""The SLURM profile as Snakemake reads it (no cluster needed): found by name from the repository root
(and from anywhere after `make install-profile`), account and partition taken from $SBATCH_ACCOUNT /
$SBATCH_PARTITION when set and left to the executor
otherwise; `snakemake --profile slurm all` plans the paper (config/paper.yaml) and a --configfile on the
command line replaces it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

snakemake_cli = pytest.importorskip("snakemake.cli")
from snakemake.profiles import ProfileConfigFileParser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def parsed(monkeypatch, **env) -> dict:
    for name in ("SBATCH_ACCOUNT", "SBATCH_PARTITION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with open(ROOT / "slurm" / "config.v8+.yaml") as stream:
        return dict(ProfileConfigFileParser().parse(stream))


def test_found_by_name_from_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    profile_dir, config_file = snakemake_cli.get_profile_dir("slurm")
    assert profile_dir.resolve() == ROOT / "slurm"
    assert config_file.name == "config.v8+.yaml"


def test_account_and_partition_come_from_the_environment(monkeypatch):
    profile = parsed(monkeypatch, SBATCH_ACCOUNT="proj42", SBATCH_PARTITION="gpu")
    assert profile["executor"] == "slurm"
    assert "slurm_account=proj42" in profile["default-resources"]
    assert "slurm_partition=gpu" in profile["default-resources"]


def test_without_them_the_executor_chooses(monkeypatch):
    resources = parsed(monkeypatch)["default-resources"]
    assert not any(r.startswith(("slurm_account=", "slurm_partition=")) for r in resources)


def test_install_profile_makes_it_found_anywhere(tmp_path, monkeypatch):
    config_home, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), "install-profile"], capture_output=True, text=True,
                          env=dict(os.environ, XDG_CONFIG_HOME=str(config_home)))
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.chdir(elsewhere)
    profile_dir, config_file = snakemake_cli.get_profile_dir("slurm")
    assert profile_dir == config_home / "snakemake" / "slurm"
    assert config_file.read_text() == (ROOT / "slurm" / "config.v8+.yaml").read_text()


# ------------------------------------------------------------------ the one command, planned

SNAKEMAKE = Path(sys.executable).with_name("snakemake")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of what a clone holds that Snakemake reads (no results/, so the plan is the whole DAG)."""
    wd = tmp_path_factory.mktemp("checkout")
    for name in ("Snakefile", "rules", "config", "workflow_scripts", "envs", "slurm", "oar", "tests"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / name,
                                                            **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                               if src.is_dir() else {}))
    return wd


def dry_run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SNAKEMAKE_PROFILE"))}
    env["HF_HUB_OFFLINE"] = "1"  # the plan must not need the hub
    return subprocess.run([str(SNAKEMAKE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def job_counts(log: str) -> dict[str, int]:
    table = log[log.index("Job stats:"):].splitlines()[3:]
    counts = {}
    for line in table:
        name, _, count = line.partition(" ")
        if name == "total" or not count.strip():
            break
        counts[name] = int(count)
    return counts


def test_the_one_command_plans_the_paper(checkout):
    proc = dry_run(checkout, "--profile", "slurm", "all", "-n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    counts = job_counts(log)
    # config/paper.yaml: 135 runs (both Qwen models), each hub model fetched once, 6 datasets
    assert counts["train"] == 135 and counts["fetch_model"] == 2 and counts["prepare_data"] == 6, counts
    assert "run=qwen2.5-7b/oar_g-tau0.4-beta2.0-as_mean-seed0" in log
    assert "--main_process_port 0" in log  # the 7B launch picks a free port


def test_a_configfile_on_the_command_line_replaces_the_paper(checkout):
    proc = dry_run(checkout, "--profile", "slurm", "all", "-n", "--configfile", "tests/data/workflow_tiny.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    counts = job_counts(log)
    assert counts["train"] == 11 and "fetch_model" not in counts, counts
    assert "qwen" not in log


def test_a_layout_beyond_the_cluster_stops_before_anything_is_planned(checkout):
    overlay = checkout / "limits.yaml"
    overlay.write_text(yaml.safe_dump({"resources": {"limits": {"mem_mb": 256000}}}))
    proc = dry_run(checkout, "--profile", "slurm", "all", "-n", "--configfile", "config/paper.yaml", str(overlay))
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config error at models.qwen2.5-7b.resources.train.mem_mb: 480000 is more than " \
           "resources.limits.mem_mb = 256000" in log, log[-3000:]
    assert "Job stats:" not in log


def test_hub_reading_rules_are_local(checkout, monkeypatch):
    """fetch_model and prepare_data run where Snakemake runs (the login node), the rest on the cluster."""
    api = pytest.importorskip("snakemake.api")
    # the Snakefile sets PYTHONPATH and PATH in this process's environment: put them back afterwards
    for name in ("PYTHONPATH", "PATH", "OAR_CPU_KERNELS"):
        monkeypatch.setenv(name, os.environ[name]) if name in os.environ else monkeypatch.delenv(name, raising=False)
    from snakemake.settings.types import ConfigSettings, ResourceSettings, StorageSettings, WorkflowSettings

    with api.SnakemakeApi() as smk:
        workflow_api = smk.workflow(resource_settings=ResourceSettings(),
                                    config_settings=ConfigSettings(configfiles=[checkout / "config" / "paper.yaml"]),
                                    storage_settings=StorageSettings(), workflow_settings=WorkflowSettings(),
                                    snakefile=checkout / "Snakefile", workdir=checkout)
        # the rules Workflow.is_local keeps on the submitting machine under a cluster executor
        local = set(workflow_api._workflow._localrules)
    assert {"fetch_model", "prepare_data"} <= local
    assert not {"prepare_model", "train", "evaluate"} & local
