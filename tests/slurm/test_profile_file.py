"""The SLURM profile as Snakemake reads it (no cluster needed): found by name from the repository root
(and from anywhere after `make install-profile`), account and partition taken from $SBATCH_ACCOUNT / $SBATCH_PARTITION when set and left to the executor
otherwise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
