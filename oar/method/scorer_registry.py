"""Every scorer by name, registered in one place: ``register_scorer`` (torch-free).

A scorer turns one call's rows (``oar.method.scorer_contract.ScoringBatch``) into one score per reasoning
token; the contract it keeps is written once, in ``oar.method.scorer_contract``, and checked at
registration (here) and on every call's output (there). What a scorer reads besides the policy's token ids
it declares in ``needs`` (:data:`NEEDS`), so that the trainer and the scoring scripts hand it exactly that
and the run registry, the cost plan and the analysis know what kind of scorer it is.

The built-in scorers are registered below by import path, so naming them (the config schema's enums, the
workflow's wildcards, the run ids) loads no torch; a function is imported on its first call. A user's
scorer is registered with :func:`register_scorer` (as a decorator or a call), or named by import path,
``package.module:function``, wherever a scorer's name is taken (the workflow's ``runs.<group>.methods``,
``OARConfig.oar_method``): the function is imported then, and a function its module registered keeps its
registration's needs.

Names: a registered name is lower-case letters, digits and underscores, starting with a letter; a second
registration of a name is an error, as is a name the methods already use (``grpo``, the interventions of
``oar.method.weight_transforms``), which those modules reserve here (:func:`reserve_name`).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# What a scorer may declare it reads, beyond the policy's token ids and its settings:
NEEDS = {
    "model": "runs forwards (or backwards) of the policy being trained (ScoringBatch.model; None for a scorer "
             "that does not declare it)",
    "probe": "reads an outcome probe: the response's answer distribution (ScoringBatch.kinds says which, per row)",
    "parsed_steps": "reads the chain task's parsed positions (Probe.decisive, .final_step, .irrelevant), which "
                    "reach only scorers that declare it (the answer key: a ground-truth entry)",
    "groups": "reads each row's group (its prompt's responses: ScoringBatch.groups) and reward "
              "(ScoringBatch.rewards); a call then holds every row of each group it scores",
    "reference_model": "runs forwards of a second, frozen model (ScoringBatch.reference_model), e.g. the "
                       "policy before training",
    "attentions": "reads the model's attention weights (output_attentions=True): the call runs the model, and "
                  "the reference model, with eager attention",
    "reference_answer": "reads each row's problem's reference answer (ScoringBatch.references): the answer key, "
                        "so a ground-truth entry; the benchmark gives it, the trainer does not",
    "reference_solution": "reads the problem's reference solution (the chain task: the correct chain, solved from "
                          "the problem stated in the prompt): the answer key",
}
# Needs that read the answer key (the parsed positions, a reference solution or answer): an entry that declares
# one is a ground-truth entry, an upper bound or an oracle, never a method; the benchmark marks its rows so.
GROUND_TRUTH_NEEDS = frozenset({"parsed_steps", "reference_solution", "reference_answer"})
# Needs the trainer does not meet (it refuses a scorer that declares one, naming the need)
TRAINING_REFUSED_NEEDS = frozenset({"reference_answer"})
# Needs a held-out response set can meet (one response per problem, no reward, no second model)
HELDOUT_NEEDS = frozenset({"model", "probe", "attentions"})

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


class ScorerError(ValueError):
    """A scorer's name, registration or output breaks the contract; the message names the scorer."""


