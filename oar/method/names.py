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

SCORER_NAMES = (*MODEL_SCORERS, *PARSED_SCORERS)  # every method whose weights come from the bi-level gate
METHODS = (BASELINE, *SCORER_NAMES)
USES_PROBE = ("oar_p", "oar_g", "grad_norm")  # scorers whose scores read an outcome probe
# scorers that run no forward of the model: the controls that need only the tokens and the parsed scorers
MODEL_FREE_SCORERS = ("position", "random", *PARSED_SCORERS)

PROBES = ("lt_logits", "as_mean", "as_joint")  # outcome probes (oar.method.probes reads each off the logits)
