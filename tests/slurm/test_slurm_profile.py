"""The tiny-model DAG through the project's SLURM profile (slurm/config.v8+.yaml) on a real SLURM
cluster, in a temporary copy of the workflow. `make test-slurm` brings up a one-node cluster with
slurm/local_cluster.sh and sets OAR_TEST_SLURM=1; without it these tests are skipped.

One run of `all` serves every test: while it runs, one training job is cancelled with scancel once its
first checkpoint is written; the profile's retries must run it again, the retry must go on from that
checkpoint, and the DAG must still finish.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from local_slurm import ACCOUNT, PARTITION, run_snakemake, sacct

SACCT_FIELDS = ["JobID", "State", "ReqMem", "Timelimit", "ReqCPUS", "AllocTRES", "Account", "Partition", "Comment"]

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "slurm"
TINY = ROOT / "tests" / "data" / "workflow_tiny.yaml"

# Per kind of job, memory and time limits no other kind has, so that each SLURM job's request can be
# traced back to the config. prepare_model asks for the cluster's GPU (a GRES with no device behind it)
# to show what the executor makes of `gpu` and `gpu_model`.
RESOURCES = {
    "default": {"threads": 1, "gpu": 0, "mem_mb": 1000, "runtime": 10},
    "train": {"mem_mb": 1500, "runtime": 12},
    "evaluate": {"mem_mb": 1200, "runtime": 11},
    "plot": {"mem_mb": 1100, "runtime": 9},
    "prepare_model": {"gpu": 1, "gpu_model": "testgpu", "mem_mb": 1300, "runtime": 8},
}
# the rules whose kind is not `default`
KIND_OF_RULE = {"train": "train", "evaluate": "evaluate", "prepare_model": "prepare_model",
                "table": "plot", "figure": "plot", "html_report": "plot"}
# the rules the Snakefile keeps on the submitting machine (`localrules`) that the tiny DAG has
LOCAL_RULES = {"prepare_data", "run_settings", "all"}
# training long enough to be cancelled between its first checkpoint and its end
TRAINER = {"max_steps": 4, "save_steps": 1}

# What shortens the tiny DAG on a one-node cluster, set here and not in the profile or the rules (a
# real cluster wants neither):
# - the executor checks job states 1 s after a round in which a job ended (the profile's 10 s suits a
#   real cluster);
# - tiny jobs of one kind share a SLURM job (Snakemake groups): each SLURM job costs a submission, two
#   Snakemake start-ups and a status round trip, more than a tiny job itself. `--cores 1` with
#   `_cores` scoped per group makes a group job one CPU that runs its members one after another, so
#   it asks for the kind's --mem and the sum of its members' --time (it also caps every job's threads
#   at 1, the tiny config's value anyway).
GROUPING = ("--groups", "evaluate=evaluate", "score_heldout=score", "accuracy=analysis", "credit=analysis",
            "cost_summary=analysis", "recall_analysis=analysis", "fidelity_analysis=analysis",
            "table=plot", "figure=plot",
            "--group-components", "evaluate=6", "score=6", "analysis=6", "plot=7",
            "--cores", "1", "--set-resource-scopes", "_cores=local")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.environ.get("OAR_TEST_SLURM") != "1",
                       reason="needs a SLURM cluster: run `make test-slurm` (sets OAR_TEST_SLURM=1)"),
]


def snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_snakemake(cwd, *args, "--profile", str(PROFILE), *GROUPING, "--configfile", "tiny.yaml", timeout=1700)


def squeue() -> list[tuple[str, str, str]]:
    """(job id, state, comment) of the queued and running jobs."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k"], capture_output=True, text=True).stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines()]