@dataclass(frozen=True)
class ScorerSpec:
    """One registered scorer: its name, its function (or the import path it is loaded from on its first
    call), what it reads and a line on what it scores."""

    name: str
    target: Callable[..., Any] | str
    needs: frozenset[str] = field(default_factory=frozenset)
    description: str = ""
    # a signed score (a reward, an advantage term): its sign says which way the token pushes the outcome,
    # so its scores may be negative. The benchmark reads its sign; the gate, which needs importances >= 0,
    # refuses it (the scorer's magnitude is registered apart, unsigned).
    signed: bool = False

    @property
    def function(self) -> Callable[..., Any]:
        """The scorer's function, imported on first use where it was registered by import path."""
        if callable(self.target):
            return self.target
        function = _import(self.target, self.name)
        _check_signature(self.name, function)
        object.__setattr__(self, "target", function)
        return function

    def reads(self, need: str) -> bool:
        if need not in NEEDS:
            raise ScorerError(f"unknown need {need!r}; known: {sorted(NEEDS)}")
        return need in self.needs

    @property
    def trainable(self) -> bool:
        """Whether OAR's trainer can gate it: unsigned, and reading nothing training cannot give it
        (:data:`TRAINING_REFUSED_NEEDS`). The workflow's method lists take only such scorers."""
        return not self.signed and not (self.needs & TRAINING_REFUSED_NEEDS)

    @property
    def ground_truth(self) -> bool:
        """Whether it reads the answer key (:data:`GROUND_TRUTH_NEEDS`): a ground-truth entry."""
        return bool(self.needs & GROUND_TRUTH_NEEDS)

    @property
    def heldout(self) -> bool:
        """Whether it can score a held-out response set (one response per problem, no reward)."""
        return self.needs <= HELDOUT_NEEDS


_REGISTRY: dict[str, ScorerSpec] = {}
_BY_FUNCTION: dict[int, ScorerSpec] = {}  # id(function) -> its registration (import paths find theirs)


_RESERVED: dict[str, str] = {}  # names the methods take that are no scorer -> what takes each


def reserve_name(name: str, holder: str) -> None:
    """Keep ``name`` from any scorer: a method that is no scorer takes it (``oar.method.names``' GRPO, the
    interventions of ``oar.method.weight_transforms``, which call this); ``holder`` says which."""
    if name in _REGISTRY:
        raise ScorerError(f"{holder} cannot take the name {name!r}: a scorer is registered under it")
    _RESERVED[name] = holder


def release_name(name: str) -> None:
    """Give a reserved name back (an intervention unregistered)."""
    _RESERVED.pop(name, None)


def _check_signature(name: str, function: Any) -> None:
    if not callable(function):
        raise ScorerError(f"scorer {name!r}: {function!r} is not callable")
    try:
        inspect.signature(function).bind(object())
    except TypeError:
        raise ScorerError(f"scorer {name!r}: {getattr(function, '__qualname__', function)!r} must take one "
                          "positional argument, the call's ScoringBatch (oar.method.scorer_contract)") from None
    except ValueError:  # a builtin without a signature: called as it is
        pass


def _import(path: str, name: str) -> Callable[..., Any]:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ScorerError(f"scorer {name!r}: cannot import module {module_name!r} ({error})") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ScorerError(f"scorer {name!r}: module {module_name!r} has no {attribute!r}") from None


def register_scorer(name: str, function: Callable[..., Any] | str | None = None, *, needs: Iterable[str] = ("model",),
                    description: str = "", signed: bool = False) -> Any:
    """Register a scorer under ``name``; with no ``function``, a decorator that registers the function it
    decorates (and returns it unchanged).

    ``function`` takes one :class:`~oar.method.scorer_contract.ScoringBatch` and returns one 1-D float
    tensor per probe, of the probe's ``reasoning_len`` (the contract: ``oar.method.scorer_contract``); an
    import path ``"package.module:function"`` is imported on the first call. ``needs`` (a subset of
    :data:`NEEDS`; default ``("model",)``) is what it reads besides the token ids and its settings.
    ``signed=True`` registers a signed score (negative values allowed, the gate refuses it; see
    ``oar.method.scorer_contract``). Raises :class:`ScorerError` naming the scorer: a malformed or taken
    name, an unknown need, a function that cannot take one argument.
    """
    if function is None:
        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            register_scorer(name, fn, needs=needs, description=description, signed=signed)
            return fn
        return decorate
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ScorerError(f"scorer name {name!r} must be lower-case letters, digits and underscores, starting with "
                          "a letter")
    if name in _RESERVED:
        raise ScorerError(f"scorer name {name!r} is taken by a method: {_RESERVED[name]}")
    return _add(name, function, needs, description, signed)


