"""The one list of training methods and what each kind of method is, by name; the outcome probes' names
(torch-free).

The run registry, the trainer, the scorer registry, the training settings and the analysis read these;
the config schema's enums are tested equal to them. A new scorer is added here and to the scorers'
registry (``oar.method.importance.SCORERS``, which must hold every name here and nothing else).
"""

BASELINE = "grpo"  # GRPO's uniform token advantages: no scorer, no gate

# Scorers of the model's reasoning tokens (method.md): the paper's two, then the controls.
MODEL_SCORERS = ("oar_p", "oar_g", "grad_norm", "entropy", "position", "random")

# Scorers that read the chain task's parsed grammar instead of a model; training attaches the positions.
TRUTH_GATES = ("truth", "truth_graded")  # the upper bounds: every parsed decisive token
PARSED_SCORERS = (*TRUTH_GATES, "truth_final", "truth_early")

SCORER_NAMES = (*MODEL_SCORERS, *PARSED_SCORERS)  # the scorers' registry: one scorer per name
# scorers that run no forward of the model: the controls that need only the tokens and the parsed scorers
MODEL_FREE_SCORERS = ("position", "random", *PARSED_SCORERS)

# Mechanism rescues: a scorer's gated weights with the last step's parsed decisive tokens held to the mean
# weight of the rest of the reasoning (oar.method.interventions); method -> the scorer it rescues.
RESCUES = {"oar_g_rescue": "oar_g"}
# Their placebos: as many of the scorer's highest-weighted reasoning tokens outside the last step's decisive
# tokens held to the rest's mean weight, the mass kept (oar.method.interventions.hold_top_outside); method ->
# the scorer it changes.
PLACEBOS = {"oar_g_placebo": "oar_g"}
# Mechanism doses: a scorer's gated weights with the last step's parsed decisive tokens set to
# oar.final_step_ratio times the mean weight of the earlier steps' (oar.method.interventions); method ->
# the scorer it doses. The truth gate gives every decisive token one weight, so its dose at ratio 1 is
# the truth gate itself (the run registry plans that level as the truth gate's run).
DOSES = {"truth_dose": "truth"}
INTERVENED = {**RESCUES, **PLACEBOS, **DOSES}  # methods that change a scorer's gated weights -> that scorer

GATED = (*SCORER_NAMES, *INTERVENED)  # every method whose weights come from the bi-level gate
METHODS = (BASELINE, *GATED)
PROBE_SCORERS = ("oar_p", "oar_g", "grad_norm")  # scorers that read an outcome probe
USES_PROBE = (*PROBE_SCORERS, *(m for m, s in INTERVENED.items() if s in PROBE_SCORERS))  # methods that do
READS_PARSED_STEPS = (*PARSED_SCORERS, *INTERVENED)  # methods for which training attaches the parsed positions


def scorer_of(method: str) -> str | None:
    """The scorer whose scores a method gates (None for GRPO)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    return None if method == BASELINE else INTERVENED.get(method, method)

PROBES = ("lt_logits", "as_mean", "as_joint")  # outcome probes (oar.method.probes reads each off the logits)
# the scorers' attention kernels on a GPU (oar.method.attention_kernels)
ATTENTION_CHOICES = ("no_cudnn", "torch_default")
# how OAR-G and grad_norm run a probe's prompt (oar.method.gradient_scorers): once into a shared KV cache, or
# again in every probe's row (no attention mask, so a GPU runs flash attention)
GRAD_PROMPTS = ("cached", "inline")
