"""oar.experiment.progress: the progress line of a long workflow run, from its own finished jobs."""

from __future__ import annotations

import pytest

from oar.experiment.progress import Job, estimate, finished_jobs, pending_jobs, run_started

DRY_RUN = """\
Building DAG of jobs...
Job stats:
job         count
--------  -------
evaluate        1
train           2
total           3

rule train:
    input: results/runs/chain_f1/oar_p-seed1/settings.yaml
    output: results/runs/chain_f1/oar_p-seed1/done
    jobid: 3
    wildcards: run=chain_f1/oar_p-seed1
    resources: tmpdir=/tmp, gpu=0

rule train:
    output: results/runs/chain_f1/grpo-seed1/done
    wildcards: run=chain_f1/grpo-seed1

rule evaluate:
    output: results/eval/chain_f1/grpo-seed1/chain_test/summary.json
    wildcards: run=chain_f1/grpo-seed1, bench=chain_test

localrule main_table:
    output: results/tables/main_table.md
    jobid: 0

This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""


def write_timing(results, name, seconds, folder="timings"):
    path = results / folder / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\tcpu_time\n" f"{seconds}\t0:00:00\t100\t{seconds}\n")


def test_jobs_left_are_priced_by_their_finished_kind(tmp_path):
    results = tmp_path / "results"
    write_timing(results, "train/chain_f1/grpo-seed0", 60)
    write_timing(results, "train/chain_f1/oar_p-seed0", 200)
    write_timing(results, "train/chain_f1/oar_p-seed2", 220)
    write_timing(results, "evaluate/chain_f1/grpo-seed0/chain_test", 30)
    (results / "timings" / "train" / "chain_f1" / "half.tsv").write_text("s\n")  # being written: skipped
    pending = pending_jobs(DRY_RUN.splitlines())
    assert pending == [Job("train", "chain_f1/oar_p-seed1"), Job("train", "chain_f1/grpo-seed1"),
                       Job("evaluate", "chain_f1/grpo-seed1/chain_test"), Job("main_table")]
    finished = finished_jobs(results)
    assert finished[Job("train", "chain_f1/oar_p-seed2")] == 220 and len(finished) == 4
    result = estimate(pending, finished, cores=2)
    # OAR-P at its median 210, GRPO 60, the evaluation 30; the table (no job of its rule finished) not counted
    assert result.left_s == pytest.approx((210 + 60 + 30) / 2) and (result.guessed, result.unpriced) == (0, 1)
    text = result.line(elapsed_s=600, cores=2)
    assert text.startswith("4 of 8 jobs done (50%), 10.0 min since snakemake started; at least 2 min left on 2 cores")
    assert text.endswith("; 1 of the 4 left not counted: no job of their rule has finished")
    finished[Job("main_table")] = 180.0
    text = estimate(pending, finished, cores=2).line(elapsed_s=600, cores=2)
    assert "; about 4 min left on 2 cores" in text and "not counted" not in text


def test_a_kind_not_finished_yet_is_priced_by_its_rule_and_a_rule_not_finished_yet_not_at_all():
    """Seconds of a data file are no price for a training run: before a job of a rule has finished, the
    line gives a lower bound and says how many jobs it leaves out, rather than a small number."""
    finished = {Job("prepare_data", "chain_train"): 0.1, Job("train", "chain_f1/grpo-seed0"): 60.0,
                Job("train", "chain_f1/oar_p-seed0"): 200.0}
    pending = [Job("train", "chain_f1/oar_g-seed0"), Job("prepare_model", "chain_f1"), Job("evaluate", "x/y")]
    result = estimate(pending, finished, cores=1)
    # OAR-G: no OAR-G run finished, priced by the training runs' median (130); the rest not priced
    assert result.left_s == pytest.approx(130) and (result.guessed, result.unpriced) == (1, 2)
    text = result.line(elapsed_s=None, cores=1)
    assert text == ("3 of 6 jobs done (50%); at least 2 min left on 1 core, from this run's finished jobs "
                    "(1 of the 3 left are of kinds not finished yet); 2 of the 3 left not counted: no job of "
                    "their rule has finished")
    # only data files finished: they price nothing of what is left, so no "at least 0 min"
    only_data = estimate(pending, {Job("prepare_data", "chain_train"): 0.1}, cores=1)
    assert only_data.unpriced == only_data.pending == 3
    assert only_data.line(elapsed_s=60, cores=1) == ("1 of 4 jobs done (25%), 1.0 min since snakemake started; no "
                                                     "estimate yet: no job of the rules of the 3 left has finished")


def test_jobs_that_do_no_work_are_priced_at_nothing():
    """run_settings writes a YAML in a fraction of a second (no timing file ever) and a target rule only gathers
    inputs: neither may be priced as a training run, which would put hours on an interim look's line."""
    listing = DRY_RUN.replace("localrule main_table:", """\
[Fri Nov 27 01:57:48 2026]
localrule run_settings:
    output: results/runs/chain_f1/grpo-seed1/settings.yaml
    wildcards: run=chain_f1/grpo-seed1

localrule upper_bound:
    input: results/tables/upper_bound.md, results/tables/paired_differences.md
    jobid: 0
    reason: Input files updated by another job
    resources: tmpdir=/tmp

localrule main_table:""")
    pending = pending_jobs(listing.splitlines())
    assert [(j.rule, j.writes) for j in pending] == [("train", True), ("train", True), ("evaluate", True),
                                                     ("run_settings", True), ("upper_bound", False),
                                                     ("main_table", True)]
    finished = {Job("train", "chain_f1/grpo-seed0"): 60.0, Job("train", "chain_f1/oar_p-seed0"): 200.0,
                Job("evaluate", "chain_f1/grpo-seed0/chain_test"): 30.0}
    result = estimate(pending, finished, cores=1)
    # the two that do no work add nothing and are not guessed; the table (no job of its rule finished) is not counted
    assert (result.left_s == pytest.approx(200 + 60 + 30)
            and (result.guessed, result.unpriced, result.pending) == (0, 1, 6))


