"""The cross-key checks of a workflow config that a JSON schema cannot express: datasets prepared,
models and benchmarks named, the declared designs run (each registered study's own checks, ``oar.studies``),
the chain task's methods on chain data, each model's trainer and oar settings, the jobs' resources.
:func:`check_config` runs them on a run registry being built (``oar.experiment.runs.Registry``, passed in:
this module does not import it) and raises :class:`ConfigError` naming the first bad key.
"""

from __future__ import annotations

import json

from oar.experiment.config_error import ConfigError
from oar.method.names import PARSED_SCORERS, is_gated, reads_parsed_steps, reads_steps
from oar.studies.catalogue import STUDIES

GROUPS = ("main", "gating", "grid", "probes", "controls", "dose")  # the run registry's groups


def check_config(reg) -> None:
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
    for study in STUDIES.values():
        study.check(reg)
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
    _check_step_delimiter(reg)
    _check_reference_model(config)
    fidelity = config["analysis"]["fidelity"]
    if fidelity["reference"] in fidelity["scorers"]:
        raise ConfigError("analysis.fidelity.scorers", "lists the reference scorer itself")
    reg.resources.check_resources()

def _check_frozen(reg, name: str) -> None:
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


def _check_chain_task(reg) -> None:
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



REFERENCE_TEXTS = 8  # the chain task's reference solutions a step delimiter is tried on


def _check_step_delimiter(reg) -> None:
    """A model whose runs split their responses into steps (oar.step_balance on a gated method, or a method
    that reads the steps: oar_g_steps) has a step delimiter that cuts the task's own texts: on the chain task,
    the reasoning of the grammar's reference solutions of the first training problems, written with the
    model's pretraining knobs (what its responses look like). A delimiter that splits none of them into two
    steps would balance nothing. Other tasks have no reference text before their data is prepared: there
    the trainer checks the first batch's responses (oar.training.grpo_trainer)."""
    import random

    from oar.data import chains
    from oar.data.catalogue import chain_steps
    from oar.method.steps import count_steps

    config = reg.config
    steps = chain_steps(config["training"]["dataset"])
    if steps is None:
        return
    for name, spec in config["models"].items():
        oar = reg.oar_settings(name)
        methods = {m for group in GROUPS for m in config["runs"][group].get("methods", [])
                   if name in reg.group_models(config["runs"][group])}
        if not any(reads_steps(m) or (oar.get("step_balance") and is_gated(m)) for m in methods):
            continue
        knobs = spec.get("pretrain") or {}
        rng = random.Random(0)
        texts = [chains.solution(chains.problem("train", i, steps), rng, filler=knobs.get("filler", 0),
                                 error_rate=knobs.get("error_rate", 0.0), distractors=knobs.get("distractors", 0))[0]
                 for i in range(REFERENCE_TEXTS)]
        reasoning = [t[: t.find(chains.FINAL.split("\\")[0].rstrip())].rstrip() for t in texts]
        delimiter = oar["step_delimiter"]
        if not any(count_steps(text, delimiter) > 1 for text in reasoning):
            key = (f"models.{name}.oar.step_delimiter" if "step_delimiter" in config["models"][name]["oar"]
                   else "training.oar.step_delimiter")
            raise ConfigError(key, f"{delimiter!r} splits none of the chain task's {REFERENCE_TEXTS} reference "
                                   f"solutions into steps (e.g. {reasoning[0][:60]!r}...): the step balance would "
                                   "change nothing; the chain task writes its steps as sentences, '\\.\\s'")
