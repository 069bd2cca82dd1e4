"""The Snakemake workflow without running any job: lint, formatting, config validation, the run
registry and the job lists of the paper config and of each named target (dry runs)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from oar.experiment.runs import deep_merge

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
SNAKEFMT = Path(sys.executable).with_name("snakefmt")
DEFAULT = ROOT / "config" / "config.yaml"
ABLATIONS = ROOT / "config" / "ablations.yaml"  # an overlay on DEFAULT (`make run-ablations`)
PAPER = ROOT / "config" / "paper.yaml"
SCHEMA = ROOT / "config" / "schema.yaml"

pytestmark = pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed beside this Python")


def snakemake(*args: str, cwd: Path, configfile: Path | tuple[Path, ...] | None = None) -> subprocess.CompletedProcess:
    """``configfile``: one file, or several merged key by key in order (as ``make run-ablations``)."""
    cmd = [str(SNAKEMAKE), *args, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(cwd)]
    if configfile is not None:
        files = configfile if isinstance(configfile, tuple) else (configfile,)
        cmd += ["--configfile", *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def dry_run(target: str, cwd: Path,
            configfile: Path | tuple[Path, ...] | None = None) -> tuple[Counter, list[tuple[str, dict]]]:
    """(jobs per rule, [(rule, wildcards)]) of ``snakemake -n target``."""
    proc = snakemake(target, "-n", cwd=cwd, configfile=configfile)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs: list[tuple[str, dict]] = []
    current = None
    for line in proc.stdout.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            current = m.group(1)
            jobs.append((current, {}))
            continue
        m = re.match(r"^wildcards: (.*)$", line.strip())
        if m and current is not None:
            jobs[-1] = (current, dict(kv.split("=", 1) for kv in m.group(1).split(", ")))
    return Counter(rule for rule, _ in jobs), jobs


def trained(jobs) -> set[str]:
    return {w["run"] for rule, w in jobs if rule == "train"}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def with_ablations() -> dict:
    """The default with its ablations overlay, merged as ``make run-ablations`` merges them."""
    return deep_merge(load(DEFAULT), load(ABLATIONS))


# ----------------------------------------------------------------------------------- static checks


@pytest.mark.parametrize("configfile", [None, (DEFAULT, ABLATIONS), PAPER], ids=["default", "ablations", "paper"])
def test_lint_passes(tmp_path, configfile):
    proc = snakemake("--lint", cwd=tmp_path, configfile=configfile)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakefmt_clean():
    if not SNAKEFMT.exists():
        pytest.skip("snakefmt is not installed")
    proc = subprocess.run([str(SNAKEFMT), "--check", str(ROOT / "Snakefile"), str(ROOT / "rules")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_default_profile():
    assert not (ROOT / "profiles" / "default").exists()
    for path in (ROOT / "slurm", ROOT / "profiles" / "local"):
        profile = load(path / "config.v8+.yaml")
        assert profile["rerun-incomplete"] is True
    slurm = load(ROOT / "slurm" / "config.v8+.yaml")
    assert slurm["executor"] == "slurm" and slurm["retries"] >= 1 and "slurm-logdir" in slurm
    local = load(ROOT / "profiles" / "local" / "config.v8+.yaml")
    assert local["cores"] == 2 and "gpu=0" in local["resources"]


@pytest.mark.quick  # starts no Snakemake: the schema beside the library's lists and defaults
def test_schema_matches_library():
    """The schema's name lists are the scorer registry's and the methods', its trainer keys and oar defaults
    the library's (a drift would reject valid configs, let invalid ones through to a job, or train under
    other defaults than the docs state)."""
    import dataclasses

    from oar.data.catalogue import DATASETS
    from oar.experiment.config_schema import allowed_names
    from oar.method.names import ADVANTAGE_RULES, DOSES, METHODS, MODEL_SCORERS, PROBE_SCORERS, PROBES, SCORER_NAMES
    from oar.method.scorer_registry import BUILTIN_SCORERS
    from oar.training.settings import TRAINER_DEFAULTS, OARSettings

    schema = load(SCHEMA)
    defs = schema["$defs"]
    lists = {name: node["x-oar-names"] for name, node in defs.items() if "x-oar-names" in node}
    assert lists == {"method": "methods", "gated_method": "gated_methods", "dose_method": "dose_methods",
                     "scorer": "heldout_scorers"}
    builtin = {kind: allowed_names(kind, builtin_only=True) for kind in set(lists.values()) | {"probe_scorers"}}
    assert set(builtin["methods"][0]) == set(METHODS) and builtin["methods"][1]
    assert set(builtin["gated_methods"][0]) == set(METHODS) - {"grpo", *ADVANTAGE_RULES}  # a rule has no gate
    assert set(builtin["dose_methods"][0]) == set(DOSES)
    assert SCORER_NAMES == BUILTIN_SCORERS  # every built-in scorer registered once, in one place
    # held-out scoring runs every scorer but the truth scorers, which read positions only training attaches
    assert set(builtin["heldout_scorers"][0]) == set(MODEL_SCORERS)
    assert set(builtin["probe_scorers"][0]) == set(PROBE_SCORERS) == {"oar_p", "oar_g", "grad_norm", "answer_attention",
                                                                   "oar_g_inverted"}
    assert set(defs["probe"]["enum"]) == set(PROBES)
    assert set(defs["dataset_name"]["enum"]) == set(DATASETS)
    assert set(defs["trainer"]["properties"]) == set(TRAINER_DEFAULTS)
    oar_defaults = {setting.name: setting.default for setting in dataclasses.fields(OARSettings)}
    # a run's grader settings come from the top-level `grading` section (Registry.grading)
    grading = {"fallback_last_number": "last_number", "answer_statement": "answer_statement"}
    assert set(defs["oar"]["properties"]) | set(grading) == set(oar_defaults)
    stated = {key: spec["default"] for key, spec in defs["oar"]["properties"].items()}
    stated |= {key: schema["properties"]["grading"]["properties"][name]["default"] for key, name in grading.items()}
    assert stated == oar_defaults


def test_the_snakefile_wildcards_are_the_registry_names():
    """The scorer, group and probe wildcards are made from the registry's lists, not written out."""
    text = (ROOT / "Snakefile").read_text()
    constraints = text[text.index("wildcard_constraints:"):text.index('include: "rules/data.smk"')]
    assert 'scorer="|".join(map(re.escape, HELDOUT_SCORERS))' in constraints
    assert 'group="|".join(GROUPS_ALL)' in constraints and 'probe="|".join(PROBES)' in constraints
    assert "oar_p" not in constraints and "lt_logits" not in constraints


