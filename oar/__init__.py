"""OAR: outcome-grounded advantage reshaping for GRPO.

Layout, lowest layer first; a module imports only from its own subpackage or a lower layer
(``tests/test_layout.py`` checks it), and no module imports Snakemake:

- ``oar.cpu_kernels`` (the pinned instruction set of the CPU kernels, applied on ``import oar``), ``oar.files``
  (atomic writes, JSON Lines, file hashes)
- ``oar.grading``: the verifier: answer extraction (``extraction``), equivalence (``equivalence``) with
  math-verify in time-limited helper processes (``symbolic_helper``), a response's grade (``grader``);
  ``oar.prompting`` (the prompt template)
- ``oar.method``: the paper's algorithm, free of training and IO machinery: the names of methods and
  probes (``names``), outcome probes (``probes``), token scorers (``importance``: ``score()`` and the
  scorers by name; ``substitution``, ``gradient_scorers``, ``controls``, ``truth_scorers``, their settings
  ``scorer_config`` and batched forwards ``scoring_batches``), the bi-level gate (``gate``), the analysis
  metrics (``metrics``)
- ``oar.data`` (the dataset catalogue, its sources, the one record format, generated problems, shipped
  benchmarks) and ``oar.models`` (model sources, loading a model and its tokenizer, the tiny test model);
  neither imports the other
- ``oar.evaluation``: sampling (``generation``) and benchmark evaluation (``benchmark``)
- ``oar.training``: a run's settings with their defaults and checks (``settings``), the TRL GRPO
  subclass (``grpo_trainer``), one run from its settings (``run``) and their helpers for several
  processes and memory
- ``oar.analysis``: one module per question (its reading of the run outputs, statistics and table: ``accuracy``,
  ``paired``, ``causal_recall``, ...) over shared readings (``run_outputs``, ``outcomes``), ``statistics``
  and table helpers; the oracle, figures, ``python -m oar.analysis.explain``
- ``oar.experiment``: the run registry (``runs``) with its jobs' resources (``job_resources``) and
  command-line options (``job_options``), the configuration docs, model shapes (``shapes``), the
  memory plan and the cost plan (``cost_plan``, over the work model ``cost_model``, GPU figures
  ``hardware`` and their ``calibration``)
- ``oar.bench``: the token-credit benchmark (``python -m oar.bench``): the frozen policies' shipped response
  sets, the ground-truth and learning tracks, their leaderboards
"""

# The CPU kernels' instruction set, when OAR_CPU_KERNELS pins it (oar.cpu_kernels): before torch runs anything.
from oar import cpu_kernels as _cpu_kernels  # noqa: E402

_cpu_kernels.apply()
