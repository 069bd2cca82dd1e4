"""The shipped frozen policies (oar.models.frozen, oar.models.ship): every shipped file is the one its index
hashes, the configs name them by that hash and by the recipe that made them, a declared hash or a recipe
that is not the shipped file's stops the workflow before any job naming the key, a tampered file is never
installed, and a policy shipped from a pretraining installs as a folder that loads with the same weights."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oar.experiment.config_error import ConfigError
from oar.experiment.runs import deep_merge
from oar.models import frozen, ship

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
TRAINER_KEYS = tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"])
# config file -> the model it starts from a shipped policy (an overlay is read over config/studies/decisive.yaml)
SHIPPED = {"config.yaml": "chain_f1", "studies/ceiling.yaml": "chain_d8", "studies/rescue.yaml": "chain_d8",
           "studies/oar-p-credit.yaml": "chain_d8", "studies/step-balance.yaml": "chain_d8"}
OVERLAYS = ("studies/ceiling.yaml", "studies/rescue.yaml", "studies/oar-p-credit.yaml", "studies/step-balance.yaml")


def registry(cfg):
    from snakemake.utils import validate

    from oar.experiment.runs import Registry

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(SCHEMA))
    return Registry(cfg, TRAINER_KEYS)


def config(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("policy", sorted(frozen.index()))
def test_every_shipped_policy_is_the_file_its_index_hashes(policy):
    assert frozen.mismatched_files(policy) == []
    entry = frozen.index()[policy]
    assert set(entry["files"]) == set(ship.MODEL_FILES)
    assert entry["size_bytes"] == sum((frozen.FROZEN_DIR / policy / f).stat().st_size for f in entry["files"])
    card = (frozen.FROZEN_DIR / policy / frozen.CARD).read_text()
    assert entry["files"][frozen.WEIGHTS] in card and "Licence" in card


@pytest.mark.parametrize("file, model", sorted(SHIPPED.items()))
def test_the_configs_start_from_the_shipped_policies(file, model):
    """make run's and the decisive overlays' policy is the shipped file, named by its hash, and the recipe
    the overlay gives it (decisive.yaml's, at the shipped seed) is the one that made it."""
    spec = config(file)["models"][model]
    assert spec["frozen"]["sha256"] == frozen.weights_sha256(spec["frozen"]["policy"])
    cfg = deep_merge(config("studies/decisive.yaml"), config(file)) if file in OVERLAYS else config(file)
    reg = registry(cfg)
    assert reg.frozen_policy(model) == spec["frozen"]["policy"]
    assert cfg["models"][model]["seed"] == frozen.index()[spec["frozen"]["policy"]]["recipe"]["seed"]


def test_a_declared_hash_other_than_the_shipped_one_stops_before_any_job_naming_the_key():
    cfg = config("config.yaml")
    cfg["models"]["chain_f1"]["frozen"]["sha256"] = "0" * 64
    with pytest.raises(ConfigError, match=r"^config error at models\.chain_f1\.frozen\.sha256: '0{64}' is not the "
                                          r"shipped chain_f1's weights"):
        registry(cfg)
    cfg["models"]["chain_f1"]["frozen"] = {"policy": "no_such_policy", "sha256": "0" * 64}
    with pytest.raises(ConfigError, match=r"^config error at models\.chain_f1\.frozen\.policy: no shipped policy"):
        registry(cfg)


def test_a_recipe_that_did_not_make_the_shipped_file_stops_naming_the_key():
    cfg = config("config.yaml")
    cfg["models"]["chain_f1"]["pretrain"]["filler"] = 2
    with pytest.raises(ConfigError, match=r"^config error at models\.chain_f1\.pretrain: the shipped chain_f1 was "
                                          r"pretrained by another recipe: filler 2 \(shipped: 1\)"):
        registry(cfg)
    cfg = config("config.yaml")
    cfg["models"]["chain_f1"]["seed"] = 5
    with pytest.raises(ConfigError, match=r"seed 5 \(shipped: 0\)"):
        registry(cfg)


@pytest.fixture()
def own_shelf(tmp_path, monkeypatch):
    """An empty shelf of shipped policies in tmp_path, and a policy pretrained for 3 updates to ship on it."""
    from oar.training.pretrain import write_testbed_model

    shelf = tmp_path / "frozen"
    shelf.mkdir()
    for module in (frozen, ship):
        monkeypatch.setattr(module, "FROZEN_DIR", shelf)
        monkeypatch.setattr(module, "INDEX", shelf / "policies.json")
    recipe = {"updates": 3, "batch_size": 4, "check_prompts": 2, "check_group": 2, "min_mixed_groups": 0.0}
    model = write_testbed_model(recipe, tmp_path / "pretrained", seed=7)
    summary = {"source": "chain", "pretrain": json.loads((model / "pretrain.json").read_text()),
               "provenance": {"args": {"pretrain": json.dumps(recipe), "seed": 7, "threads": 1},
                              "git": {"commit": "0" * 40}, "created_utc": "2026-11-28T00:00:00+00:00",
                              "cpu_kernels": {"capability": "AVX2", "mkl_branch": "AVX2", "OAR_CPU_KERNELS": "avx2"},
                              "packages": {"torch": "2.13.0+cpu", "transformers": "5.17.0"}}}
    untrained = {"benchmark": "chain_test", "pass@1": 0.25, "pass@1_ci95": [0.2, 0.3], "num_problems": 8,
                 "samples_per_problem": 2, "temperature": 1.0}
    entry = ship.ship("mini", model, summary, untrained, "config/test.yaml", "a test", "A policy for the tests.")
    return shelf, model, entry, {**recipe, "seed": 7}


def test_a_shipped_policy_installs_as_a_folder_that_loads_the_same_weights(own_shelf, tmp_path):
    from safetensors.torch import load_file

    shelf, model, entry, recipe = own_shelf
    assert entry["files"][frozen.WEIGHTS] == frozen.sha256_file(model / frozen.WEIGHTS)
    assert entry["recipe"] == recipe and entry["untrained"]["accuracy"] == 0.25
    assert frozen.check_frozen("m", {"policy": "mini", "sha256": entry["files"][frozen.WEIGHTS]}, recipe) == []
    out = frozen.install("mini", tmp_path / "installed")
    assert not (out / frozen.CARD).exists()  # the card describes the policy; the model folder holds the model
    a, b = load_file(model / frozen.WEIGHTS), load_file(out / frozen.WEIGHTS)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() == entry["parameters"]


def test_a_tampered_shipped_file_is_never_installed(own_shelf, tmp_path):
    shelf, _, entry, recipe = own_shelf
    weights = shelf / "mini" / frozen.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    problems = frozen.check_frozen("m", {"policy": "mini", "sha256": entry["files"][frozen.WEIGHTS]}, recipe)
    assert problems and problems[0][0] == "models.m.frozen.sha256" and "model.safetensors: sha256" in problems[0][1]
    with pytest.raises(frozen.FrozenPolicyError, match="shipped policy mini: model.safetensors: sha256"):
        frozen.install("mini", tmp_path / "installed")
    assert not (tmp_path / "installed").exists()


def test_prepare_model_installs_a_shipped_policy_and_says_so(tmp_path):
    out, summary = tmp_path / "chain_f1", tmp_path / "chain_f1.summary.json"
    subprocess.run([sys.executable, str(ROOT / "workflow_scripts" / "prepare_model.py"), "--source", "chain",
                    "--frozen", "chain_f1", "--model", str(out), "--summary", str(summary)], check=True, cwd=ROOT)
    record = json.loads(summary.read_text())
    assert record["frozen"] == "chain_f1"
    assert record["checksums"][frozen.WEIGHTS] == frozen.weights_sha256("chain_f1")
    assert record["pretrain"]["settings"]["filler"] == 1  # the shipped pretraining report, as a pretraining writes it


# ------------------------------------------------------------------------------ the policy selection

RULE = {"candidates": ["a", "b", "c"], "baseline": "grpo", "pilot_seeds": [900, 901, 902],
        "untrained_accuracy": [0.30, 0.42], "max_derailed": 0, "min_mean_gain": 0.10}


def test_the_selection_reads_each_candidate_by_the_declared_rule():
    from oar.analysis.policy_selection import choose, read_candidate, selection_table

    a = read_candidate("a", 0.35, {900: 0.50, 901: 0.30, 902: 0.55}, RULE)  # one pilot run below 35%
    assert a["derailed"] == 1 and a["gain"] == pytest.approx(0.10) and not a["passes"]
    assert a["reasons"] == ["1 pilot runs below the untrained accuracy (at most 0)"]
    assert choose([a], RULE) is None  # candidates remain: run the next
    b = read_candidate("b", 0.36, {900: 0.50, 901: 0.52, 902: 0.48}, RULE)  # gains 14 points, none below
    assert b["passes"] and choose([a, b], RULE) == {"candidate": "b", "passed": True}
    low = read_candidate("c", 0.25, {900: 0.50, 901: 0.52, 902: 0.48}, RULE)
    assert low["reasons"] == ["untrained 25.00% outside [30, 42]%"]
    # out of range fails whatever the pilots show: read without them, the fallback cannot choose yet
    unread = read_candidate("c", 0.46, None, RULE)
    assert not unread["passes"] and unread["finals"] is None and choose([a, unread], RULE) is None
    assert "not run (fails on its untrained accuracy)" in selection_table([a, unread], RULE, None)
    with pytest.raises(ValueError, match="candidate b's untrained accuracy is in range: its pilots must be read"):
        read_candidate("b", 0.36, None, RULE)
    # none passes: the fewest derailed, then the larger gain
    flat = read_candidate("b", 0.36, {900: 0.40, 901: 0.41, 902: 0.42}, RULE)
    assert choose([a, flat, low], RULE) == {"candidate": "c", "passed": False}
    text = selection_table([a, b], RULE, choose([a, b], RULE))
    assert "**Chosen: b**" in text and "| a | 35.00 | 50.0, 30.0, 55.0 | 1/3 |" in text
    with pytest.raises(ValueError, match="candidate a has no pilot run of seeds \\[902\\]"):
        read_candidate("a", 0.35, {900: 0.5, 901: 0.5}, RULE)


def test_the_declared_selection_rule_matches_its_runs():
    from oar.analysis.policy_selection import check_rule

    cfg = config("studies/decisive.yaml")
    overlay = config("studies/policy-selection.yaml")
    rule = overlay["analysis"]["policy_selection"]
    assert check_rule(rule, list({**cfg["models"], **overlay["models"]}), overlay["runs"]["main"]) == []
    bad = {**overlay["runs"]["main"], "methods": ["grpo", "truth"]}
    assert check_rule(rule, list(overlay["models"]), bad)[0][0] == "analysis.policy_selection.baseline"
    assert check_rule({**rule, "untrained_accuracy": [0.5, 0.4]}, list(overlay["models"]),
                      overlay["runs"]["main"])[0][0] == "analysis.policy_selection.untrained_accuracy"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a pretraining of about 5 minutes on 2 quiet cores, longer beside other work
def test_rebuilding_chain_f1_here_says_whether_this_cpu_gives_the_shipped_bits(tmp_path):
    """The rebuild rule pretrains the shipped recipe again (about 2 minutes on 2 threads) and reports the
    comparison; where the pinned kernels hold (an Intel CPU with AVX2) the bits are the shipped ones."""
    from oar.cpu_kernels import unhonoured

    snakemake = Path(sys.executable).with_name("snakemake")
    if not snakemake.exists():
        pytest.skip("snakemake is not installed beside this Python")
    pinned = unhonoured("avx2") is None
    results = tmp_path / "results"
    subprocess.run([str(snakemake), "--cores", "2", "rebuild_policies", "--config", f"results={results}",
                    *([] if pinned else ["cpu_kernels=none"])], check=True, cwd=ROOT, capture_output=True)
    report = json.loads((results / "models-rebuilt" / "chain_f1.json").read_text())
    assert report["shipped_sha256"] == frozen.weights_sha256("chain_f1")
    assert report["rebuilt_sha256"] == frozen.sha256_file(results / "models-rebuilt" / "chain_f1" / frozen.WEIGHTS)
    assert report["match"] == (report["rebuilt_sha256"] == report["shipped_sha256"])
    if pinned:
        assert report["match"], "a pinned Intel CPU pretrains other bits than the shipped chain_f1"
    log = (results / "logs" / "rebuild_policy" / "chain_f1.log").read_text()
    assert ("rebuilt matches the shipped weights" if report["match"] else "rebuilt DIFFERS FROM") in log


@pytest.mark.parametrize("overlay, table", [("studies/ceiling.yaml", "upper_bound"),
                                            ("studies/rescue.yaml", "mechanism"),
                                            ("studies/step-balance.yaml", "mechanism"),
                                            ("studies/oar-p-credit.yaml", "step_credit")])
def test_each_design_on_the_shipped_policy_plans_its_table(overlay, table):
    """Each design's target has its table to build: the rescue, which runs no GRPO arm, pairs its arms
    against OAR-G."""
    reg = registry(deep_merge(config("studies/decisive.yaml"), config(overlay)))
    assert table in reg.tables
    assert {r.split("/")[0] for r in reg.groups["main"]} == {"chain_d8"}
