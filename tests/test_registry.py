"""oar.experiment.runs (with its bases job_resources and job_options) without Snakemake's DAG: run ids,
deduplication of identical settings, the runs each table asks for, evaluation options, resources,
command-line options and config errors naming the key.

The config is filled in with the schema's defaults by oar.experiment.config_schema, as the Snakefile does.
The mechanics are tested on tests/data/registry_config.yaml (every group at full breadth, one seed), so
that tuning the embedded default does not rewrite them; the default's own promises are tested last."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml

from oar.experiment.config_error import ConfigError
from oar.experiment.job_options import cli
from oar.experiment.runs import Registry, deep_merge, is_base, model_of, write_settings

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
TRAINER_KEYS = tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"])


FIXTURE = "../tests/data/registry_config.yaml"


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def resolved(cfg: dict) -> dict:
    """The config as the workflow sees it: validated, schema defaults filled in."""
    from oar.experiment.config_schema import validate

    return validate(copy.deepcopy(cfg))


def registry(cfg: dict | None = None) -> Registry:
    return Registry(resolved(load(FIXTURE) if cfg is None else cfg), TRAINER_KEYS)


GRPO = "smollm2/grpo-seed0"
OAR_G = "smollm2/oar_g-tau0.4-beta2.0-as_mean-seed0"


def test_default_run_ids():
    reg = registry()
    assert sorted(reg.runs) == sorted([
        GRPO,
        "smollm2/oar_p-tau0.4-beta2.0-as_mean-seed0",
        OAR_G,
        "smollm2/oar_g-tau0.0-beta2.0-as_mean-seed0",
        "smollm2/oar_g-tau1.0-beta2.0-as_mean-seed0",
        "smollm2/oar_g-tau0.4-beta1.0-as_mean-seed0",
        "smollm2/oar_g-tau0.7-beta1.0-as_mean-seed0",
        "smollm2/oar_g-tau0.7-beta2.0-as_mean-seed0",
        "smollm2/oar_g-tau0.4-beta2.0-lt_logits-seed0",
        "smollm2/oar_g-tau0.4-beta2.0-as_joint-seed0",
        "smollm2/grad_norm-tau0.4-beta2.0-as_mean-seed0",
        "smollm2/entropy-tau0.4-beta2.0-seed0",  # entropy, position, random ignore the probe
        "smollm2/position-tau0.4-beta2.0-seed0",
        "smollm2/random-tau0.4-beta2.0-seed0",
    ])


def test_identical_settings_are_one_run():
    reg = registry()
    # GRPO is every ablation's reference row, and the gating, grid and probe ablations each contain the
    # main table's OAR-G run (training tau, beta and probe): one run id, one training job
    for group in ("main", "gating", "grid", "probes", "controls"):
        assert GRPO in reg.groups[group]
    for group in ("main", "gating", "grid", "probes"):
        assert OAR_G in reg.groups[group]
    assert len(reg.runs) == len({r for ids in reg.groups.values() for r in ids}) == 14
    for ids in reg.groups.values():
        assert len(ids) == len(set(ids))


def test_each_table_asks_for_its_runs():
    reg = registry()
    assert reg.groups["main"] == [GRPO, "smollm2/oar_p-tau0.4-beta2.0-as_mean-seed0", OAR_G]
    assert reg.groups["gating"] == [GRPO, "smollm2/oar_g-tau0.0-beta2.0-as_mean-seed0", OAR_G,
                                    "smollm2/oar_g-tau1.0-beta2.0-as_mean-seed0"]
    assert reg.groups["probes"] == [GRPO, "smollm2/oar_g-tau0.4-beta2.0-lt_logits-seed0", OAR_G,
                                    "smollm2/oar_g-tau0.4-beta2.0-as_joint-seed0"]
    assert len(reg.groups["grid"]) == 1 + 2 * 2
    assert reg.groups["controls"][:3] == reg.groups["main"] and len(reg.groups["controls"]) == 7
    # evaluations: the base model first, then the group's runs, on every benchmark
    assert reg.eval_runs("gating") == ["smollm2/base", *reg.groups["gating"]]
    assert reg.summaries(["smollm2/base"]) == ["results/eval/smollm2/base/gsm8k_test/summary.json",
                                               "results/eval/smollm2/base/math500/summary.json"]
    assert reg.metrics_files(reg.eval_runs("main")) == [f"results/runs/{r}/metrics.jsonl" for r in reg.groups["main"]]
    assert reg.tables == ["main_table", "ablation_gating", "ablation_grid", "ablation_probe", "controls", "cost",
                          "causal_recall", "fidelity"]
    assert reg.table_files("ablation_probe") == ["results/tables/ablation_probe.csv",
                                                 "results/tables/ablation_probe.md"]


def test_a_group_can_be_evaluated_on_fewer_benchmarks():
    cfg = load(FIXTURE)
    everything = list(cfg["evaluation"]["benchmarks"])
    cfg["runs"]["gating"]["benchmarks"] = everything[:1]
    reg = registry(cfg)
    assert reg.group_benchmarks("gating") == everything[:1] and reg.group_benchmarks("main") == everything
    assert reg.table_benchmarks("ablation_gating") == everything[:1] and reg.table_benchmarks("cost") == everything
    assert reg.summaries(["smollm2/base"], reg.group_benchmarks("gating")) == [
        f"results/eval/smollm2/base/{everything[0]}/summary.json"]
    cfg["runs"]["gating"]["benchmarks"] = ["aime24"]
    with pytest.raises(ConfigError, match=r"^config error at runs.gating.benchmarks: 'aime24' is not in"):
        registry(cfg)


def test_empty_groups_drop_their_tables_and_figures():
    cfg = load(FIXTURE)
    for group in ("grid", "controls"):
        cfg["runs"][group] = {"methods": []}
    reg = registry(cfg)
    assert reg.groups["grid"] == [] and reg.groups["controls"] == []
    assert "ablation_grid" not in reg.tables and "controls" not in reg.tables
    assert "grid_heatmap" not in reg.figures and reg.figure_files("grid_heatmap") == []
    assert reg.cost_group == "main"
    assert len(reg.runs) == 14 - 3 - 4  # the three grid-only runs and the four controls are gone


def test_run_settings_resolve_what_a_method_ignores():
    reg = registry()
    grpo, entropy = reg.runs[GRPO], reg.runs["smollm2/entropy-tau0.4-beta2.0-seed0"]
    assert grpo["method"] == "grpo" and grpo["seed"] == 0
    assert grpo["model"] == "results/models/smollm2" and grpo["train_file"] == "results/data/gsm8k_train.jsonl"
    assert grpo["oar"]["probe"] == entropy["oar"]["probe"] == "as_mean"
    probe = reg.runs["smollm2/oar_g-tau0.4-beta2.0-as_joint-seed0"]
    assert probe["oar"]["probe"] == "as_joint" and probe["oar"]["tau"] == 0.4
    grid = reg.runs["smollm2/oar_g-tau0.7-beta1.0-as_mean-seed0"]
    assert (grid["oar"]["tau"], grid["oar"]["beta"]) == (0.7, 1.0)
    assert grid["trainer"]["num_generations"] == 4


def test_model_overrides_and_seeds():
    cfg = load(FIXTURE)
    cfg["models"]["other"] = {"source": "tiny", "trainer": {"num_generations": 2},
                              "evaluation": {"max_new_tokens": 7}, "resources": {"train": {"threads": 3}}}
    cfg["runs"]["seeds"] = [0, 1]
    cfg["runs"]["grid"]["models"] = ["other"]
    cfg["runs"]["grid"]["seeds"] = [5]
    reg = registry(cfg)
    assert {model_of(r) for r in reg.groups["grid"]} == {"other"}
    assert all(r.endswith("-seed5") for r in reg.groups["grid"])
    assert "smollm2/grpo-seed1" in reg.groups["main"] and "other/grpo-seed1" in reg.groups["main"]
    assert reg.runs["other/grpo-seed0"]["trainer"]["num_generations"] == 2
    assert reg.runs[GRPO]["trainer"]["num_generations"] == 4
    assert reg.jobs.eval_settings("other", "math500")["max_new_tokens"] == 7
    assert reg.jobs.eval_settings("smollm2", "math500")["max_new_tokens"] == 80
    assert (reg.resources.resource_set("train", "other")["threads"] == 3
            and reg.resources.resource_set("train")["threads"] == 1)
    assert reg.resources.threads_vary_by_model("train") and not reg.resources.threads_vary_by_model("evaluate")
    assert reg.eval_runs()[:2] == ["smollm2/base", "other/base"] and is_base("other/base")


def test_paper_config_has_135_runs():
    # ten seeds of the main comparison (analysis.primary.min_seeds), three of the ablations and controls
    reg = registry(load("paper.yaml"))
    assert len(reg.runs) == 135
    assert len(reg.eval_runs()) * len(reg.benchmarks) == 685
    assert reg.primary == {"baseline": "grpo", "arms": ["oar_p", "oar_g"], "metric": "final_accuracy",
                           "min_seeds": 10, "seeds": list(range(10)),
                           # Holm's family as declared: both arms on both policies
                           "family": [["qwen2.5-math-1.5b", "oar_p"], ["qwen2.5-math-1.5b", "oar_g"],
                                      ["qwen2.5-7b", "oar_p"], ["qwen2.5-7b", "oar_g"]]}


def test_declared_primary_comparisons_pass_with_enough_seeds():
    cfg = _set(load(FIXTURE), "runs.main.seeds", [0, 1])
    reg = registry(_set(cfg, "analysis.primary", {"arms": ["oar_g"], "min_seeds": 2}))
    assert reg.primary["baseline"] == "grpo" and reg.primary["metric"] == "final_accuracy"
    assert registry().primary is None  # none declared: every comparison exploratory
    assert reg.comparisons_not_run() == []  # the fixture runs the gating ablation and the grid
    assert registry(_set(cfg, "runs.grid.methods", [])).comparisons_not_run() == [
        "trend over reshaping strength (runs.grid)"]


def test_command_line_options():
    reg = registry()
    train = reg.jobs.prepare_data_options("gsm8k_train")
    assert train["source"] == "packaged" and train["on_overlap"] == "exclude"  # the schema default
    assert reg.jobs.prepare_data_options("gsm8k_test")["on_overlap"] is None
    assert reg.jobs.against("gsm8k_train") == ["results/data/gsm8k_test.jsonl", "results/data/math500.jsonl"]
    assert reg.jobs.against("math500") == []
    line = cli(dataset="x y", skip_bad_rows=True, limit=None, quiet=False, levels=[3, 4])
    assert shlex.split(line) == ["--dataset", "x y", "--skip-bad-rows", "--levels", "3", "4"]


def test_write_settings_round_trips(tmp_path):
    reg = registry()
    path = tmp_path / "settings.yaml"
    write_settings(str(path), reg.runs[OAR_G])
    assert yaml.safe_load(path.read_text()) == reg.runs[OAR_G]
    assert not (tmp_path / "settings.yaml.tmp").exists()


def _set(cfg: dict, path: str, value) -> dict:
    cfg = copy.deepcopy(cfg)
    *parents, last = path.split(".")
    node = cfg
    for k in parents:
        node = node.setdefault(k, {})
    node[last] = value
    return cfg


@pytest.mark.parametrize("path, value, key", [
    ("training.dataset", "math12k", "training.dataset"),
    ("evaluation.benchmarks", ["gsm8k_test", "math_test"], "evaluation.benchmarks"),
    ("evaluation.per_benchmark", {"amc23": {"n": 2}}, "evaluation.per_benchmark.amc23"),
    ("analysis.heldout.dataset", "math12k", "analysis.heldout.dataset"),
    ("analysis.model", "qwen", "analysis.model"),
    ("runs.controls.models", ["qwen"], "runs.controls.models"),
    ("training.trainer.per_device_train_batch_size", 6, "training.trainer.per_device_train_batch_size"),
    ("models.smollm2.trainer", {"num_generations": 3}, "models.smollm2.trainer.per_device_train_batch_size"),
    ("analysis.fidelity.scorers", ["oar_p", "oar_g"], "analysis.fidelity.scorers"),
    ("analysis.paired.reward_gain", 0.1, "analysis.paired.reward_gain"),  # beside the default reward_threshold
    # a declared primary arm that runs.main does not run, and too few paired seeds for the declared design
    ("analysis.primary", {"arms": ["oar_p", "entropy"], "min_seeds": 2}, "analysis.primary.arms"),
    ("analysis.primary", {"arms": ["oar_p", "oar_g"]}, "analysis.primary.min_seeds"),  # 1 seed, default 10
    ("analysis.primary", {"arms": ["oar_p"], "baseline": "oar_g", "min_seeds": 2}, "analysis.primary.baseline"),
])
def test_config_error_names_the_key(path, value, key):
    cfg = _set(load(FIXTURE), path, value)
    with pytest.raises(ConfigError, match=rf"^config error at {key}: ") as err:
        registry(cfg)
    assert err.value.key == key


def test_unknown_trainer_key_is_named():
    cfg = load(FIXTURE)
    reg_cfg = resolved(cfg)
    reg_cfg["models"]["smollm2"]["trainer"] = {"max_stpes": 3}  # past the schema, as a model override
    with pytest.raises(ConfigError, match=r"models.smollm2.trainer: unknown keys \['max_stpes'\]"):
        Registry(reg_cfg, TRAINER_KEYS)


def test_vllm_options_reach_vllm_evaluations_only():
    reg = registry()
    assert "gpu_memory_utilization" not in reg.jobs.eval_settings("smollm2", "gsm8k_test")  # transformers backend
    cfg = load(FIXTURE)
    cfg["evaluation"]["backend"] = "vllm"
    cfg["evaluation"]["per_benchmark"] = {"math500": {"enforce_eager": True, "gpu_memory_utilization": 0.8}}
    reg = registry(cfg)
    assert reg.jobs.eval_settings("smollm2", "gsm8k_test")["gpu_memory_utilization"] == 0.5  # the schema default
    options = shlex.split(cli(**reg.jobs.eval_settings("smollm2", "math500")))
    assert "--enforce-eager" in options
    assert options[options.index("--gpu-memory-utilization") + 1] == "0.8"


def test_embedded_default_is_the_testbed_with_paired_seeds():
    """config/config.yaml is the credit-assignment testbed: a chain-task policy pretrained in the workflow,
    GRPO / OAR-P / OAR-G with five paired seeds on it, the OAR arms scoring only rows with an advantage,
    the held-out chain split evaluated and parsed for its decisive tokens. config/ablations.yaml adds the
    length sweep (three filler levels) and the ablations with three seeds each, reusing the main runs."""
    default = load("config.yaml")
    reg = registry(default)
    cfg = reg.config
    assert cfg["training"]["dataset"] == "chain_train" and cfg["training"]["oar"]["score_all"] is False
    assert [spec["source"] for spec in cfg["models"].values()] == ["chain"]
    assert set(reg.runs) == set(reg.groups["main"])  # the main comparison only
    assert {reg.runs[r]["method"] for r in reg.groups["main"]} == {"grpo", "truth", "oar_p", "oar_g"}
    assert len({reg.runs[r]["seed"] for r in reg.groups["main"]}) >= 5
    assert reg.group_benchmarks("main") == ["chain_test"] and reg.has_ground_truth() and reg.has_paired()
    assert "paired_differences" in reg.tables and "main_comparison" in reg.figures

    full = registry(deep_merge(default, load("ablations.yaml")))
    fillers = sorted(full.config["models"][m]["pretrain"]["filler"] for m in full.paired_models())
    assert len(fillers) >= 3 and len(set(fillers)) == len(fillers) and "length_sweep" in full.figures
    assert "length_sweep" in full.tables and "length_sweep" not in reg.tables
    for group in ("gating", "grid", "probes", "controls"):
        assert full.groups[group]
        assert len({full.runs[r]["seed"] for r in full.groups[group]}) >= 3
    grid = {(full.runs[r]["oar"]["tau"], full.runs[r]["oar"]["beta"]) for r in full.groups["grid"]}
    assert len({t for t, _ in grid}) >= 3 and len({b for _, b in grid}) >= 3
    assert {r: full.runs[r] for r in reg.runs} == reg.runs  # the main runs are the same runs


def test_the_decisive_run_pairs_seven_arms_over_ten_seeds_at_two_distractor_levels():
    reg = registry(load("studies/decisive.yaml"))
    assert reg.config["training"]["dataset"] == "chain5_train" and reg.has_ground_truth()
    levels = {m: reg.config["models"][m]["pretrain"]["distractors"] for m in reg.paired_models()}
    assert len(set(levels.values())) >= 2 and all(reg.config["models"][m]["pretrain"]["steps"] == 5 for m in levels)
    assert {reg.runs[r]["method"] for r in reg.groups["main"]} == {"grpo", "truth", "truth_graded", "oar_p", "oar_g",
                                                                    "entropy", "truth_final"}
    assert len({reg.runs[r]["seed"] for r in reg.groups["main"]}) >= 10
    assert "gradient_share" in reg.tables


def test_the_run_part_of_the_decisive_run_is_its_own_runs():
    full = registry(load("studies/decisive.yaml"))
    part = registry(deep_merge(load("studies/decisive.yaml"), load("studies/decisive-part.yaml")))
    assert {part.runs[r]["method"] for r in part.groups["main"]} == {"grpo", "truth", "truth_graded", "oar_g",
                                                                     "entropy"}
    assert {r.split("/")[0] for r in part.groups["main"]} == {"chain_d0", "chain_d8"}
    assert len(part.groups["main"]) == 10 * (4 + 5)  # no graded truth gate on chain_d0
    assert "decisive" in part.tables
    assert all(part.runs[r] == full.runs[r] for r in part.runs)  # the same runs the full design trains


def test_the_smollm2_experiment_keeps_its_config():
    reg = registry(load("smollm2.yaml"))
    assert (reg.config["models"]["smollm2"]["source"] == "packaged"
            and reg.config["training"]["dataset"] == "arith_train")
    full = registry(deep_merge(load("smollm2.yaml"), load("smollm2-ablations.yaml")))
    assert all(full.groups[g] for g in ("gating", "grid", "probes", "controls"))


def test_pretrain_settings_need_source_chain_and_default_to_the_training_sampling():
    cfg = load("config.yaml")
    reg = registry(cfg)
    import json

    settings = json.loads(reg.pretrain_settings("chain_f1"))
    assert settings["check_temperature"] == cfg["training"]["trainer"]["temperature"]
    assert settings["check_group"] == cfg["training"]["trainer"]["num_generations"]
    bad = copy.deepcopy(load(FIXTURE))
    bad["models"]["smollm2"]["pretrain"] = {"filler": 1}
    with pytest.raises(ConfigError, match="models.smollm2.pretrain"):
        registry(bad)


def test_exact_oar_p_leaves_window_tokens_out_of_run_settings():
    """Exact OAR-P (window 0) adds no key to a run's settings, so runs made before the setting existed
    keep their settings and are not retrained; a window is passed on."""
    from oar.training.settings import resolve_settings

    settings = registry().run_settings("smollm2", "oar_p", 0)
    assert "window_tokens" not in settings["oar"]
    assert resolve_settings(settings)["oar"]["window_tokens"] == 0
    cfg = load(FIXTURE)
    cfg["training"]["oar"]["window_tokens"] = 32
    assert registry(cfg).run_settings("smollm2", "oar_p", 0)["oar"]["window_tokens"] == 32


def test_scoring_attention_is_in_run_settings_only_off_its_default():
    """The scorers' attention kernels at their default (no cuDNN) add no key to a run's settings, so runs
    made before the setting existed are not retrained; torch's own choice is passed on, and a value
    outside the schema's stops at config load naming the key."""
    from oar.training.settings import SettingsError, resolve_settings

    settings = registry().run_settings("smollm2", "oar_g", 0)
    assert "scoring_attention" not in settings["oar"]
    assert resolve_settings(settings)["oar"]["scoring_attention"] == "no_cudnn"
    cfg = load(FIXTURE)
    cfg["training"]["oar"]["scoring_attention"] = "torch_default"
    assert registry(cfg).run_settings("smollm2", "oar_g", 0)["oar"]["scoring_attention"] == "torch_default"
    with pytest.raises(SettingsError, match="'oar.scoring_attention' must be one of"):
        resolve_settings({**settings, "oar": {**settings["oar"], "scoring_attention": "cudnn"}})
    bad = load(FIXTURE)
    bad["training"]["oar"]["scoring_attention"] = "cudnn"
    with pytest.raises(Exception, match="'cudnn' is not one of"):  # the schema's enum, at validation
        registry(bad)


