"""The cross-key checks of a workflow config that a JSON schema cannot express: datasets prepared,
models and benchmarks named, the declared designs run, the chain task's methods on chain data, each
model's trainer and oar settings, the jobs' resources. :func:`check_config` runs them on a run registry
being built (``oar.experiment.runs.Registry``) and raises :class:`ConfigError` naming the first bad key.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from oar.experiment.config_error import ConfigError
from oar.method.names import DOSES, PARSED_SCORERS, reads_parsed_steps

if TYPE_CHECKING:
    from oar.experiment.runs import Registry

GROUPS = ("main", "gating", "grid", "probes", "controls", "dose")  # the run registry's groups


def check_config(reg: Registry) -> None:
    """Cross-key checks that a JSON schema cannot express; each error names its key."""
    config = reg.config
    models, data = set(config["models"]), config["data"]
    if config["training"]["dataset"] not in data:
        raise ConfigError(
            "training.dataset", f"{config['training']['dataset']!r} is not prepared: add it under `data`"
        )
    for b in config["evaluation"]["benchmarks"]:
        if b not in data:
            raise ConfigError("evaluation.benchmarks", f"{b!r} is not prepared: add it under `data`")
    for b in config["evaluation"]["per_benchmark"]:
        if b not in config["evaluation"]["benchmarks"]:
            raise ConfigError(f"evaluation.per_benchmark.{b}", "not in evaluation.benchmarks")
    heldout = config["analysis"]["heldout"]["dataset"]
    if heldout not in data:
        raise ConfigError("analysis.heldout.dataset", f"{heldout!r} is not prepared: add it under `data`")
    if config["analysis"]["model"] is not None and config["analysis"]["model"] not in models:
        raise ConfigError("analysis.model", f"{config['analysis']['model']!r} is not a key of `models`")
    for name, spec in data.items():
        if spec.get("source") == "local" and "path" not in spec:
            raise ConfigError(f"data.{name}.path", "source 'local' needs a path")
    for group in GROUPS:
        for m in config["runs"][group].get("models") or []:
            if m not in models:
                raise ConfigError(f"runs.{group}.models", f"{m!r} is not a key of `models`")
        for b in config["runs"][group].get("benchmarks") or []:
            if b not in config["evaluation"]["benchmarks"]:
                raise ConfigError(f"runs.{group}.benchmarks", f"{b!r} is not in evaluation.benchmarks")
    paired = config["analysis"]["paired"]
    if (paired["reward_threshold"] is None) == (paired.get("reward_gain") is None):
        raise ConfigError("analysis.paired.reward_gain",
                          "set exactly one of analysis.paired.reward_threshold and analysis.paired.reward_gain "
                          f"(got {paired['reward_threshold']} and {paired.get('reward_gain')})")
    _check_primary(reg)
    _check_upper_bound(reg)
    _check_policy_selection(reg)
    _check_mechanism(reg)
    _check_dose(reg)
    oar_keys = set(config["training"]["oar"])  # every OAR key, its schema default filled in
    for name in config["models"]:
        if config["models"][name].get("pretrain") and config["models"][name]["source"] != "chain":
            raise ConfigError(f"models.{name}.pretrain", "pretraining settings need source 'chain'")
        _check_frozen(reg, name)
        unknown = set(config["models"][name]["oar"]) - oar_keys
        if unknown:
            raise ConfigError(f"models.{name}.oar", f"unknown keys {sorted(unknown)} (use {sorted(oar_keys)})")
        trainer = reg.trainer_settings(name)
        unknown = set(trainer) - set(reg.trainer_keys)
        if unknown:
            raise ConfigError(f"models.{name}.trainer", f"unknown keys {sorted(unknown)} (use {reg.trainer_keys})")
        if trainer["per_device_train_batch_size"] % trainer["num_generations"]:
            where = f"models.{name}.trainer" if config["models"][name]["trainer"] else "training.trainer"
            raise ConfigError(
                f"{where}.per_device_train_batch_size",
                f"{trainer['per_device_train_batch_size']} is not a multiple of "
                f"num_generations = {trainer['num_generations']}",
            )
    _check_chain_task(reg)
    _check_reference_model(config)
    fidelity = config["analysis"]["fidelity"]
    if fidelity["reference"] in fidelity["scorers"]:
        raise ConfigError("analysis.fidelity.scorers", "lists the reference scorer itself")
    reg.resources.check_resources()

def _check_primary(reg: Registry) -> None:
    """The declared primary comparisons (analysis.primary) are run: the baseline is the paired
    analysis's, and each arm and the baseline run in runs.main on at least min_seeds seeds."""
    primary = reg.config["analysis"].get("primary")
    if not primary:
        return
    main = reg.config["runs"]["main"]
    baseline = primary.get("baseline", "grpo")
    if baseline != reg.config["analysis"]["paired"]["baseline"]:
        raise ConfigError("analysis.primary.baseline",
                          f"{baseline!r} is not analysis.paired.baseline "
                          f"({reg.config['analysis']['paired']['baseline']!r})")
    for method in [baseline, *primary["arms"]]:
        if method not in main["methods"]:
            key = "analysis.primary.baseline" if method == baseline else "analysis.primary.arms"
            raise ConfigError(key, f"{method!r} is not run in runs.main.methods {list(main['methods'])}")
    seeds = reg.group_seeds(main)
    need = primary.get("min_seeds", 10)
    if len(set(seeds)) < need:
        raise ConfigError("analysis.primary.min_seeds",
                          f"the primary comparisons need {need} paired seeds, runs.main runs {len(set(seeds))} "
                          f"({list(seeds)}); add seeds to runs.main.seeds or declare fewer with the design's reason")

