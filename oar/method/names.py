"""The training methods and what each kind of method is, by name; the outcome probes' names (torch-free).

A method is GRPO (``grpo``), an advantage rule (GRPO's advantages plus a term of the rule's own, no gate:
``oar.method.advantage_rules``, KTAE's ``ktae_rule``), a scorer through the bi-level gate (a name registered in
``oar.method.scorer_registry``, the one list of scorers, or an import path ``package.module:function`` of a
user's scorer), or an intervention on a registered scorer's gated weights (a name registered in
``oar.method.weight_transforms``, the one list of interventions). The tuples of scorer names
here are read off the registry's built-ins by what each declares it reads; the functions at the end answer
for any method, a user's scorer included. The config schema's enums are made from these
(``oar.experiment.config_schema``).
"""

from oar.method import advantage_rules as _rules
from oar.method import scorer_registry as _registry
from oar.method import weight_transforms as _transforms

BASELINE = "grpo"  # GRPO's uniform token advantages: no scorer, no gate
_registry.reserve_name(BASELINE, "GRPO, the method without a scorer (oar.method.names.BASELINE)")

# The built-in interventions (oar.method.weight_transforms, the one list of them), by kind; each maps the
# method to the scorer whose gated weights it changes.
# Mechanism rescues: the last step's parsed decisive tokens held to the mean weight of the rest of the
# reasoning (oar.method.interventions.hold_to_rest).
RESCUES = _transforms.of_kind("rescue")
# Their placebos: as many of the scorer's highest-weighted reasoning tokens outside the last step's decisive
# tokens held to the rest's mean weight, the mass kept (oar.method.interventions.hold_top_outside).
PLACEBOS = _transforms.of_kind("placebo")
# Mechanism doses: the last step's parsed decisive tokens set to oar.final_step_ratio times the mean weight
# of the earlier steps' (oar.method.interventions.set_to_ratio). The truth gate gives every decisive token
# one weight, so its dose at ratio 1 is the truth gate itself (the run registry plans that level as the
# truth gate's run).
DOSES = _transforms.of_kind("dose")
# The step balance (oar.method.steps): OAR-G with each step's share of the weight held to its token share.
STEP_BALANCED = _transforms.of_kind("step_balance")
INTERVENED = _transforms.registered_transforms()  # the built-in interventions -> the scorer each changes

# The built-in scorers (the registry's, in its order), grouped by what each declares it reads.
SCORER_NAMES = _registry.BUILTIN_SCORERS
PARSED_SCORERS = _registry.registered(lambda s: s.name in SCORER_NAMES and "parsed_steps" in s.needs)
TRUTH_GATES = ("truth", "truth_graded")  # the upper bounds: every parsed decisive token (the decisive reading)
# scorers of the model's reasoning tokens that a held-out response set can run (no group, reward or second model)
MODEL_SCORERS = _registry.registered(lambda s: s.name in SCORER_NAMES and s.heldout and "parsed_steps" not in s.needs)
# scorers that run no forward of the model: the controls that need only the tokens and the parsed scorers
MODEL_FREE_SCORERS = _registry.registered(lambda s: s.name in SCORER_NAMES and "model" not in s.needs)
PROBE_SCORERS = _registry.registered(lambda s: s.name in SCORER_NAMES and "probe" in s.needs)

# every built-in method whose weights come from the bi-level gate (a signed scorer is none: the gate refuses it, as
# the trainer refuses one reading what training lacks;
# its magnitude is registered beside it)
GATED = (*(n for n in SCORER_NAMES if _registry.scorer_spec(n).trainable), *INTERVENED)
# methods that add a term of their own to GRPO's advantages, with no gate (oar.method.advantage_rules): KTAE's rule
ADVANTAGE_RULES = _rules.BUILTIN_RULES
METHODS = (BASELINE, *GATED, *ADVANTAGE_RULES)  # the built-in methods
USES_PROBE = (*PROBE_SCORERS, *(m for m, s in INTERVENED.items() if s in PROBE_SCORERS))  # methods that do
# methods for which training attaches the parsed positions (the step balance reads the response's own steps)
READS_PARSED_STEPS = (*PARSED_SCORERS, *(m for m in INTERVENED if _transforms.transform_spec(m).reads_parsed_steps))

PROBES = ("lt_logits", "as_mean", "as_joint")  # outcome probes (oar.method.probes reads each off the logits)
# the scorers' attention kernels on a GPU (oar.method.attention_kernels)
ATTENTION_CHOICES = ("no_cudnn", "torch_default")
# how OAR-G and grad_norm run a probe's prompt (oar.method.gradient_scorers): once into a shared KV cache, or
# again in every probe's row (no attention mask, so a GPU runs flash attention)
GRAD_PROMPTS = ("cached", "inline")


def check_method(method: object) -> None:
    """Raise ValueError naming ``method`` unless it is one: GRPO, an intervention, or a scorer (registered,
    or an import path, which is imported here)."""
    if method == BASELINE or _transforms.transform_spec(method) is not None or _rules.rule_spec(method) is not None:
        return
    if not isinstance(method, str):
        raise ValueError(f"unknown method {method!r}: a method is named by a string")
    try:
        _registry.scorer_spec(method)
    except _registry.ScorerError as error:
        raise ValueError(f"unknown method {method!r}: neither {BASELINE!r}, an advantage rule "
                         f"({', '.join(ADVANTAGE_RULES)}), an intervention "
                         f"({', '.join(_transforms.registered_transforms())}), nor a scorer ({error})") from None


def is_method(method: object) -> bool:
    try:
        check_method(method)
    except ValueError:
        return False
    return True


def scorer_of(method: str) -> str | None:
    """The scorer whose scores a method gates (None for GRPO and an advantage rule)."""
    check_method(method)
    if method == BASELINE or _rules.rule_spec(method) is not None:
        return None
    transform = _transforms.transform_spec(method)
    return transform.scorer if transform is not None else method


def is_gated(method: str) -> bool:
    """Whether a method's token weights come from the bi-level gate (every method but GRPO)."""
    return scorer_of(method) is not None


def _reads(method: str, need: str) -> bool:
    scorer = scorer_of(method)
    return scorer is not None and _registry.scorer_spec(scorer).reads(need)


def uses_probe(method: str) -> bool:
    """Whether a method's scorer reads an outcome probe (its runs are then named by the probe)."""
    return _reads(method, "probe")


def reads_steps(method: str) -> bool:
    """Whether training splits a method's responses into their own steps (``Probe.steps``): an intervention
    that reads them (the step balance, ``oar_g_steps``); ``oar.step_balance`` does so for any gated method."""
    transform = _transforms.transform_spec(method)
    return transform is not None and transform.reads_steps


def reads_parsed_steps(method: str) -> bool:
    """Whether training attaches the chain task's parsed positions for a method: its scorer reads them, or it
    is an intervention that reads them (``oar.method.weight_transforms``)."""
    transform = _transforms.transform_spec(method)
    return (transform is not None and transform.reads_parsed_steps) or _reads(method, "parsed_steps")


def run_name(method: str) -> str:
    """A method as it is spelled in run ids and file names: an import path's ``:`` becomes ``.``."""
    return method.replace(":", ".")