def test_grad_prompt_is_in_run_settings_only_off_its_default():
    """OAR-G's prompt cached (the default) adds no key to a run's settings, so earlier runs are not
    retrained; inline is passed on (the paper config's), and a value outside the schema's stops at config
    load naming the key."""
    from oar.training.settings import SettingsError, resolve_settings

    settings = registry().run_settings("smollm2", "oar_g", 0)
    assert "grad_prompt" not in settings["oar"]
    assert resolve_settings(settings)["oar"]["grad_prompt"] == "cached"
    cfg = load(FIXTURE)
    cfg["training"]["oar"]["grad_prompt"] = "inline"
    assert registry(cfg).run_settings("smollm2", "oar_g", 0)["oar"]["grad_prompt"] == "inline"
    with pytest.raises(SettingsError, match="'oar.grad_prompt' must be one of"):
        resolve_settings({**settings, "oar": {**settings["oar"], "grad_prompt": "flash"}})
    bad = load(FIXTURE)
    bad["training"]["oar"]["grad_prompt"] = "flash"
    with pytest.raises(Exception, match="'flash' is not one of"):  # the schema's enum, at validation
        registry(bad)


def test_the_step_credit_log_is_in_run_settings_only_when_asked():
    """Off (the default) it adds no key, so runs made before the setting existed are not retrained; on,
    every method's run carries it, GRPO's too (the mediator is compared across arms)."""
    from oar.training.settings import resolve_settings

    settings = registry().run_settings("smollm2", "grpo", 0)
    assert "log_step_credit" not in settings["oar"]
    assert resolve_settings(settings)["oar"]["log_step_credit"] is False
    cfg = load(FIXTURE)
    cfg["training"]["oar"]["log_step_credit"] = True
    assert all(registry(cfg).run_settings("smollm2", m, 0)["oar"]["log_step_credit"] for m in ("grpo", "oar_g"))


