"""The scorers' settings, each written once with its default, meaning and check: ``ScorerConfig``
(torch-free, so a script's options and the settings file's checks can read it before torch loads).

A scorer setting is one field here. Everything else reads the fields: a run's ``oar`` settings
(``oar.training.settings.OARSettings``) and the trainer's ``OARConfig`` take them with their defaults and
checks, the held-out scoring script makes an option of each, and the run registry passes them on. Adding
a setting therefore touches three files: this one, ``config/schema.yaml`` (the user-facing contract, tested
equal) and the scorer that reads it.

The settings are built once per run; what changes per call (the outcome probe during warm-up, the seed of
each step and process) travels with the call (``oar.method.scorer_contract.ScoringBatch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from oar.method.names import ATTENTION_CHOICES, GRAD_PROMPTS, PROBES


class SettingError(ValueError):
    """A setting's value fails its check; ``key`` names the setting."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key} {message}")
        self.key = key
        self.problem = message


# ------------------------------------------------------------------------------- checks
# Each check returns None for a good value or says what the value must be.

Check = Callable[[Any], "str | None"]


def integer(minimum: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            return f"must be an integer >= {minimum}, got {value!r}"
        return None
    return check


def number(above: float | None = None, at_least: float | None = None, at_most: float | None = None) -> Check:
    """A finite number within the bounds given (YAML reads 2e-5 without a dot as text: said so)."""
    if at_least is not None and at_most is not None:
        wanted = f"in [{at_least}, {at_most}]"
    else:
        wanted = "a finite number" + (f" above {above}" if above is not None else "") + \
            (f" >= {at_least}" if at_least is not None else "") + (f" <= {at_most}" if at_most is not None else "")
        if above is not None and at_most is not None:
            wanted = f"in ({above}, {at_most}]"

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = " (YAML reads 2e-5 as text: write 2.0e-5)" if isinstance(value, str) else ""
            return f"must be a number, got {value!r}{hint}"
        if not math.isfinite(value) or (above is not None and value <= above) or \
                (at_least is not None and value < at_least) or (at_most is not None and value > at_most):
            return f"must be {wanted}, got {value!r}"
        return None
    return check


def one_of(choices: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {choices}, got {value!r}"
    return check


def flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


def text(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty string, got {value!r}"


def setting(default: Any, meaning: str, check: Check, written: str = "when_set") -> Any:
    """A settings field: its default, what it means (the trainer config's help), its check, and whether a
    run's settings file holds it always (``always``) or only where it differs from the default
    (``when_set``: a setting added after runs were made leaves their settings, and so the runs, as they
    were)."""
    if written not in ("always", "when_set"):
        raise ValueError(f"written must be 'always' or 'when_set', got {written!r}")
    return field(default=default, metadata={"help": meaning, "check": check, "written": written})


def check_fields(instance: Any, prefix: str = "") -> None:
    """Run every field's check; raise :class:`SettingError` naming the first bad field."""
    for f in fields(instance):
        check = f.metadata.get("check")
        problem = check(getattr(instance, f.name)) if check else None
        if problem:
            raise SettingError(f"{prefix}{f.name}", problem)


@dataclass(frozen=True)
class ScorerConfig:
    """Settings shared by every scorer (each field's help says what it does; the longer story is below).

    chunk_tokens: OAR-P's substituted copies of all responses of a call are stacked into forwards of at most
        this many new tokens (rows x longest row), and every scorer groups probes up to this many tokens.
        Smaller chunks pad less but launch more forwards: 512 was fastest on 2 CPU cores
        (perf/scoring_cost.py); on a GPU, where a forward's fixed cost dominates, use several thousand.
    grad_chunk_tokens: set it where ``chunk_tokens`` is sized for OAR-P's no-grad forwards beyond what
        OAR-G's forwards with grad fit (config/paper.yaml's 7B model).
    span_tokens: a width w runs about R / w substituted suffixes instead of R (cost ~R^2 / (2 w)
        token-forwards).
    window_tokens: ``oar.method.substitution.window_substitution_scores``; cost ~R x (window + tail)
        token-forwards.
    grad_prompt: ``cached`` runs each distinct prompt once into a KV cache under the probes' left-padded
        rows (a 4D mask: on a GPU the memory-efficient attention kernel); ``inline`` runs every probe's
        whole sequence in a right-padded row with no mask (causal attention alone: flash attention on a
        GPU), the prompt recomputed per probe. The same scores to float rounding.
    """

    probe: str = setting("as_mean", f"outcome probe of the scorers, one of {PROBES} (lt_logits during the "
                                    "warm-up steps)", one_of(PROBES), written="always")
    noise_sigma: float = setting(1e-3, "OAR-G's absolute Gaussian noise on the reasoning embeddings (the KL "
                                       "gradient is zero at the clean point)", number(above=0), written="always")
    chunk_tokens: int = setting(512, "tokens per scoring forward (memory budget)", integer(1), written="always")
    grad_chunk_tokens: int = setting(0, "tokens per OAR-G / grad_norm micro-batch with grad (0: chunk_tokens)",
                                     integer(0))
    span_tokens: int = setting(1, "OAR-P substitutes this many consecutive reasoning tokens at once and gives the "
                                  "span's divergence to each (1: exact)", integer(1), written="always")
    window_tokens: int = setting(0, "OAR-P recomputes only this many reasoning tokens after a substitution, and "
                                    "the conclusion and answer (0: the whole suffix, exact)", integer(0))
    entropy_top_fraction: float = setting(1.0, "the entropy control scores each response's highest-entropy fraction "
                                               "of reasoning tokens by their entropy and the rest 0 (0.2: the 80/20 "
                                               "rule's top 20 percent; 1: every token)", number(above=0, at_most=1))
    scoring_attention: str = setting("no_cudnn", f"the scorers' attention kernels on a GPU, one of "
                                                 f"{ATTENTION_CHOICES} (oar.method.attention_kernels)",
                                     one_of(ATTENTION_CHOICES))
    grad_prompt: str = setting("cached", f"how OAR-G and grad_norm run a probe's prompt, one of {GRAD_PROMPTS}: "
                                         "once into a KV cache, or in every probe's row with no attention mask "
                                         "(flash attention on a GPU) (oar.method.gradient_scorers)",
                               one_of(GRAD_PROMPTS))

    def __post_init__(self):
        check_fields(self)

    @property
    def grad_budget(self) -> int:
        """Tokens of one micro-batch with grad (OAR-G, grad_norm)."""
        return self.grad_chunk_tokens or self.chunk_tokens

    @classmethod
    def of(cls, settings: Any) -> ScorerConfig:
        """The scorer settings among ``settings`` (a mapping or an object with these attributes, such as
        ``OARSettings``); anything else in it is left alone."""
        names = [f.name for f in fields(cls)]
        if hasattr(settings, "keys"):
            return cls(**{name: settings[name] for name in names if name in settings})
        return cls(**{name: getattr(settings, name) for name in names})


SCORER_SETTINGS = tuple(f.name for f in fields(ScorerConfig))