def processes_in(folder: Path) -> list[str]:
    """Command lines of the processes whose working directory is `folder`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) == folder:
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended
            continue
    return found


def checkpoints(run_dir: Path) -> dict[int, float]:
    """step -> mtime of trainer_state.json (the Trainer writes it last) of the run's complete checkpoints"""
    found = {}
    for state in (run_dir / "checkpoints").glob("checkpoint-*/trainer_state.json"):
        try:
            found[int(state.parent.name.removeprefix("checkpoint-"))] = state.stat().st_mtime
        except (OSError, ValueError):  # removed or being written
            continue
    return found


@dataclass
class Cancellation:
    """scancel the first train job seen running that has written a complete checkpoint, then look at
    that run's outputs and checkpoints when Snakemake submits it again."""

    workdir: Path
    job_id: str = ""
    comment: str = ""
    run_dir: Path | None = None
    partial_outputs: list[str] = field(default_factory=list)
    outputs_at_resubmission: list[str] | None = None
    checkpoints_at_resubmission: dict[int, float] | None = None
    survivors_at_resubmission: list[str] | None = None  # processes still training the cancelled run
    leftovers: list[str] | None = None  # processes still in the workflow's folder after the run
    stop: threading.Event = field(default_factory=threading.Event)

    def run_dirs(self) -> dict[str, Path]:
        """run dirs by their spelling in a SLURM comment (the executor writes '/' as '_')"""
        runs = self.workdir / "results" / "runs"
        return {"_".join(d.relative_to(runs).parts): d for d in runs.glob("*/*") if d.is_dir()}

    def outputs(self, run_dir: Path) -> list[str]:
        return sorted(n for n in ("done", "metrics.jsonl", "model") if (run_dir / n).exists())

    def trainers(self) -> list[str]:
        """Command lines of the processes training the cancelled run (train.py reads its settings)."""
        settings = "/".join(self.run_dir.parts[-3:]) + "/settings.yaml"
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes().split(b"\0")
            except OSError:  # the process ended
                continue
            if any(a.decode(errors="replace").endswith(settings) for a in args):
                found.append(" ".join(a.decode(errors="replace") for a in args))
        return found

    def watch(self) -> None:
        while not self.stop.is_set():
            jobs = squeue()
            if not self.job_id:
                runs = self.run_dirs()
                for job_id, state, comment in jobs:
                    run_dir = runs.get(comment.removeprefix("rule_train_wildcards_"))
                    if state == "RUNNING" and run_dir and checkpoints(run_dir):
                        self.partial_outputs = self.outputs(run_dir)
                        subprocess.run(["scancel", job_id], check=True)
                        self.job_id, self.comment, self.run_dir = job_id, comment, run_dir
                        break
            elif any(c == self.comment and j != self.job_id for j, _, c in jobs):
                self.outputs_at_resubmission = self.outputs(self.run_dir)
                self.checkpoints_at_resubmission = checkpoints(self.run_dir)
                self.survivors_at_resubmission = self.trainers()
                return
            time.sleep(0.05)


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("slurm_workflow")
    # oar/ too: the jobs must import this tree's package, not an installed one
    for name in ("Snakefile", "rules", "config", "workflow_scripts", "envs", "oar"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / name)
    config = yaml.safe_load(TINY.read_text())
    config["resources"] = RESOURCES
    config["training"]["trainer"].update(TRAINER)
    (wd / "tiny.yaml").write_text(yaml.safe_dump(config))

    cancellation = Cancellation(wd)
    watcher = threading.Thread(target=cancellation.watch, daemon=True)
    watcher.start()
    started = time.perf_counter()
    proc = snakemake(wd, "all", "--verbose")  # --verbose: the executor logs each sbatch call
    elapsed = time.perf_counter() - started
    cancellation.stop.set()
    watcher.join()
    (wd / "snakemake.log").write_text(proc.stdout + proc.stderr)
    cancellation.leftovers = processes_in(wd)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    print(f"\ntiny `all` through SLURM: {elapsed:.0f} s; log: {wd / 'snakemake.log'}")
    log = proc.stdout + proc.stderr
    run_uuid = re.search(r"SLURM run ID: (\S+)", log).group(1)
    return wd, log, sacct(run_uuid, SACCT_FIELDS), cancellation