def test_grading_reaches_rewards_probes_and_evaluation():
    reg = registry()
    oar = reg.run_settings("smollm2", "oar_g", 0)["oar"]
    assert (oar["answer_statement"], oar["fallback_last_number"]) == (True, True)  # the schema's defaults
    assert "--no-answer-statement" not in cli(**reg.jobs.eval_settings("smollm2", "math500"))

    cfg = load(FIXTURE)
    cfg["grading"] = {"answer_statement": False, "last_number": False}
    reg = registry(cfg)
    oar = reg.run_settings("smollm2", "oar_g", 0)["oar"]
    assert (oar["answer_statement"], oar["fallback_last_number"]) == (False, False)
    options = shlex.split(cli(**reg.jobs.eval_settings("smollm2", "math500")))
    assert "--no-answer-statement" in options and "--no-fallback-last-number" in options


def _schema_error_path(cfg: dict) -> str:
    """The key of the schema error that resolving ``cfg`` raises (what the Snakefile reports)."""
    with pytest.raises(ConfigError) as err:
        resolved(cfg)
    return err.value.key


@pytest.mark.parametrize("value", [0, -1, 1.5, "step"])
def test_schema_rejects_a_span_width_below_one_naming_the_key(value):
    """training.oar.span_tokens (OAR-P's substitution width) is an integer >= 1; the Snakefile reports the
    schema's error path as ``config error at training.oar.span_tokens``."""
    cfg = _set(load(FIXTURE), "training.oar.span_tokens", value)
    assert _schema_error_path(cfg) == "training.oar.span_tokens"