def _add(name: str, function: Callable[..., Any] | str, needs: Iterable[str], description: str,
         signed: bool = False) -> ScorerSpec:
    if name in _REGISTRY:
        raise ScorerError(f"scorer {name!r} is already registered (to {_describe(_REGISTRY[name].target)}); choose "
                          "another name")
    needs = frozenset(needs)
    unknown = needs - set(NEEDS)
    if unknown:
        raise ScorerError(f"scorer {name!r}: unknown needs {sorted(unknown)}; known: {sorted(NEEDS)}")
    if isinstance(function, str):
        if not _IMPORT_PATH.fullmatch(function):
            raise ScorerError(f"scorer {name!r}: {function!r} is not an import path 'package.module:function'")
    else:
        _check_signature(name, function)
    spec = ScorerSpec(name, function, needs, description, bool(signed))
    _REGISTRY[name] = spec
    if callable(function):
        _BY_FUNCTION[id(function)] = spec
    return spec


def _describe(target: Any) -> str:
    return target if isinstance(target, str) else f"{getattr(target, '__module__', '?')}:" \
                                                  f"{getattr(target, '__qualname__', target)}"


def is_import_path(name: Any) -> bool:
    """Whether ``name`` has the form of an import path, ``package.module:function``."""
    return isinstance(name, str) and bool(_IMPORT_PATH.fullmatch(name))


def scorer_spec(name: str) -> ScorerSpec:
    """The scorer of a registered name or of an import path (imported now: a path that does not resolve,
    or a function that breaks the contract's signature, raises :class:`ScorerError` naming it)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if not is_import_path(name):
        raise ScorerError(f"unknown scorer {name!r}: neither registered ({', '.join(registered_names())}) nor an "
                          "import path 'package.module:function'")
    function = _import(name, name)
    spec = _BY_FUNCTION.get(id(function))
    if spec is None:  # a plain function of the contract: it reads the policy, nothing else
        _check_signature(name, function)
        spec = ScorerSpec(name, function, frozenset({"model"}))
    return spec


def is_scorer(name: Any) -> bool:
    """Whether ``name`` is a registered scorer or an import path that resolves to one."""
    if not isinstance(name, str):
        return False
    try:
        scorer_spec(name)
    except ScorerError:
        return False
    return True


def registered_names() -> tuple[str, ...]:
    """Every registered scorer's name, in the order of registration (the built-ins first)."""
    return tuple(_REGISTRY)


def registered(where: Callable[[ScorerSpec], bool] = lambda spec: True) -> tuple[str, ...]:
    """The registered names whose spec satisfies ``where``."""
    return tuple(name for name, spec in _REGISTRY.items() if where(spec))


def unregister_scorer(name: str) -> None:
    """Remove a registration (tests, notebooks that redefine a scorer); a built-in cannot be removed."""
    if name in BUILTIN_SCORERS:
        raise ScorerError(f"scorer {name!r} is built in and cannot be unregistered")
    spec = _REGISTRY.pop(name, None)
    if spec is None:
        raise ScorerError(f"scorer {name!r} is not registered")
    _BY_FUNCTION.pop(id(spec.target), None)


# ------------------------------------------------------------------------- the built-in scorers
# method.md sections 4, 5 and 7; the functions are oar.method.builtin_scorers'.