# ----------------------------------------------------------------------------------- registry


def expected_runs(cfg: dict) -> set[str]:
    """Run ids of a config, computed here independently of rules/common.smk."""
    oar = {"tau": 0.4, "beta": 2.0, "probe": "as_mean", **cfg["training"].get("oar", {})}
    runs_cfg = cfg["runs"]
    models = list(cfg["models"])

    def rid(model, method, seed, tau=None, beta=None, probe=None):
        tau = oar["tau"] if tau is None else tau
        beta = oar["beta"] if beta is None else beta
        probe = oar["probe"] if probe is None else probe
        if method == "grpo":
            return f"{model}/grpo-seed{seed}"
        if method in ("entropy", "position", "random", "truth", "truth_graded", "truth_final", "truth_early"):
            return f"{model}/{method}-tau{float(tau)!r}-beta{float(beta)!r}-seed{seed}"
        return f"{model}/{method}-tau{float(tau)!r}-beta{float(beta)!r}-{probe}-seed{seed}"

    out = set()
    for group in ("main", "gating", "grid", "probes", "controls"):
        spec = runs_cfg.get(group, {})
        if not spec.get("methods"):
            continue
        for model in spec.get("models") or models:
            for seed in spec.get("seeds") or runs_cfg["seeds"]:
                if group in ("main", "controls"):
                    out |= {rid(model, m, seed) for m in spec["methods"]}
                if group in ("gating", "grid", "probes", "controls"):
                    out.add(rid(model, "grpo", seed))
                if group == "controls":
                    out |= {rid(model, m, seed) for m in runs_cfg["main"]["methods"]}
                if group == "gating":
                    out |= {rid(model, m, seed, tau=t) for m in spec["methods"] for t in [*spec["taus"], oar["tau"]]}
                if group == "grid":
                    out |= {rid(model, m, seed, tau=t, beta=b) for m in spec["methods"] for t in spec["taus"]
                            for b in spec["betas"]}
                if group == "probes":
                    out |= {rid(model, m, seed, probe=p) for m in spec["methods"] for p in spec["probes"]}
    return out