def test_schema_default_span_is_exact_oar_p():
    assert resolved(load(FIXTURE))["training"]["oar"]["span_tokens"] == 1
    assert resolved(load(FIXTURE))["training"]["oar"]["window_tokens"] == 0


@pytest.mark.parametrize("value", [-1, 2.5, "local"])
def test_schema_rejects_a_bad_window_naming_the_key(value):
    cfg = _set(load(FIXTURE), "training.oar.window_tokens", value)
    assert _schema_error_path(cfg) == "training.oar.window_tokens"


@pytest.mark.parametrize("value", [-1, 2.5, "big"])
def test_schema_rejects_a_bad_grad_chunk_naming_the_key(value):
    cfg = _set(load(FIXTURE), "training.oar.grad_chunk_tokens", value)
    assert _schema_error_path(cfg) == "training.oar.grad_chunk_tokens"
    assert resolved(load(FIXTURE))["training"]["oar"]["grad_chunk_tokens"] == 0  # 0: chunk_tokens


# ------------------------------------------------------------------------------ the dose-response's runs


def _dose_config(**dose) -> dict:
    """The decisive run's config with a dose group on chain_d8 (and the overrides given)."""
    cfg = load("studies/decisive.yaml")
    cfg["runs"]["dose"] = {"models": ["chain_d8"], "methods": ["truth_dose"], "ratios": [0.5, 1, 4], "seeds": [3, 4],
                           **dose}
    return cfg