def _check_frozen(reg: Registry, name: str) -> None:
    """A shipped policy must be the declared file, made by the recipe the config states (before any job)."""
    from oar.models.frozen import check_frozen

    spec = reg.config["models"][name]
    if not spec.get("frozen"):
        return
    if spec["source"] != "chain":
        raise ConfigError(f"models.{name}.frozen", "a shipped policy is a testbed policy: it needs source 'chain'")
    recipe = {**json.loads(reg.pretrain_settings(name)), "seed": spec.get("seed", 0)}
    problems = check_frozen(name, spec["frozen"], recipe)
    if problems:
        raise ConfigError(*problems[0])


def _check_policy_selection(reg: Registry) -> None:
    rule = reg.config["analysis"].get("policy_selection")
    if not rule:
        return
    from oar.analysis.policy_selection import check_rule

    problems = check_rule(rule, list(reg.config["models"]), reg.config["runs"]["main"])
    if problems:
        raise ConfigError(*problems[0])


def _check_upper_bound(reg: Registry) -> None:
    """The upper-bound test (analysis.upper_bound), declared before its runs: margin, level and looks in
    range, fresh seeds, two arms, an exclusion rule that reads only what precedes the first update."""
    design = reg.config["analysis"].get("upper_bound")
    if not design:
        return
    from oar.analysis.upper_bound import check_design

    main = dict(reg.config["runs"]["main"])
    main["models"] = reg.group_models(main)
    main["seeds"] = reg.group_seeds(main)
    problems = check_design(design, main)
    if problems:
        raise ConfigError(*problems[0])
    if reg.config["analysis"].get("primary"):
        raise ConfigError("analysis.primary", "the upper-bound test is this config's one decision; set "
                          "analysis.primary to null (a second family would need its own correction)")

def _check_mechanism(reg: Registry) -> None:
    """The declared contrasts (analysis.mechanism): arms run in runs.main, balanced, tests and margins in
    range, and its step-error tests read on a chain task; one family per config (analysis.primary null)."""
    design = reg.config["analysis"].get("mechanism")
    if not design:
        return
    from oar.analysis import step_errors
    from oar.analysis.mechanism import check_design
    from oar.data.catalogue import chain_steps

    main = reg.config["runs"]["main"]
    problems = check_design(design, list(main["methods"]), reg.group_models(main))
    # the step errors are read where the contrasts' accuracies are: the paired benchmark
    benchmark = (reg.config["analysis"]["paired"]["benchmark"]
                 or (main.get("benchmarks") or reg.config["evaluation"]["benchmarks"])[0])
    problems += step_errors.check_design(design.get("step_errors"), list(main["methods"]), chain_steps(benchmark),
                                         benchmark)
    if problems:
        raise ConfigError(*problems[0])
    if reg.config["analysis"].get("primary") or reg.config["analysis"].get("upper_bound"):
        raise ConfigError("analysis.mechanism", "the contrasts are this config's decision family; set "
                          "analysis.primary and analysis.upper_bound to null")

