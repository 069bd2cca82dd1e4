"""The testbed's DAG at its smallest size in a temporary copy of the workflow: chain policies pretrained by
prepare_model, paired seeds, the paired-differences table with the main-comparison and length-sweep
figures, causal-token recall against the parsed decisive tokens, and the pass-rate check that stops the
workflow before any RL job."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
CHAIN = ROOT / "tests" / "data" / "workflow_chain.yaml"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed beside this Python"),
]


def run(cwd: Path, *args: str, configfiles=("chain.yaml",), timeout: int = 1500) -> subprocess.CompletedProcess:
    cmd = [str(SNAKEMAKE), *args, "--configfile", *configfiles]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def copy_workflow(wd: Path) -> Path:
    for name in ("Snakefile", "rules", "config", "workflow_scripts", "envs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / name)
    shutil.copy(CHAIN, wd / "chain.yaml")
    return wd


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    wd = copy_workflow(tmp_path_factory.mktemp("testbed"))
    proc = run(wd, "all", "--cores", "2")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return wd


def test_pretrained_policies_carry_their_report(workflow):
    for name, filler in (("chain_a", 0), ("chain_b", 1)):
        summary = json.loads((workflow / "results" / "models" / f"{name}.summary.json").read_text())
        report = summary["pretrain"]
        assert report["settings"]["filler"] == filler and report["settings"]["updates"] == 60
        assert report["log"][-1]["loss"] < report["log"][0]["loss"]
        assert 0.0 <= report["check"]["pass_rate"] <= 1.0 and report["check"]["group"] == 2  # num_generations


def test_paired_differences_pair_every_seed_per_model(workflow):
    results = workflow / "results"
    outcomes = pd.read_csv(results / "analysis" / "paired" / "outcomes.csv")
    # seeds x (chain_a: GRPO, OAR-G, truth gate; chain_b: those and the graded truth gate, which on chain_a,
    # without remarks, would be the truth gate's run twice)
    assert len(outcomes) == 2 * (3 + 4)
    assert set(outcomes[outcomes["model"] == "chain_a"]["method"]) == {"grpo", "oar_g", "truth"}
    assert set(outcomes["steps"]) == {3}
    diffs = pd.read_csv(results / "analysis" / "paired" / "differences.csv")
    assert set(diffs["model"]) == {"chain_a", "chain_b"} and set(diffs["method"]) == {"oar_g", "truth", "truth_graded"}
    assert set(diffs["n_seeds"]) == {2} and len(diffs) == (2 + 3) * 3  # model-arms x metrics
    for _, d in diffs.iterrows():
        own = outcomes[(outcomes["model"] == d["model"]) & (outcomes["method"] == d["method"])].set_index("seed")
        base = outcomes[(outcomes["model"] == d["model"]) & (outcomes["method"] == "grpo")].set_index("seed")
        if d["metric"] == "steps_to_threshold":  # censored: counts that reached it, no mean difference
            assert d["method_reached"] == own["reached"].sum() and d["baseline_reached"] == base["reached"].sum()
            continue
        assert d["diff_mean"] == pytest.approx((own[d["metric"]] - base[d["metric"]]).mean())
    md = (results / "tables" / "paired_differences.md").read_text()
    assert md.startswith("## Paired differences") and "chain_a" in md and "OAR-G" in md
    assert "Runs read: 14" in md  # the commits its runs were made at, from each run's record
    for name in ("main_comparison", "length_sweep"):
        assert (results / "figures" / f"{name}.png").stat().st_size > 1000
    sweep = pd.read_csv(results / "tables" / "length_sweep.csv").set_index(["model", "method"])
    for (model, method), g in outcomes.groupby(["model", "method"]):
        assert sweep.loc[(model, method), "accuracy"] == pytest.approx(100 * g["final_accuracy"].mean())
        assert sweep.loc[(model, method), "reached"] == g["reached"].sum()
    assert "| Base model |" in (results / "tables" / "length_sweep.md").read_text()


def test_the_decisive_reading_reads_each_level_against_its_truth_gates(workflow):
    results = workflow / "results"
    diffs = pd.read_csv(results / "analysis" / "paired" / "differences.csv")
    table = pd.read_csv(results / "tables" / "decisive.csv")
    levels = table[table["kind"] == "level"].set_index(["model", "method"])
    assert set(levels.index) == {(m, a) for m, a in zip(diffs["model"], diffs["method"])}
    for (model, method), r in levels.iterrows():
        d = diffs[(diffs["model"] == model) & (diffs["method"] == method) & (diffs["metric"] == "final_accuracy")]
        assert r["diff_mean"] == pytest.approx(float(d["diff_mean"].iloc[0]))
    assert levels.loc[("chain_a", "oar_g"), "upper_bound"] == "truth"
    trends = table[table["kind"] == "trend"].set_index("method")
    assert set(trends.index) == {"oar_g", "truth", "truth_graded"}
    assert (trends["low"] == "chain_a").all() and (trends["high"] == "chain_b").all()
    md = (results / "tables" / "decisive.md").read_text()
    assert md.startswith("## The decisive reading") and "chain_b (1 remark a step)" in md
    assert "The graded truth gate is not run on chain_a" in md


def test_recall_is_scored_against_the_parsed_decisive_tokens(workflow):
    results = workflow / "results"
    recall = json.loads((results / "analysis" / "causal_recall.json").read_text())
    truth = recall["ground_truth"]
    assert set(truth["summary"]) == {"oar_g", "oar_p", "entropy", "random"}
    assert set(truth["oracle_agreement"]) >= {"precision", "recall", "jaccard"}
    responses = [json.loads(line) for line in (results / "analysis" / "heldout" / "responses.jsonl").open()]
    assert truth["responses"] == len(responses)
    table = pd.read_csv(results / "tables" / "causal_recall.csv")
    assert set(table["reference"]) == {"oracle", "ground_truth"}
    assert "Against the parsed decisive tokens" in (results / "tables" / "causal_recall.md").read_text()


def test_a_policy_without_mixed_groups_stops_before_any_training(tmp_path):
    wd = copy_workflow(tmp_path)
    (wd / "strict.yaml").write_text("models:\n  chain_a:\n    pretrain: {updates: 2, min_mixed_groups: 1.0}\n")
    proc = run(wd, "results/runs/chain_a/grpo-seed0/done", "--cores", "1", configfiles=("chain.yaml", "strict.yaml"))
    log = (wd / "results" / "logs" / "prepare_model" / "chain_a.log").read_text()
    assert proc.returncode != 0
    assert "models.chain_a.pretrain: the pretrained model's sampled pass rate is" in log
    assert "models.chain_a.pretrain.min_mixed_groups = 1.0" in log
    assert not (wd / "results" / "models" / "chain_a").exists()
    assert not (wd / "results" / "logs" / "train").exists()  # no RL job started