def test_a_dose_run_has_its_ratio_in_its_id_and_settings_and_ratio_1_is_the_truth_gates_run():
    reg = registry(_dose_config())
    assert reg.groups["dose"] == ["chain_d8/truth_dose-tau0.4-beta2.0-ratio0.5-seed3",
                                  "chain_d8/truth-tau0.4-beta2.0-seed3",
                                  "chain_d8/truth_dose-tau0.4-beta2.0-ratio4.0-seed3",
                                  "chain_d8/truth_dose-tau0.4-beta2.0-ratio0.5-seed4",
                                  "chain_d8/truth-tau0.4-beta2.0-seed4",
                                  "chain_d8/truth_dose-tau0.4-beta2.0-ratio4.0-seed4"]
    dosed = reg.runs["chain_d8/truth_dose-tau0.4-beta2.0-ratio4.0-seed3"]
    assert dosed["method"] == "truth_dose" and dosed["oar"]["final_step_ratio"] == 4.0
    # ratio 1 is the truth gate's run, the one runs.main trains (same id, same settings)
    assert reg.runs["chain_d8/truth-tau0.4-beta2.0-seed3"] == reg.run_settings("chain_d8", "truth", 3)
    assert reg.run_id("chain_d8", "truth_dose", 3, ratio=1) == "chain_d8/truth-tau0.4-beta2.0-seed3"
    # only a dose reads the ratio: every other run leaves it out, its settings as before the key existed
    assert all("final_step_ratio" not in s["oar"] for r, s in reg.runs.items() if s["method"] != "truth_dose")
    # a dose in runs.main takes training.oar.final_step_ratio
    cfg = _dose_config()
    cfg["runs"]["main"]["methods"] = [*cfg["runs"]["main"]["methods"], "truth_dose"]
    cfg["training"]["oar"]["final_step_ratio"] = 2
    main = registry(cfg).groups["main"]
    assert "chain_d8/truth_dose-tau0.4-beta2.0-ratio2.0-seed0" in main


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "studies/decisive.yaml", "studies/upper-bound.yaml",
                                  "smollm2.yaml", "studies/mechanism.yaml"])