def test_paper_dry_run_lists_the_expected_jobs(tmp_path):
    cfg = load(PAPER)
    counts, jobs = dry_run("all", tmp_path, PAPER)
    runs = expected_runs(cfg)
    assert trained(jobs) == runs
    n_models, n_bench = len(cfg["models"]), len(cfg["evaluation"]["benchmarks"])
    n_scores = len({(s, cfg["analysis"]["recall"]["probe"]) for s in cfg["analysis"]["recall"]["scorers"]}
                   | {(s, p) for p in cfg["analysis"]["fidelity"]["probes"]
                      for s in [cfg["analysis"]["fidelity"]["reference"], *cfg["analysis"]["fidelity"]["scorers"]]}
                   | {(s, "as_mean") for s in ("oar_p", "oar_g", "entropy")})
    expected = {
        "fetch_model": n_models,  # both are hub ids
        "prepare_model": n_models,
        "prepare_data": len(cfg["data"]),
        "run_settings": len(runs),
        "train": len(runs),
        "evaluate": (len(runs) + n_models) * n_bench,
        "heldout_responses": 1,
        "oracle": 1,
        "score_heldout": n_scores,
        "accuracy": 5,
        "credit": 5,
        "cost_summary": 1,
        "recall_analysis": 1,
        "fidelity_analysis": 1,
        "paired_analysis": 1,  # ten seeds of each main method, paired
        "table": 10,  # the eight of the paper, paired_differences and the reproduction table
        "figure": 6,  # the five and main_comparison (length_sweep needs the same model at several lengths)
        "html_report": 1,
        "all": 1,
    }
    assert dict(counts) == expected
    # the paper plan's counts (135 training runs: docs/cost.md, docs/slurm.md)
    assert len(runs) == 135 and counts["evaluate"] == 685


ABLATION_TABLES = {"ablation_gating", "ablation_grid", "ablation_probe", "controls"}


def tables(jobs) -> set[str]:
    return {w["name"] for rule, w in jobs if rule == "table"}


def test_default_registry_trains_the_main_runs_only(tmp_path):
    counts, jobs = dry_run("all", tmp_path)
    runs = trained(jobs)
    assert runs == expected_runs(load(DEFAULT))
    assert counts["train"] == len(runs) == 20  # GRPO, the truth gate, OAR-P, OAR-G x 5 paired seeds
    assert not ABLATION_TABLES & tables(jobs)


def test_ablations_overlay_adds_runs_beside_the_main_ones(tmp_path):
    counts, jobs = dry_run("all", tmp_path, (DEFAULT, ABLATIONS))
    runs = trained(jobs)
    cfg = with_ablations()
    assert cfg["training"] == load(DEFAULT)["training"]  # the overlay does not change how runs train
    assert runs == expected_runs(cfg)
    assert expected_runs(load(DEFAULT)) < runs  # the main runs are the same run ids, reused from results/
    models = {r.split("/")[0] for r in runs}
    assert len(models) == 3 and all(f"{m}/grpo-seed0" in runs for m in models)  # one GRPO run per seed and model
    assert ABLATION_TABLES <= tables(jobs)