_BUILTIN = "oar.method.builtin_scorers"
for _name, _needs, _description in (
    ("oar_p", ("model", "probe"), "OAR-P: the outcome's divergence when the token is substituted"),
    ("oar_g", ("model", "probe"), "OAR-G: |gradient x input| of the outcome's divergence at a noised point"),
    ("grad_norm", ("model", "probe"), "the norm of the answer likelihood's gradient (a control)"),
    ("entropy", ("model",), "the policy's entropy where the token was sampled (a control)"),
    ("position", (), "the token's index in the response (a control)"),
    ("random", (), "uniform random scores (a control)"),
    ("truth", ("parsed_steps",), "1 on the parsed decisive tokens, 0 elsewhere (an upper bound)"),
    ("truth_graded", ("parsed_steps",), "the truth scores with the tokens that cannot change the answer last"),
    ("truth_final", ("parsed_steps",), "1 on the last step's parsed decisive tokens (a mechanism control)"),
    ("truth_early", ("parsed_steps",), "1 on the earlier steps' parsed decisive tokens (a mechanism control)"),
    # the token-credit benchmark's entries (oar.bench): the scorers users run, each from its paper
    ("top_entropy", ("model",), "1 on the tokens in the top 20% of the call's entropies, TRL's 80/20 rule"),
    ("ktae", ("groups",), "|KTAE's key-token value| as released (presence and term frequency in the group)"),
    ("ktae_presence", ("groups",), "|KTAE's key-token value| without its term-frequency refinement"),
    ("prime", ("model", "reference_model"), "|PRIME's implicit reward|: beta |log pi_reference / pi| of the token"),
    ("answer_attention", ("model", "probe", "attentions"), "the answer span's attention to the token"),
    ("grail", ("model",), "GRAIL's saliency: ||gradient (.) embedding|| of the first box's likelihood"),
    ("grail_released", ("model",), "GRAIL's saliency read one position earlier, as its released trainer does"),
    ("oar_g_grail", ("model",), "OAR-G as the GRAIL codebase computes it (whole completion, first box)"),
    ("rlsd", ("model", "reference_answer"), "|log pi(token | answer given) - log pi(token)|, the privileged self"),
    ("rlsd_weight", ("model", "reference_answer", "groups"), "RLSD's weight exp(sign(A) x the privileged gain)"),
    ("shear", ("model", "groups"), "W1 of the token's span's hidden states from the opposing outcome's"),
    # trivial baselines to read the entries against: the policy's surprise, the grammar's spelling
    ("surprisal", ("model",), "-log p of the sampled token under the policy (a trivial baseline)"),
    ("last_step_digits", (), "1 on the digits after the reasoning's last = or ~ (a no-model heuristic)"),
    ("last_step", (), "1 on the reasoning's last = or ~ and the digits after it (a no-model heuristic)"),
    ("step_results", (), "1 on the digits after every = or ~ (a no-model heuristic)"),
    ("relations_and_results", (), "1 on every = or ~ and the digits after it (a no-model heuristic)"),
    ("tilde_first", (), "relations_and_results with every ~ scored 2 (a no-model heuristic)"),
    ("oar_g_inverted", ("model", "probe"), "OAR-G's scores inverted per response (arXiv 2602.09331's control)"),
    ("first_divergence", ("reference_solution",), "1 where a wrong response first departs from the reference chain"),
    ("tempo", ("groups",), "|TEMPO's prefix-tree TD term|: |V(s_t+1) - V(s_t)| in the group's response tree"),
):
    _add(_name, f"{_BUILTIN}:{_name}", _needs, _description)  # names known good, none reserved
# signed forms (the benchmark reads their sign; the gate refuses them)
_add("rlsd_signed", f"{_BUILTIN}:rlsd_signed", ("model", "reference_answer"),
     "log pi(token | answer given) - log pi(token), signed", signed=True)
_add("tempo_signed", f"{_BUILTIN}:tempo_signed", ("groups",), "TEMPO's prefix-tree TD term V(s_t+1) - V(s_t)",
     signed=True)
_add("ktae_signed", f"{_BUILTIN}:ktae_signed", ("groups",), "KTAE's key-token value as released, signed", signed=True)
BUILTIN_SCORERS = registered_names()