def test_no_run_but_a_dose_has_a_ratio_in_its_id_or_settings(name):
    """The ratio is a dimension of the dose runs only: every shipped config's other runs keep their ids and
    settings (oar.final_step_ratio, a key of every resolved config, is left out of them)."""
    cfg = load(name) if name in ("config.yaml", "paper.yaml", "studies/decisive.yaml", "smollm2.yaml") \
        else deep_merge(load("studies/decisive.yaml"), load(name))
    reg = registry(cfg)
    assert reg.config["training"]["oar"]["final_step_ratio"] == 1.0
    for run, settings in reg.runs.items():
        dose = settings["method"] == "truth_dose"
        assert ("-ratio" in run) == dose and ("final_step_ratio" in settings["oar"]) == dose, run
    assert bool(reg.groups["dose"]) == (name == "studies/mechanism.yaml")


@pytest.mark.parametrize("dose, key", [
    ({"ratios": []}, "runs.dose.ratios"),
    ({"ratios": [0]}, "runs.dose.ratios.0"),
    ({"ratios": [2, -1]}, "runs.dose.ratios.1"),
    ({"ratios": ["2"]}, "runs.dose.ratios.0"),
    ({"ratios": [2, 2.0]}, "runs.dose.ratios"),
    ({"methods": ["truth"]}, "runs.dose.methods.0"),
])
def test_schema_rejects_bad_dose_levels_naming_the_key(dose, key):
    assert _schema_error_path(_dose_config(**dose)) == key