def test_a_kind_is_priced_by_the_jobs_this_run_finished_where_it_has_any(tmp_path):
    """An interim look's earlier jobs ran beside other work (twice as slow): the jobs finished since the
    run in progress began price their kind; a kind with none keeps the folder's older jobs."""
    import os

    results = tmp_path / "results"
    write_timing(results, "train/chain_f1/grpo-seed0", 600)
    write_timing(results, "evaluate/chain_f1/grpo-seed0/chain_test", 30)
    write_timing(results, "train/chain_f1/grpo-seed2", 300)
    for name in ("train/chain_f1/grpo-seed0", "evaluate/chain_f1/grpo-seed0/chain_test"):
        os.utime(results / "timings" / f"{name}.tsv", (1000.0, 1000.0))  # ended before the run began
    os.utime(results / "timings" / "train/chain_f1/grpo-seed2.tsv", (2000.0, 2000.0))
    assert set(finished_jobs(results, since=1500.0)) == {Job("train", "chain_f1/grpo-seed2")}
    pending = [Job("train", "chain_f1/grpo-seed1"), Job("evaluate", "chain_f1/grpo-seed1/chain_test")]
    result = estimate(pending, finished_jobs(results), 1, recent=finished_jobs(results, since=1500.0))
    assert result.left_s == pytest.approx(300 + 30)  # not the folder's median (450) for GRPO's run
    assert estimate(pending, finished_jobs(results), 1).left_s == pytest.approx(450 + 30)


def test_results_from_before_the_rename_still_count_their_timings(tmp_path):
    """Results made when Snakemake's timing files went to benchmarks/ keep them there: their finished jobs
    count, and a job timed in both folders counts its timings/ file."""
    results = tmp_path / "results"
    write_timing(results, "train/chain_f1/grpo-seed0", 60, folder="benchmarks")
    write_timing(results, "train/chain_f1/grpo-seed1", 70, folder="benchmarks")
    write_timing(results, "train/chain_f1/grpo-seed1", 80)
    assert finished_jobs(results) == {Job("train", "chain_f1/grpo-seed0"): 60, Job("train", "chain_f1/grpo-seed1"): 80}


