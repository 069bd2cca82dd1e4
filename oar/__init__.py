"""OAR: outcome-grounded advantage reshaping for GRPO.

The library a TRL user imports (docs/library.md)::

    from oar import OARConfig, OARTrainer, register_scorer

``OARTrainer`` is TRL's ``GRPOTrainer`` with per-token advantages from a scorer through OAR's bi-level
gate; ``OARConfig`` is ``GRPOConfig`` with the ``oar_*`` settings. The names below load on first use, so
``import oar`` stays cheap (no torch) until one of them is touched.

Layout, lowest layer first; a module imports only from its own subpackage or a lower layer
(``tests/test_layout.py`` checks it), and no module imports Snakemake:

- ``oar.cpu_kernels`` (the pinned instruction set of the CPU kernels, applied on ``import oar``), ``oar.files``
  (atomic writes, JSON Lines, file hashes)
- ``oar.grading``: the verifier: answer extraction (``extraction``), equivalence (``equivalence``) with
  math-verify in time-limited helper processes (``symbolic_helper``), a response's grade (``grader``);
  ``oar.prompting`` (the prompt template)
- ``oar.method``: the paper's algorithm, free of training and IO machinery: the scorers registered by
  name (``scorer_registry``) under one contract (``scorer_contract``), the names of methods and probes
  (``names``), outcome probes (``probes``), token scoring (``importance``: ``score()``; the built-ins
  ``builtin_scorers`` over ``substitution``, ``gradient_scorers``, ``controls``, ``truth_scorers``, their
  settings ``scorer_config`` and batched forwards ``scoring_batches``), the bi-level gate (``gate``), the
  analysis metrics (``metrics``)
- ``oar.data`` (the dataset catalogue, its sources, the one record format, generated problems, shipped
  benchmarks) and ``oar.models`` (model sources, loading a model and its tokenizer, the tiny test model);
  neither imports the other
- ``oar.evaluation``: sampling (``generation``) and benchmark evaluation (``benchmark``)
- ``oar.training``: a run's settings with their defaults and checks (``settings``), the TRL GRPO
  subclass (``grpo_trainer``) and its model card (``model_card``), one run from its settings (``run``) and
  their helpers for several processes and memory
- ``oar.analysis``: one module per question (its reading of the run outputs, statistics and table: ``accuracy``,
  ``paired``, ``causal_recall``, ...) over shared readings (``run_outputs``, ``outcomes``), ``statistics``
  and table helpers; the oracle, figures, ``python -m oar.analysis.explain``
- ``oar.experiment``: the workflow config and its schema (``config_schema``), the run registry (``runs``)
  with its cross-key checks (``config_checks``), its jobs' resources (``job_resources``) and command-line
  options (``job_options``), the configuration docs
- ``oar.planning``: the planner over the registry: model shapes (``shapes``), the memory plan
  (``memory_plan``) and the cost plan (``cost_plan``, over the work model ``cost_model``, GPU figures
  ``hardware`` and their ``calibration``)
- ``oar.bench``: the token-credit benchmark (``python -m oar.bench``): the frozen policies' shipped response
  sets, the ground-truth and learning tracks, their leaderboards
"""

# The CPU kernels' instruction set, when OAR_CPU_KERNELS pins it (oar.cpu_kernels): before torch runs anything.
from oar import cpu_kernels as _cpu_kernels  # noqa: E402

_cpu_kernels.apply()

from typing import TYPE_CHECKING, Any  # noqa: E402

# public name -> the module that defines it (imported on first use: PEP 562)
_EXPORTS = {
    "OARConfig": "oar.training.grpo_trainer",
    "OARTrainer": "oar.training.grpo_trainer",
    "correctness_reward": "oar.training.grpo_trainer",
    "OARSettings": "oar.training.settings",
    "ScorerConfig": "oar.method.scorer_config",
    "register_scorer": "oar.method.scorer_registry",
    "unregister_scorer": "oar.method.scorer_registry",
    "scorer_spec": "oar.method.scorer_registry",
    "registered_names": "oar.method.scorer_registry",
    "ScorerSpec": "oar.method.scorer_registry",
    "ScorerError": "oar.method.scorer_registry",
    "NEEDS": "oar.method.scorer_registry",
    "ScoringBatch": "oar.method.scorer_contract",
    "Probe": "oar.method.probes",
    "make_probes": "oar.training.probing",
    "score": "oar.method.importance",
    "Scores": "oar.method.importance",
    "gate": "oar.method.gate",
}
__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:  # what a type checker and an editor see
    from oar.method.gate import gate
    from oar.method.importance import Scores, score
    from oar.method.probes import Probe
    from oar.method.scorer_config import ScorerConfig
    from oar.method.scorer_contract import ScoringBatch
    from oar.method.scorer_registry import (NEEDS, ScorerError, ScorerSpec, register_scorer, registered_names,
                                            scorer_spec, unregister_scorer)
    from oar.training.grpo_trainer import OARConfig, OARTrainer, correctness_reward
    from oar.training.probing import make_probes
    from oar.training.settings import OARSettings


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("oar-trl")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'oar' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