def test_bad_dose_levels_stop_the_registry_naming_the_key():
    """What the schema cannot say, or a config that skipped it: the registry's own checks."""
    cfg = _dose_config()
    del cfg["runs"]["dose"]["ratios"]
    with pytest.raises(ConfigError, match=r"^config error at runs.dose.ratios: None: runs.dose needs its ratios"):
        registry(cfg)
    for ratios, shown in (([0.5, 0], "0"), (["4"], "'4'"), ([float("inf")], "inf"), ([True], "True"), ([], "\\[\\]")):
        cfg = resolved(_dose_config())
        cfg["runs"]["dose"]["ratios"] = ratios
        with pytest.raises(ConfigError, match=rf"^config error at runs.dose.ratios: {shown}"):
            Registry(cfg, TRAINER_KEYS)
    cfg = resolved(_dose_config())
    cfg["runs"]["dose"]["ratios"] = [2, 2.0]
    with pytest.raises(ConfigError, match=r"^config error at runs.dose.ratios: \[2, 2.0\] repeats a ratio"):
        Registry(cfg, TRAINER_KEYS)
    # the dose reads the chain task's parsed steps, as the rescue does
    cfg = load(FIXTURE)
    cfg["runs"]["dose"] = {"methods": ["truth_dose"], "ratios": [2]}
    with pytest.raises(ConfigError, match=r"^config error at runs.dose.methods: method 'truth_dose' reads"):
        registry(cfg)
    cfg["runs"]["dose"] = {}
    cfg["runs"]["main"]["methods"] = ["grpo", "oar_g_rescue"]
    with pytest.raises(ConfigError, match=r"^config error at runs.main.methods: method 'oar_g_rescue' reads"):
        registry(cfg)


@pytest.mark.parametrize("value", [0, -0.5, "4"])
def test_schema_rejects_a_bad_final_step_ratio_naming_the_key(value):
    cfg = _set(load(FIXTURE), "training.oar.final_step_ratio", value)
    assert _schema_error_path(cfg) == "training.oar.final_step_ratio"


@pytest.mark.parametrize("value, message", [(0.0, "must be a finite number above 0"),
                                            (float("nan"), "must be a finite number above 0"),
                                            ("4", "must be a number")])
def test_run_settings_reject_a_bad_final_step_ratio_naming_the_key(value, message):
    from oar.training.settings import SettingsError, resolve_settings

    settings = registry(_dose_config()).runs["chain_d8/truth_dose-tau0.4-beta2.0-ratio4.0-seed3"]
    settings = {**settings, "oar": {**settings["oar"], "final_step_ratio": value}}
    with pytest.raises(SettingsError, match=f"'oar.final_step_ratio' {message}"):
        resolve_settings(settings)
