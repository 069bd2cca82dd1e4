"""Interventions on a scorer's gated weights, registered by name: ``register_transform`` (torch-free).

An intervention is a method that trains with a built-in scorer's weights (the bi-level gate's,
``oar.method.gate.gate``) changed by one function before they scale GRPO's advantages. Every such function
has one signature,

    transform(weights, reasoning_mask, probes, settings) -> weights

with ``weights`` and ``reasoning_mask`` [B, T] (the gate's weights and the scorer's reasoning positions),
``probes`` the rows' :class:`~oar.method.probes.Probe` (with the chain task's parsed positions where the
transform declares it reads them) and ``settings`` the run's ``oar`` block (``oar.training.settings.
OARSettings``; a transform reads the settings it declares, e.g. ``final_step_ratio``). It returns the new
[B, T] weights. The trainer applies a method's transform after the gate and names none of them, so adding
an intervention is one :func:`register_transform` call: its name is then a method everywhere a method is
taken (``oar.method.names``, the trainer's ``oar_method``).

The built-in transforms are the mechanism test's (``oar.method.interventions``) and the step balance
(``oar.method.steps``: ``oar_g_steps``, OAR-G with ``oar.step_balance`` on, which reads no ground truth),
registered below by import path so that naming them loads no torch; each carries a ``kind`` (``rescue``,
``placebo``, ``dose``, ``step_balance``) that the analysis reads to pair a rescue with its placebo.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from oar.method.lazy_targets import resolved_target
from oar.method import scorer_registry

# What a transform may declare it reads of the probes: the chain task's parsed positions (Probe.decisive,
# .final_step, .irrelevant), which the trainer then attaches whatever the scorer reads; or the response's own
# steps (Probe.steps, split by oar.step_delimiter: no ground truth).
READS = ("parsed_steps", "steps")
DEFAULT_READS = ("parsed_steps",)  # what a registration reads when it does not say

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class WeightTransform:
    """One registered intervention: the method's name, the scorer whose gated weights it changes, its
    function (or the import path it is loaded from on first use), what it reads of the probes
    (:data:`READS`), the ``oar`` settings it reads, its kind and a line on what it does."""

    name: str
    scorer: str
    target: Callable[..., Any] | str
    reads: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_READS))
    settings: tuple[str, ...] = ()
    kind: str = ""
    description: str = ""

    @property
    def transform(self) -> Callable[..., Any]:
        """``transform(weights, reasoning_mask, probes, settings) -> weights``, imported on first use where it
        was registered by import path."""
        return resolved_target(self)

    @property
    def reads_parsed_steps(self) -> bool:
        return "parsed_steps" in self.reads

    @property
    def reads_steps(self) -> bool:
        return "steps" in self.reads


_REGISTRY: dict[str, WeightTransform] = {}


def register_transform(name: str, scorer: str, transform: Callable[..., Any] | str | None = None, *,
                       reads: Iterable[str] = DEFAULT_READS, settings: Iterable[str] = (), kind: str = "",
                       description: str = "") -> Any:
    """Register the intervention ``name``: ``transform`` applied to the gated weights of the registered
    scorer ``scorer``; with no ``transform``, a decorator that registers the function it decorates (and
    returns it unchanged).

    ``transform`` is a function ``(weights, reasoning_mask, probes, settings) -> weights`` (module
    docstring) or an import path ``"package.module:function"``; ``reads`` what it reads of the probes
    (:data:`READS`; default: the parsed positions), ``settings`` the names of the ``oar`` settings it reads.
    Raises ``ValueError`` for a malformed or taken name, an unknown scorer or an unknown read."""
    if transform is None:
        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            register_transform(name, scorer, function, reads=reads, settings=settings, kind=kind,
                               description=description)
            return function
        return decorate
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"intervention name {name!r} must be lower-case letters, digits and underscores, "
                         "starting with a letter")
    if name in _REGISTRY:
        raise ValueError(f"intervention {name!r} is already registered; choose another name")
    if scorer not in scorer_registry.registered_names():
        raise ValueError(f"intervention {name!r}: {scorer!r} is not a registered scorer")
    reads = frozenset(reads)
    if reads - set(READS):
        raise ValueError(f"intervention {name!r}: unknown reads {sorted(reads - set(READS))}; known: {list(READS)}")
    if not (callable(transform) or scorer_registry.is_import_path(transform)):
        raise ValueError(f"intervention {name!r}: {transform!r} is neither callable nor an import path "
                         "'package.module:function'")
    scorer_registry.reserve_name(name, f"the intervention {name!r} (oar.method.weight_transforms)")
    spec = WeightTransform(name, scorer, transform, reads, tuple(settings), kind, description)
    _REGISTRY[name] = spec
    return spec


def unregister_transform(name: str) -> None:
    """Remove a registration (tests, notebooks); a built-in cannot be removed."""
    if name in BUILTIN_TRANSFORMS:
        raise ValueError(f"intervention {name!r} is built in and cannot be unregistered")
    if _REGISTRY.pop(name, None) is None:
        raise ValueError(f"intervention {name!r} is not registered")
    scorer_registry.release_name(name)


def transform_spec(name: str) -> WeightTransform | None:
    """The intervention registered as ``name``, or None where ``name`` is none."""
    return _REGISTRY.get(name)


def registered_transforms(where: Callable[[WeightTransform], bool] = lambda spec: True) -> dict[str, str]:
    """Every registered intervention whose spec satisfies ``where`` -> the scorer it changes (in the order
    of registration, the built-ins first)."""
    return {name: spec.scorer for name, spec in _REGISTRY.items() if where(spec)}


def of_kind(kind: str) -> dict[str, str]:
    """The interventions of one kind (``rescue``, ``placebo``, ``dose``) -> the scorer each changes."""
    return registered_transforms(lambda spec: spec.kind == kind)


def reading(setting: str) -> dict[str, str]:
    """The interventions that read the ``oar`` setting ``setting`` -> the scorer each changes."""
    return registered_transforms(lambda spec: setting in spec.settings)


# ------------------------------------------------------------------------- the built-in transforms
# The mechanism test's (method.md, oar.method.interventions); all read the last step's parsed decisive tokens.

_BUILTIN = "oar.method.interventions"
for _name, _scorer, _function, _settings, _kind, _description in (
    ("oar_g_rescue", "oar_g", "rescue_final_step", (), "rescue",
     "OAR-G with the last step's decisive tokens held to the mean weight of the rest of the reasoning"),
    ("oar_g_placebo", "oar_g", "placebo_final_step", (), "placebo",
     "OAR-G with as many of its top-weighted tokens outside the last step's decisive tokens held"),
    ("truth_dose", "truth", "dose_final_step", ("final_step_ratio",), "dose",
     "the truth gate with the last step's decisive tokens at final_step_ratio times the earlier steps' weight"),
):
    register_transform(_name, _scorer, f"{_BUILTIN}:{_function}", settings=_settings, kind=_kind,
                       description=_description)
# The ground-truth-free option the mechanism located (oar.method.steps): it reads the response's own steps.
register_transform("oar_g_steps", "oar_g", "oar.method.steps:step_balanced", reads=("steps",),
                   settings=("step_delimiter",), kind="step_balance",
                   description="OAR-G with each reasoning step's share of the weight held to its share of the tokens")
BUILTIN_TRANSFORMS = tuple(_REGISTRY)