def planned_jobs(log: str) -> Counter:
    """Jobs per rule from the job table Snakemake prints when it starts (the first one in its log; a
    failed job's log, which the profile's show-failed-logs copies in later, holds its own)."""
    counts = Counter()
    for line in log[log.index("Job stats:"):].splitlines()[3:]:
        name, _, count = line.partition(" ")
        if name == "total" or not count.strip():
            break
        counts[name] = int(count)
    return counts


def slurm_logs(workdir: Path) -> dict[str, Path]:
    """SLURM job id -> its log, results/logs/slurm/{rule,group}_<name>/[<wildcards>/]<job id>.log"""
    return {path.stem: path for path in (workdir / "results" / "logs" / "slurm").rglob("*.log")}


def members(slurm_log: Path) -> list[str]:
    """The rules a SLURM job ran: the Snakemake inside it prints `localrule <rule>:` for each job."""
    return re.findall(r"^\s*localrule (\w+):$", slurm_log.read_text(), flags=re.M)


def minutes(timelimit: str) -> int:
    hours, mins, _ = map(int, timelimit.split(":"))
    return 60 * hours + mins


def test_every_remote_job_ran_on_slurm_and_completed(slurm_run):
    """Snakemake's plan against SLURM's records (sacct, and the log of each completed SLURM job): every
    planned job of a non-local rule ran in a completed SLURM job, once; no local rule did."""
    wd, log, jobs, cancellation = slurm_run
    counts = planned_jobs(log)
    assert LOCAL_RULES <= set(counts), counts
    remote = Counter({rule: n for rule, n in counts.items() if rule not in LOCAL_RULES})
    logs = slurm_logs(wd)
    ran = Counter(rule for j in jobs if j["State"] == "COMPLETED" for rule in members(logs[j["JobID"]]))
    assert ran == remote
    assert remote.total() > 50 and len(jobs) < remote.total() / 2  # tiny jobs shared SLURM jobs
    # nothing but the cancelled job failed
    assert [j["JobID"] for j in jobs if j["State"] != "COMPLETED"] == [cancellation.job_id]
    assert {(j["Account"], j["Partition"]) for j in jobs} == {(ACCOUNT, PARTITION)}
    assert (wd / "results" / "report.html").stat().st_size > 1000
    print(f"\n{remote.total()} jobs in {len(jobs)} SLURM jobs")


def test_each_job_asked_for_its_configured_resources(slurm_run):
    wd, log, jobs, cancellation = slurm_run
    logs = slurm_logs(wd)
    for job in jobs:
        rules = members(logs[job["JobID"]]) or [re.match(r"rule_(\w+?)_wildcards_", job["Comment"]).group(1)]
        kinds = {KIND_OF_RULE.get(rule, "default") for rule in rules}
        assert len(kinds) == 1, (job, rules)
        want = {**RESOURCES["default"], **RESOURCES[kinds.pop()]}
        # every attempt asks for the same memory (the cancelled job's retry too)
        assert job["ReqMem"] == f"{want['mem_mb']}M", job
        assert minutes(job["Timelimit"]) == want["runtime"] * max(1, len(rules)), job
        assert job["ReqCPUS"] == str(want["threads"]), job
        assert ("gres/gpu=1" in job["AllocTRES"]) == bool(want["gpu"]), job
    # the executor's own spelling of `gpu` + `gpu_model`, as it called sbatch
    sbatch = [line for line in log.splitlines() if line.startswith("sbatch call: ")]
    assert len(sbatch) == len(jobs)
    # one node, one task: no job asks for per-GPU tasks or spans nodes
    assert all(" --nodes=1 " in line and "--ntasks-per-gpu" not in line for line in sbatch)
    gpu_calls = [line for line in sbatch if "rule_prepare_model" in line]
    assert gpu_calls and all(" --gpus=testgpu:1" in line for line in gpu_calls)
    assert not any("--gpus" in line for line in sbatch if line not in gpu_calls)
    print("\n" + gpu_calls[0].split(" --wrap=")[0])


