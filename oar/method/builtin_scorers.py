"""The built-in scorers as the registry calls them: each takes the call's ``ScoringBatch`` and hands its
fields to the scorer's module (``oar.method.scorer_registry`` registers them by these names).

- ``oar_p`` (OAR-P, pad substitution; exact, span or window): ``oar.method.substitution``;
- ``oar_g`` (OAR-G, gradient x input at a noised point) and ``grad_norm``: ``oar.method.gradient_scorers``;
- the controls ``entropy``, ``position`` and ``random``: ``oar.method.controls``;
- ``truth``, ``truth_graded``, ``truth_final`` and ``truth_early`` (the chain task's parsed grammar, no
  model): ``oar.method.truth_scorers``.
"""

from __future__ import annotations

from torch import Tensor

from oar.method import controls, gradient_scorers, substitution, truth_scorers
from oar.method.scorer_contract import ScoringBatch


def oar_p(batch: ScoringBatch) -> list[Tensor]:
    return substitution.oar_p_scores(batch.model, batch.probes, batch.kinds, batch.config)


def oar_g(batch: ScoringBatch) -> list[Tensor]:
    return gradient_scorers.oar_g_scores(batch.model, batch.probes, batch.kinds, batch.config, seed=batch.seed)


def grad_norm(batch: ScoringBatch) -> list[Tensor]:
    return gradient_scorers.grad_norm_scores(batch.model, batch.probes, batch.kinds, batch.config)


def entropy(batch: ScoringBatch) -> list[Tensor]:
    return controls.entropy_scores(batch.model, batch.probes, batch.kinds, batch.config)


def position(batch: ScoringBatch) -> list[Tensor]:
    return controls.position_scores(batch.probes)


def random(batch: ScoringBatch) -> list[Tensor]:
    return controls.random_scores(batch.probes, seed=batch.seed)


def truth(batch: ScoringBatch) -> list[Tensor]:
    return truth_scorers.truth_scores(batch.probes)


def truth_graded(batch: ScoringBatch) -> list[Tensor]:
    return truth_scorers.graded_truth_scores(batch.probes)


def truth_final(batch: ScoringBatch) -> list[Tensor]:
    return truth_scorers.final_step_truth_scores(batch.probes)


def truth_early(batch: ScoringBatch) -> list[Tensor]:
    return truth_scorers.early_steps_truth_scores(batch.probes)
