"""One training run's settings: their defaults and checks, each written once (torch-free).

A run's settings file (``results/runs/<run_id>/settings.yaml``, written by ``oar.experiment.runs``) may
leave any key out and holds nothing else: ``RunSettings`` is the whole file, ``OARSettings`` its ``oar``
block and ``TRAINER_DEFAULTS`` the project's defaults of its ``trainer`` block (keys of
``trl.GRPOConfig``). ``resolve_settings`` fills in the defaults and checks every key, raising
``SettingsError`` naming the first bad one. The trainer's ``OARConfig`` takes the ``oar`` block's
defaults and checks from ``OARSettings``; config/schema.yaml, the user-facing contract, states the same
defaults (a test keeps them equal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from oar.method.names import ATTENTION_CHOICES, BASELINE, GRAD_PROMPTS, METHODS, PROBES


class SettingsError(ValueError):
    """A run's settings are invalid; the message names the key."""


def _check_number(key: str, default: Any, value: Any) -> None:
    # YAML reads "2e-5" (no dot) as a string; say so here rather than deep inside the optimiser.
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    if numeric and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SettingsError(f"settings key {key!r} must be a number, got {value!r}"
                            + (" (YAML reads 2e-5 as text: write 2.0e-5)" if isinstance(value, str) else ""))


def _check_known(block: str, given: Mapping[str, Any], known) -> None:
    if not isinstance(given, Mapping):
        raise SettingsError(f"settings key {block!r} must be a mapping")
    for key in given:
        if key not in known:
            raise SettingsError(f"unknown settings key '{block}.{key}'; known: {sorted(known)}")


def _setting(default: Any, meaning: str) -> Any:
    """A settings field with its default and what it means (the trainer config's help text)."""
    return field(default=default, metadata={"help": meaning})


@dataclass(frozen=True)
class OARSettings:
    """A run's ``oar`` block (method.md sections 3-7). Paper defaults: tau 0.4, beta 2.

    Values are kept as given (the resolved settings are written out and fingerprinted as they are);
    :meth:`typed` gives each as its field's type."""

    tau: float = _setting(0.4, "fraction of reasoning tokens in the suppression band")
    beta: float = _setting(2.0, "boost strength")
    floor: float = _setting(0.1, "lowest weight before renormalisation")
    probe: str = _setting("as_mean", f"outcome probe, one of {PROBES}")
    warmup_steps: int = _setting(0, "steps that force the lt_logits probe")
    noise_sigma: float = _setting(1e-3, "OAR-G embedding noise (absolute)")
    chunk_tokens: int = _setting(512, "tokens per scoring forward (memory budget)")
    grad_chunk_tokens: int = _setting(0, "tokens per OAR-G / grad_norm micro-batch with grad (0: chunk_tokens)")
    fallback_last_number: bool = _setting(True, "use the last number as the answer span when there is no \\boxed{}")
    answer_statement: bool = _setting(True, "without a \\boxed{}, the answer of a 'The answer is ...' statement")
    own_conclusion: bool = _setting(True, "probes continue a response's own concluding statement (oar.method.probes)")
    substitute: str = _setting("pad", "OAR-P's substitute: 'pad' or a one-token text")
    span_tokens: int = _setting(1, "OAR-P substitutes this many consecutive reasoning tokens at once (1: exact)")
    window_tokens: int = _setting(0, "OAR-P recomputes only this many reasoning tokens after a substitution (0: exact)")
    scoring_attention: str = _setting("no_cudnn", f"the scorers' attention kernels on a GPU, one of {ATTENTION_CHOICES} "
                                                  "(oar.method.attention_kernels)")
    grad_prompt: str = _setting("cached", f"how OAR-G and grad_norm run a probe's prompt, one of {GRAD_PROMPTS}: once into "
                                          "a KV cache, or in every probe's row with no attention mask (flash "
                                          "attention on a GPU) (oar.method.gradient_scorers)")
    score_all: bool = _setting(False, "also score responses with A = 0 (their loss terms are zero anyway): cost "
                                      "measurements")
    log_step_credit: bool = _setting(False, "log each step's share of the weight on the chain task's decisive tokens, "
                                            "last step and earlier steps (oar.method.metrics.step_credit_shares)")
    final_step_ratio: float = _setting(1.0, "the dose methods (oar.method.names.DOSES): the last step's decisive "
                                            "tokens' weight over the earlier steps' decisive tokens' mean weight, "
                                            "mass kept")

    def __post_init__(self):
        for setting in fields(self):
            _check_number(f"oar.{setting.name}", setting.default, getattr(self, setting.name))
        if self.probe not in PROBES:
            raise SettingsError(f"settings key 'oar.probe' must be one of {PROBES}, got {self.probe!r}")
        if not 0.0 <= float(self.tau) <= 1.0:
            raise SettingsError(f"settings key 'oar.tau' must be in [0, 1], got {self.tau}")
        if float(self.beta) < 0:
            raise SettingsError(f"settings key 'oar.beta' must be >= 0, got {self.beta}")
        span = self.span_tokens
        if isinstance(span, bool) or not isinstance(span, int) or span < 1:
            raise SettingsError(f"settings key 'oar.span_tokens' must be an integer >= 1, got {span!r}")
        ratio = float(self.final_step_ratio)
        if not (math.isfinite(ratio) and ratio > 0):
            raise SettingsError(f"settings key 'oar.final_step_ratio' must be a finite number above 0, got "
                                f"{self.final_step_ratio!r}")
        grad_chunk = self.grad_chunk_tokens
        if isinstance(grad_chunk, bool) or not isinstance(grad_chunk, int) or grad_chunk < 0:
            raise SettingsError(f"settings key 'oar.grad_chunk_tokens' must be an integer >= 0, got {grad_chunk!r}")
        window = self.window_tokens
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise SettingsError(f"settings key 'oar.window_tokens' must be an integer >= 0, got {window!r}")
        if self.scoring_attention not in ATTENTION_CHOICES:
            raise SettingsError(f"settings key 'oar.scoring_attention' must be one of {ATTENTION_CHOICES}, got "
                                f"{self.scoring_attention!r}")
        if self.grad_prompt not in GRAD_PROMPTS:
            raise SettingsError(f"settings key 'oar.grad_prompt' must be one of {GRAD_PROMPTS}, got "
                                f"{self.grad_prompt!r}")

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> OARSettings:
        """The settings of an ``oar`` block, which may leave keys out; an unknown key is an error naming it."""
        _check_known("oar", block, {setting.name for setting in fields(cls)})
        return cls(**block)

    def typed(self) -> OARSettings:
        """These settings with each value as its field's type (YAML reads 1 where 1.0 is meant)."""
        cast = {"float": float, "int": int, "bool": bool, "str": str}
        return type(self)(**{s.name: cast[s.type](getattr(self, s.name)) for s in fields(self)})


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


def check_method(method: Any) -> None:
    """A run's ``method`` must be one of ``oar.method.names.METHODS``."""
    if method not in METHODS:
        raise SettingsError(f"settings key 'method' must be one of {METHODS}, got {method!r}")


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
