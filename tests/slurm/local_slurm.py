"""What the SLURM tests share: the one-node cluster's account and partition, status checks at its pace,
and the SLURM jobs of one Snakemake run as sacct records them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ACCOUNT, PARTITION = "oar_test", "debug"  # what slurm/local_cluster.sh creates
# The executor's status checks at a one-node cluster's pace (the profile's suit a real cluster).
FAST_POLLING = ("--slurm-init-seconds-before-status-checks", "1", "--max-status-checks-per-second", "2",
                "--latency-wait", "10")


def sacct(run_uuid: str, fields: list[str]) -> list[dict[str, str]]:
    """Every SLURM job of one Snakemake run (its jobs share the run id as job name), one dict per job."""
    out = subprocess.run(["sacct", "-X", "-n", "-P", "--name", run_uuid, "-S", "now-1days",
                          "-o", ",".join(fields)], capture_output=True, text=True, check=True).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines()]


def run_snakemake(cwd: Path, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """Snakemake of this environment in `cwd`, submitting to the cluster's account and partition with
    status checks at its pace (`args` end with the config files: --configfile takes every word after it)."""
    env = dict(os.environ, SBATCH_ACCOUNT=ACCOUNT, SBATCH_PARTITION=PARTITION)
    cmd = [str(Path(sys.executable).with_name("snakemake")), *FAST_POLLING, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