def test_a_cancelled_job_is_retried_without_partial_outputs(slurm_run):
    wd, log, jobs, cancellation = slurm_run
    assert cancellation.job_id, "no training job was caught running"
    by_id = {j["JobID"]: j for j in jobs}
    assert by_id[cancellation.job_id]["State"].startswith("CANCELLED")
    assert "metrics.jsonl" in cancellation.partial_outputs
    # SLURM ended the job's processes (none outlived the run either) and Snakemake removed its outputs
    # before submitting it again ...
    assert cancellation.leftovers == []
    assert cancellation.survivors_at_resubmission == []
    assert cancellation.outputs_at_resubmission == []
    retries = [j for j in jobs if j["Comment"] == cancellation.comment and j["JobID"] != cancellation.job_id]
    assert [j["State"] for j in retries] == ["COMPLETED"]
    # ... and the retry wrote a complete run: every training step, once each
    run_dir = cancellation.run_dir
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if line.strip()]
    assert steps == list(range(1, TRAINER["max_steps"] + 1))
    assert (run_dir / "done").is_file()
    print(f"\ncancelled SLURM job {cancellation.job_id} ({cancellation.comment}) holding "
          f"{cancellation.partial_outputs}; retried as job {retries[0]['JobID']}")


def test_a_cancelled_training_job_resumes_from_its_checkpoint(slurm_run):
    """The retry goes on from the newest checkpoint the cancelled attempt left, not from step 0."""
    wd, _, _, cancellation = slurm_run
    left = cancellation.checkpoints_at_resubmission
    assert left, "the cancelled attempt left no complete checkpoint"
    newest = max(left)
    assert newest < TRAINER["max_steps"]
    run = "/".join(cancellation.run_dir.parts[-2:])
    train_log = (wd / "results" / "logs" / "train" / f"{run}.log").read_text()  # the retry's
    resumed = re.findall(rf"^resuming {re.escape(run)} from \S*/checkpoints/checkpoint-(\d+)$", train_log, flags=re.M)
    assert resumed == [str(newest)], train_log[-3000:]
    # the retry trained only the later steps: the checkpoints it started from were not written again
    after = checkpoints(cancellation.run_dir)
    assert all(after[step] == mtime for step, mtime in left.items() if step in after)
    assert max(after) == TRAINER["max_steps"]
    print(f"\nretry of {run} resumed from checkpoint-{newest} of {TRAINER['max_steps']} steps")


def test_cluster_jobs_run_with_the_hub_offline(slurm_run):
    """prepare_model ran on SLURM (remote mode): the Snakefile set the hub offline there."""
    wd, _, _, _ = slurm_run
    summary = json.loads((wd / "results" / "models" / "tiny.summary.json").read_text())
    assert summary["hub"]["HF_HUB_OFFLINE"] == "1" and summary["hub"]["HF_DATASETS_OFFLINE"] == "1", summary["hub"]


def test_logs_land_where_the_readme_says(slurm_run):
    wd, _, jobs, _ = slurm_run
    logs = slurm_logs(wd)
    assert {j["JobID"] for j in jobs} <= set(logs)
    for job in jobs:
        name = re.match(r"rule_(\w+?)(?:_wildcards_|$)", job["Comment"]).group(1)
        assert logs[job["JobID"]].relative_to(wd / "results" / "logs" / "slurm").parts[0] in (
            f"rule_{name}", f"group_{name}"), logs[job["JobID"]]
    # each rule's own log (the rules' `log:`) in results/logs/<rule kind>/
    assert len(list((wd / "results" / "logs" / "train").rglob("*.log"))) == 11


def test_a_second_run_submits_nothing(slurm_run):
    wd, _, _, _ = slurm_run
    proc = snakemake(wd, "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "Nothing to be done" in out, out[-3000:]
    assert "has been submitted" not in out