@pytest.mark.parametrize(
    "target, groups",
    [("ablation_gating", ("gating",)), ("ablation_grid", ("grid",)), ("ablation_probe", ("probes",)),
     ("main_table", ("main",))],
)
def test_ablation_target_trains_only_its_runs(tmp_path, target, groups):
    cfg = with_ablations()
    only = copy.deepcopy(cfg)
    only["runs"] = {"seeds": cfg["runs"]["seeds"], **{g: cfg["runs"][g] for g in groups}}
    for g in ("main", "gating", "grid", "probes", "controls"):
        only["runs"].setdefault(g, {"methods": []})
    counts, jobs = dry_run(target, tmp_path, (DEFAULT, ABLATIONS))
    wanted = expected_runs(only)
    assert trained(jobs) == wanted
    assert len(wanted) < len(expected_runs(cfg))
    evaluated = {w["run"] for rule, w in jobs if rule == "evaluate"}
    assert evaluated == wanted | {f"{r.split('/')[0]}/base" for r in wanted}
    assert not {"oracle", "score_heldout", "heldout_responses"} & set(counts)


def test_ablation_target_without_its_runs_says_where_they_are(tmp_path):
    """On the default (no ablation runs) an ablation target is an error naming the overlay, not a no-op."""
    proc = snakemake("ablation_gating", "-n", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "runs.gating is empty" in out and "config/ablations.yaml" in out, out[-2000:]


@pytest.mark.parametrize("target", ["causal_recall", "fidelity"])
def test_heldout_targets_train_nothing(tmp_path, target):
    counts, _ = dry_run(target, tmp_path)
    assert "train" not in counts and "evaluate" not in counts
    assert counts["score_heldout"] >= 1


# ----------------------------------------------------------------------------------- invalid configs


def _mutate(cfg: dict, path: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    keys = path.split(".")
    node = cfg
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return cfg


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("runs.gating.taus.0", 1.5, "runs.gating.taus.0"),
        ("runs.grid.betas.0", -1.0, "runs.grid.betas.0"),
        ("training.oar.tau", -0.1, "training.oar.tau"),
        ("runs.main.methods.1", "oar_x", "runs.main.methods.1"),
        ("runs.probes.probes.0", "as_median", "runs.probes.probes.0"),
        ("training.trainer.max_stpes", 3, "max_stpes"),
        ("runs.seedz", [0], "seedz"),
        ("data.gsm8k_train.source", "ftp", "data.gsm8k_train.source"),
        ("evaluation.benchmarks", ["gsm8k_test", "math_test"], "evaluation.benchmarks"),
        ("training.trainer.per_device_train_batch_size", 6, "training.trainer.per_device_train_batch_size"),
        ("runs.controls.models", ["qwen"], "runs.controls.models"),
        ("analysis.heldout.dataset", "math12k", "analysis.heldout.dataset"),
        ("grading.last_numbr", True, "last_numbr"),
        ("grading.answer_statement", "yes", "grading.answer_statement"),
        ("training.oar.fallback_last_number", False, "fallback_last_number"),  # now grading.last_number
    ],
)
def test_invalid_config_is_rejected_naming_the_key(tmp_path, path, value, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_mutate(with_ablations(), path, value)))
    proc = snakemake("all", "-n", cwd=tmp_path, configfile=bad)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "config error at" in out and message in out, out[-2000:]
    assert "rule train" not in out  # stopped before planning any job


# `make run-mechanism`
MECHANISM = (ROOT / "config" / "studies" / "decisive.yaml", ROOT / "config" / "studies" / "mechanism.yaml")