def _check_dose(reg: Registry) -> None:
    """The dose runs (runs.dose: every dose method at every ratio, methods and ratios given together)
    and their declared trend test (analysis.dose_response: its runs planned, a mechanism table to be
    written into)."""
    spec = reg.config["runs"].get("dose") or {}
    if spec:
        for key in ("methods", "ratios"):
            if not spec.get(key):
                raise ConfigError(f"runs.dose.{key}", f"{spec.get(key)!r}: runs.dose needs its {key}, at least "
                                  "one (or leave runs.dose out)")
        for m in spec["methods"]:
            if m not in DOSES:
                raise ConfigError("runs.dose.methods", f"{m!r} is not a dose method {list(DOSES)}")
        for r in spec["ratios"]:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
                raise ConfigError("runs.dose.ratios", f"{r!r} is not a ratio: a finite number above 0")
        if len({float(r) for r in spec["ratios"]}) != len(spec["ratios"]):
            raise ConfigError("runs.dose.ratios", f"{spec['ratios']} repeats a ratio")
    design = reg.config["analysis"].get("dose_response")
    if not design:
        return
    from oar.analysis.dose_response import check_design

    dose = {**spec, "models": reg.group_models(spec), "seeds": reg.group_seeds(spec)} if spec else {}
    problems = check_design(design, dose)
    if problems:
        raise ConfigError(*problems[0])
    if not reg.config["analysis"].get("mechanism"):
        raise ConfigError("analysis.dose_response", "its reading is a section of the mechanism table: "
                          "declare analysis.mechanism beside it")

def _check_reference_model(config: dict) -> None:
    """A scorer that reads a reference model (PRIME's implicit reward) gets the KL term's in a workflow run:
    with training.trainer.beta 0 there is none, and the run would stop only once its model loaded."""
    from oar.method.names import scorer_of
    from oar.method.scorer_registry import scorer_spec

    if config["training"]["trainer"].get("beta", 0.0) > 0:
        return
    for group in GROUPS:
        for method in config["runs"][group].get("methods", []):
            scorer = scorer_of(method)
            if scorer is not None and scorer_spec(scorer).reads("reference_model"):
                raise ConfigError(f"runs.{group}.methods",
                                  f"method {method!r} reads a reference model, which a workflow run takes from "
                                  "the KL term: set training.trainer.beta above 0, or train it in your own "
                                  "script with OARTrainer(reference_model=...)")


def _check_chain_task(reg: Registry) -> None:
    """The methods that read the decisive tokens parsed from the chain task's grammar (the truth
    scorers, the rescue, the dose) train on it, and a chain policy is pretrained on chains of as many
    steps as the RL data has."""
    from oar.data.catalogue import chain_steps

    config = reg.config
    steps = chain_steps(config["training"]["dataset"])
    for group in GROUPS:
        parsed = [m for m in config["runs"][group].get("methods", []) if reads_parsed_steps(m)]
        if parsed and steps is None:
            raise ConfigError(f"runs.{group}.methods",
                              f"method {parsed[0]!r} reads the decisive tokens parsed from the chain task's "
                              f"responses; training.dataset {config['training']['dataset']!r} has none to parse")
        truth = [m for m in parsed if m in PARSED_SCORERS]
        models = reg.group_models(config["runs"][group])
        if "truth_graded" in truth and all(reg.graded_equals_truth(m, "truth_graded") for m in models):
            raise ConfigError(f"runs.{group}.methods",
                              f"'truth_graded' on {models}: these policies write no remarks or notes, so its "
                              "weights equal the truth gate's; run 'truth', or a policy with "
                              "models.<name>.pretrain.filler or .distractors above 0")
    for name, spec in config["models"].items():
        if spec["source"] != "chain" or steps is None:
            continue
        pretrain_steps = (spec.get("pretrain") or {}).get("steps", 3)
        if pretrain_steps != steps:
            raise ConfigError(f"models.{name}.pretrain.steps",
                              f"{pretrain_steps} steps, but training.dataset {config['training']['dataset']!r} "
                              f"has chains of {steps}")

