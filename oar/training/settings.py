"""One training run's settings: their defaults and checks, each written once (torch-free).

A run's settings file (``results/runs/<run_id>/settings.yaml``, written by ``oar.experiment.runs``) may
leave any key out and holds nothing else: ``RunSettings`` is the whole file, ``OARSettings`` its ``oar``
block and ``TRAINER_DEFAULTS`` the project's defaults of its ``trainer`` block (keys of
``trl.GRPOConfig``). ``resolve_settings`` fills in the defaults and checks every key, raising
``SettingsError`` naming the first bad one. ``OARSettings`` holds the gate's and the trainer's own
settings and takes every scorer setting, with its default and check, from
``oar.method.scorer_config.ScorerConfig``; the trainer's ``OARConfig`` takes the whole ``oar`` block from
``OARSettings`` the same way. config/schema.yaml, the user-facing contract, states the same defaults (a
test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from oar.method.answer_spans import MATHS_CONCLUSION, finder_problem, pattern_problem
from oar.method.names import BASELINE, check_method as _check_method
from oar.method.scorer_config import (ScorerConfig, SettingError, check_fields, flag, integer, number, one_of,
                                      setting, text)
from oar.method.steps import MATHS_DELIMITER, delimiter_problem


class SettingsError(ValueError):
    """A run's settings are invalid; the message names the key. Where one ``oar`` setting's value fails its
    check, ``setting`` is its bare name (``tau``) and ``problem`` what the value must be, so that a caller
    that spells the setting otherwise (``OARConfig``'s ``oar_tau``) names it as its user typed it."""

    def __init__(self, message: str, setting: str | None = None, problem: str | None = None):
        super().__init__(message)
        self.setting = setting
        self.problem = problem


def _check_number(key: str, default: Any, value: Any) -> None:
    # YAML reads "2e-5" (no dot) as a string; say so here rather than deep inside the optimiser.
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    if numeric and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SettingsError(f"settings key {key!r} must be a number, got {value!r}"
                            + (" (YAML reads 2e-5 as text: write 2.0e-5)" if isinstance(value, str) else ""))


def added_setting(default: Any, meaning: str, check) -> Any:
    """A setting added after checkpoints carried the fingerprint of their run's resolved settings
    (``oar.training.run``): written to a run's settings file only where it is set (``when_set``), and left
    out of the fingerprint at its default (:func:`fingerprinted`), so that the runs made before it keep
    their settings, their checkpoints and so their numbers."""
    declared = setting(default, meaning, check)
    return field(default=default, metadata={**declared.metadata, "fingerprint": "when_set"})


def _check_known(block: str, given: Mapping[str, Any], known) -> None:
    if not isinstance(given, Mapping):
        raise SettingsError(f"settings key {block!r} must be a mapping")
    for key in given:
        if key not in known:
            raise SettingsError(f"unknown settings key '{block}.{key}'; known: {sorted(known)}")


def with_fields_of(source: type) -> Any:
    """Class decorator, applied before ``@dataclass``: the class gets every field of the dataclass
    ``source`` (default, metadata, type) after its own, so a setting is written once, in ``source``."""
    def add(cls: type) -> type:
        annotations = cls.__dict__.get("__annotations__", {})
        for f in fields(source):
            if f.name in annotations:
                raise TypeError(f"{cls.__name__}.{f.name} is already {source.__name__}'s field")
            annotations[f.name] = f.type
            setattr(cls, f.name, field(default=f.default, metadata=f.metadata) if f.default is not MISSING
                    else field(default_factory=f.default_factory, metadata=f.metadata))
        cls.__annotations__ = annotations
        return cls
    return add


SAMPLERS = ("transformers", "lean")


@dataclass(frozen=True)
@with_fields_of(ScorerConfig)
class OARSettings:
    """A run's ``oar`` block (method.md sections 3-7). Paper defaults: tau 0.4, beta 2. The gate's and the
    trainer's settings are written here; the scorers' come from ``ScorerConfig`` (after these).

    Values are kept as given (the resolved settings are written out and fingerprinted as they are);
    :meth:`typed` gives each as its field's type."""

    tau: float = setting(0.4, "fraction of reasoning tokens in the suppression band", number(at_least=0, at_most=1),
                         written="always")
    beta: float = setting(2.0, "boost strength", number(at_least=0), written="always")
    floor: float = setting(0.1, "lowest weight before renormalisation", number(above=0, at_most=1), written="always")
    warmup_steps: int = setting(0, "steps that force the lt_logits probe", integer(0), written="always")
    fallback_last_number: bool = setting(True, "use the last number as the answer span when there is no \\boxed{}",
                                         flag, written="always")
    answer_statement: bool = setting(True, "without a \\boxed{}, the answer of a 'The answer is ...' statement", flag,
                                     written="always")
    own_conclusion: bool = setting(True, "probes continue a response's own concluding statement (oar.method.probes)",
                                   flag, written="always")
    substitute: str = setting("pad", "OAR-P's substitute: 'pad' or a one-token text", text, written="always")
    score_all: bool = setting(False, "also score responses with A = 0 (their loss terms are zero anyway): cost "
                                     "measurements", flag, written="always")
    log_step_credit: bool = setting(False, "log each step's share of the weight on the chain task's decisive tokens, "
                                           "last step and earlier steps (oar.method.metrics.step_credit_shares)", flag)
    final_step_ratio: float = setting(1.0, "the dose methods (oar.method.names.DOSES): the last step's decisive "
                                           "tokens' weight over the earlier steps' decisive tokens' mean weight, "
                                           "mass kept", number(above=0))
    # What the outcome is (oar.method.answer_spans): the maths defaults, or a task's own answer format.
    conclusion: str = added_setting(MATHS_CONCLUSION, "the text the probes append after the reasoning, leading "
                                                      "into the answer (the maths default ends in \\boxed{)", text)
    answer_pattern: str = added_setting("", "a regular expression whose one group is the answer, e.g. "
                                            "'Label:(\\s*\\w+)' ('': the maths rules: the last \\boxed{}, an "
                                            "'answer is' statement, the last number)", pattern_problem)
    answer_finder: str = added_setting("", "import path package.module:function of a function taking a response's "
                                           "text and returning its answer's character span (start, end) or None "
                                           "('': the maths rules)", finder_problem)
    # How training samples its responses on a CPU without vLLM (oar.models.lean_sampling): transformers'
    # generate, or the lean loop over a static KV cache for a small Llama policy (the same distribution).
    sampler: str = added_setting("transformers", f"how training samples on a CPU without vLLM, one of {SAMPLERS}: "
                                                 "transformers' generate, or the lean loop for a small Llama "
                                                 "policy (oar.models.lean_sampling)", one_of(SAMPLERS))

    # The step balance (oar.method.steps): a gate option that needs no ground truth.
    step_balance: bool = added_setting(False, "hold each reasoning step's share of the gate's weight to its share of "
                                              "the reasoning tokens, the mass kept (oar.method.steps)", flag)
    step_delimiter: str = added_setting(MATHS_DELIMITER, "a regular expression between a response's reasoning "
                                                         "steps, read by the step balance (the maths default: a "
                                                         "blank line)", delimiter_problem)

    def __post_init__(self):
        try:
            check_fields(self)
        except SettingError as error:  # named as the settings file spells it, in its oar block
            raise SettingsError(f"settings key 'oar.{error.key}' {error.problem}", setting=error.key,
                                problem=error.problem) from None
        if self.answer_pattern and self.answer_finder:
            problem = "is set beside answer_finder: the answer span is found by one of them"
            raise SettingsError(f"settings key 'oar.answer_pattern' {problem}", setting="answer_pattern",
                                problem=problem)

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> OARSettings:
        """The settings of an ``oar`` block, which may leave keys out; an unknown key is an error naming it."""
        _check_known("oar", block, {setting.name for setting in fields(cls)})
        return cls(**block)

    def typed(self) -> OARSettings:
        """These settings with each value as its field's type (YAML reads 1 where 1.0 is meant)."""
        cast = {"float": float, "int": int, "bool": bool, "str": str}
        return type(self)(**{s.name: cast[s.type](getattr(self, s.name)) for s in fields(self)})

    def scorer_config(self) -> ScorerConfig:
        """The scorers' settings among these (built once per run)."""
        return ScorerConfig.of(self)


def fingerprinted(resolved: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved settings (:func:`resolve_settings`) a run's checkpoints are fingerprinted by: all of
    them, except the ``oar`` settings declared by :func:`added_setting` while at their defaults."""
    defaults = {f.name: f.default for f in fields(OARSettings) if f.metadata.get("fingerprint") == "when_set"}
    oar = {name: value for name, value in resolved["oar"].items()
           if name not in defaults or value != defaults[name]}
    return {**resolved, "oar": oar}


def written_at_default(name: str) -> bool:
    """Whether a run's settings file holds the ``oar`` setting ``name`` also at its default (``written:
    always``); the others are left out there (a setting added later leaves earlier runs as they were)."""
    return {f.name: f for f in fields(OARSettings)}[name].metadata["written"] == "always"


# The project's defaults of a run's ``trainer`` block, passed to trl.GRPOConfig (its keys, and only these).
# The loss is the paper's: loss_type grpo, no KL, eps 0.2, group scaling.
TRAINER_DEFAULTS: dict[str, Any] = {
    "max_steps": 4,
    "num_generations": 4,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 1e-6,
    "max_completion_length": 128,
    "temperature": 1.0,
    "top_p": 1.0,
    "save_steps": 2,
    # Checkpoints kept per run (the newest complete ones; transformers deletes older ones only after a
    # new checkpoint is fully written, so resume always has one). Each holds weights and optimiser state.
    "save_total_limit": 2,
    "logging_steps": 1,
    "bf16": "auto",
    "gradient_checkpointing": False,
    "use_vllm": False,
    "vllm_mode": "colocate",
    "vllm_gpu_memory_utilization": 0.3,
    # vLLM's context window (prompt + completion); None = the model's own, which can be far larger than
    # needed (131,072 for Qwen2.5-7B) and then too large for a colocated engine's KV cache.
    "vllm_max_model_length": None,
    "vllm_enable_sleep_mode": False,
    "loss_type": "grpo",
    "beta": 0.0,
    "epsilon": 0.2,
    "scale_rewards": "group",
    # TRL's 80/20 entropy mask of the loss ("Beyond the 80/20 Rule"); 1.0 keeps every token (TRL's default)
    "top_entropy_quantile": 1.0,
    "optim": "adamw_torch",
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    # Experiment trackers of transformers' Trainer: "none", "tensorboard" (event files under
    # checkpoints/runs/, offline), "wandb" (WANDB_MODE=offline works without network), or a list.
    "report_to": "none",
}

MODEL_DTYPES = ("float32", "bfloat16")


def grad_budget(oar: Mapping[str, Any]) -> int:
    """Tokens of one OAR-G / grad_norm micro-batch with grad under an ``oar`` block: its
    ``grad_chunk_tokens``, or ``chunk_tokens`` where that is 0 or absent."""
    return oar.get("grad_chunk_tokens") or oar["chunk_tokens"]


def check_method(method: Any, named: str = "settings key 'method'") -> None:
    """A run's ``method`` must be GRPO, an intervention or a scorer (registered or by import path); the
    error calls it ``named``, as the caller's user spells it (``OARConfig``: its field ``oar_method``)."""
    try:
        _check_method(method)
    except ValueError as error:
        raise SettingsError(f"{named}: {error}") from None


@dataclass(frozen=True)
class RunSettings:
    """One run's settings file; ``run_id``, ``model`` and ``train_file`` are required."""

    run_id: str | None = None
    method: str = BASELINE
    seed: int = 0
    model: str | None = None
    train_file: str | None = None
    train_limit: int | None = None
    # Weights' dtype: float32 (master weights; bf16 then means autocast) or bfloat16 (halves memory on GPU).
    model_dtype: str = "float32"
    oar: OARSettings = field(default_factory=OARSettings)
    trainer: Mapping[str, Any] = field(default_factory=lambda: dict(TRAINER_DEFAULTS))

    def __post_init__(self):
        for key in ("run_id", "model", "train_file"):
            if not getattr(self, key):
                raise SettingsError(f"settings key {key!r} is required")
        if self.model_dtype not in MODEL_DTYPES:
            raise SettingsError(f"settings key 'model_dtype' must be float32 or bfloat16, got {self.model_dtype!r}")
        check_method(self.method)
        if self.trainer["per_device_train_batch_size"] % self.trainer["num_generations"]:
            raise SettingsError(
                "settings key 'trainer.per_device_train_batch_size' must be a multiple of 'trainer.num_generations'"
            )

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> RunSettings:
        """The settings of a settings file's mapping, defaults filled in; raises SettingsError naming the
        first bad key."""
        known = {setting.name for setting in fields(cls)}
        given = dict(settings)
        for key in given:
            if key not in known:
                raise SettingsError(f"unknown settings key {key!r}; known: {sorted(known)}")
        if "oar" in given:
            given["oar"] = OARSettings.of(given["oar"])
        if "trainer" in given:
            _check_known("trainer", given["trainer"], TRAINER_DEFAULTS)
            for key, value in given["trainer"].items():
                _check_number(f"trainer.{key}", TRAINER_DEFAULTS[key], value)
            given["trainer"] = {**TRAINER_DEFAULTS, **given["trainer"]}
        return cls(**given)


def resolve_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults filled in and every key checked; raises SettingsError naming the first bad key. The values
    are the ones given, in the order of the fields above (the resolved settings are written to run.yaml
    and fingerprinted as they are)."""
    return asdict(RunSettings.of(settings))