def test_the_mechanism_target_plans_the_dose_runs_beside_the_arms(tmp_path):
    """The declared dose-response trains the truth gate at the four ratios other than 1 on the mechanism's
    ten seeds (ratio 1 is the truth arm's runs), evaluates them, and reads them into the mechanism table."""
    counts, jobs = dry_run("mechanism", tmp_path, MECHANISM)
    runs = trained(jobs)
    dose = {r for r in runs if "/truth_dose-" in r}
    assert len(runs) == 100 and len(dose) == 40
    assert {re.search(r"-ratio([0-9.]+)-", r).group(1) for r in dose} == {"0.5", "2.0", "4.0", "8.0"}
    assert {int(r.rsplit("seed", 1)[1]) for r in dose} == set(range(200, 210))
    assert {w["group"] for rule, w in jobs if rule in ("accuracy", "credit")} == {"main", "dose"}
    assert tables(jobs) == {"mechanism", "paired_differences"} and counts["evaluate"] == 101


# `make run-step-balance`
STEP_BALANCE = (ROOT / "config" / "studies" / "decisive.yaml", ROOT / "config" / "studies" / "step-balance.yaml")


def test_the_step_balance_target_plans_its_five_arms_on_38_fresh_seeds(tmp_path):
    """The declared step-balance design: GRPO, the graded truth gate, OAR-G, OAR-G step-balanced and grad_norm on
    the shipped chain_d8, seeds 500-537 (used by no earlier chain_d8 study), evaluated (and the untrained
    policy once, the derailment's reference), read into the mechanism and paired tables."""
    counts, jobs = dry_run("mechanism", tmp_path, STEP_BALANCE)
    runs = trained(jobs)
    assert len(runs) == counts["train"] == 190 and counts["evaluate"] == 191
    arms = {r.split("/")[1].split("-")[0] for r in runs}
    assert arms == {"grpo", "truth_graded", "oar_g", "oar_g_steps", "grad_norm"}
    assert {int(r.rsplit("seed", 1)[1]) for r in runs} == set(range(500, 538))
    assert tables(jobs) == {"mechanism", "paired_differences"} and sum(counts.values()) == 580


def test_a_design_whose_runs_were_made_before_it_stops_before_any_job_naming_the_key(tmp_path):
    """A run of the step-balance design already in the results folder, made at a commit the design's declaring
    commit does not precede (here the repository's first commit), stops the workflow before any job, naming
    analysis.mechanism; the same run made at this checkout's commit plans as usual. A design whose runs are
    missing plans them (the dry run above), and its table stops naming a missing run (oar.analysis.mechanism)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    first = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode or first.returncode:
        pytest.skip("not a git checkout: no declaring commit to check runs against")
    record = tmp_path / "results" / "runs" / "chain_d8" / "oar_g_steps-tau0.4-beta2.0-as_mean-seed500" / "run.yaml"
    record.parent.mkdir(parents=True)
    record.write_text(yaml.safe_dump({"provenance": {"git": {"commit": first.stdout.split()[0], "dirty": False}}}))
    proc = snakemake("mechanism", "-n", cwd=tmp_path, configfile=STEP_BALANCE)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config error at analysis.mechanism: 1 of the design's runs" in out, out[-2000:]
    assert "oar_g_steps-tau0.4-beta2.0-as_mean-seed500" in out and "rule train" not in out
    record.write_text(yaml.safe_dump({"provenance": {"git": {"commit": head.stdout.strip(), "dirty": False}}}))
    assert snakemake("mechanism", "-n", cwd=tmp_path, configfile=STEP_BALANCE).returncode == 0


def test_no_rule_runs_python_inside_snakemake():
    """A rule's `run:` block runs, for a local rule, in a Snakemake process of its own that parses the whole
    workflow again (snakemake/executors/local.py spawns it): 11 s a job on 2 cores, which once cost
    `make run` its first two minutes (one job a training run). Rules run scripts or shell commands."""
    blocks = [f"{path.name}:{number}" for path in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]
              for number, line in enumerate(path.read_text().splitlines(), 1) if re.fullmatch(r"\s+run:\s*", line)]
    assert blocks == []