def test_a_job_is_priced_by_the_timing_folder_it_shares():
    """The analysis rules write their timing files to one folder (analysis/), the table rule to tables/:
    a pending job of such a rule is priced by the finished jobs of its folder, not by every job's median."""
    listing = """\
rule accuracy:
    input: results-x/eval/chain_d8/grpo-seed1/chain5_test/summary.json
    output: results-x/analysis/accuracy/main.csv
    benchmark: results-x/timings/analysis/accuracy-main.tsv
    wildcards: group=main

rule table:
    output: results-x/tables/upper_bound.csv, results-x/tables/upper_bound.md
    benchmark: results-x/timings/tables/upper_bound.tsv
    wildcards: name=upper_bound

rule report:
    output: results-x/report.html
    benchmark: results-x/timings/report.tsv
"""
    pending = pending_jobs(listing.splitlines())
    assert [(j.rule, j.kind) for j in pending] == [("accuracy", ("analysis", "")), ("table", ("tables", "")),
                                                   ("report", ("report", ""))]
    finished = {Job("analysis", "credit-main"): 4.0, Job("tables", "paired_differences"): 6.0,
                Job("train", "chain_d8/grpo-seed0"): 380.0}
    result = estimate(pending, finished, cores=1)
    assert result.left_s == pytest.approx(4 + 6) and result.unpriced == 1  # the report: none of its rule finished


def test_the_run_started_when_its_log_is_named_not_when_it_was_last_written(tmp_path):
    import os
    from datetime import datetime

    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    older = logs / "2026-11-26T225512.925401.snakemake.log"
    newest = logs / "2026-11-27T015938.013635.snakemake.log"
    whole_second = logs / "2026-11-27T010000.snakemake.log"
    for path in (newest, whole_second, older):  # the older run's log written last: its mtime is the newest
        path.write_text("log\n")
    os.utime(older, None)
    (logs / "notes.txt").write_text("not a log")
    assert run_started(logs) == pytest.approx(datetime(2026, 11, 27, 1, 59, 38, 13635).timestamp())
    assert run_started(tmp_path / "none") is None


def test_no_estimate_before_a_job_finishes_and_nothing_left_at_the_end(tmp_path):
    pending = pending_jobs(DRY_RUN.splitlines())
    assert estimate(pending, {}, 2).line(None, 2) == "0 of 4 jobs done (0%); no estimate before the first job finishes"
    assert estimate([], {Job("train", "a/grpo-seed0"): 5.0}, 2).line(60, 2).endswith("; nothing left")
    with pytest.raises(ValueError, match="cores"):
        estimate(pending, {}, 0)


def test_the_dry_run_lists_a_running_job_as_left(tmp_path):
    """Beside a run in progress Snakemake marks the running job's outputs incomplete, and a dry run stops
    on one that exists (a training run's metrics.jsonl is written as it goes); the progress line's dry
    run lists that job as left instead."""
    import importlib.util
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    pytest.importorskip("snakemake")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: "out.txt"\n\n'
        'rule slow:\n    output: "out.txt"\n'
        '    shell: "echo partial > {output}; echo started > started.txt; sleep 60; echo done >> {output}"\n')
    run = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "all"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for _ in range(600):
            if (tmp_path / "started.txt").exists() and any((tmp_path / ".snakemake" / "incomplete").glob("*")):
                break
            time.sleep(0.1)
        else:
            pytest.fail("snakemake did not start its job")
        spec = importlib.util.spec_from_file_location(
            "progress_script", Path(__file__).resolve().parents[1] / "workflow_scripts" / "progress.py")
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        listing = script.dry_run(["all"], tmp_path)
        assert listing.returncode == 0, listing.stderr[-2000:]
        assert [job.rule for job in pending_jobs(listing.stdout.splitlines())] == ["slow", "all"]
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
