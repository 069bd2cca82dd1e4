"""The built-in scorers as the registry calls them: each takes the call's ``ScoringBatch`` and hands its
fields to the scorer's module (``oar.method.scorer_registry`` registers them by these names).

- ``oar_p`` (OAR-P, pad substitution; exact, span or window): ``oar.method.substitution``;
- ``oar_g`` (OAR-G, gradient x input at a noised point) and ``grad_norm``: ``oar.method.gradient_scorers``;
- the controls ``entropy``, ``position`` and ``random``: ``oar.method.controls``;
- ``truth``, ``truth_graded``, ``truth_final`` and ``truth_early`` (the chain task's parsed grammar, no
  model): ``oar.method.truth_scorers``;
- the token-credit benchmark's entries: ``top_entropy`` (TRL's 80/20 rule, ``oar.method.entropy_mask``),
  ``ktae``, ``ktae_signed`` and ``ktae_presence`` (``oar.method.ktae``), ``prime``
  (``oar.method.implicit_reward``) and ``answer_attention`` (``oar.method.answer_attention``); GRAIL's
  saliency ``grail`` and ``grail_released`` (``oar.method.grail``) and its codebase's OAR-G
  ``oar_g_grail`` (``oar.method.oar_g_grail``), the privileged self ``rlsd``,
  ``rlsd_weight`` and ``rlsd_signed`` (``oar.method.privileged_self``) and the hidden-state distance
  ``shear`` (``oar.method.hidden_distance``);
- the trivial baselines ``surprisal`` (``oar.method.surprisal``) and the no-model structure heuristics
  ``last_step_digits``, ``last_step``, ``step_results``, ``relations_and_results`` and ``tilde_first``
  (``oar.method.structure_heuristics``);
- ``oar_g_inverted`` (arXiv 2602.09331's inverted-importance control, ``oar.method.inverted_importance``),
  ``first_divergence`` (an EGCA-style oracle, ``oar.method.first_divergence``) and ``tempo`` /
  ``tempo_signed`` (TEMPO's prefix-tree credit, ``oar.method.prefix_tree``).
"""

from __future__ import annotations

from torch import Tensor

from oar.method import (answer_attention as attention, controls, entropy_mask, first_divergence as divergence,
                        grail as saliency, gradient_scorers, hidden_distance, implicit_reward, inverted_importance,
                        ktae as key_tokens, oar_g_grail as grail_oar_g, prefix_tree, privileged_self,
                        structure_heuristics, substitution, surprisal as surprise, truth_scorers)
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


def top_entropy(batch: ScoringBatch) -> list[Tensor]:
    return entropy_mask.top_entropy_scores(batch.model, batch.probes, batch.config)


def _key_token_inputs(batch: ScoringBatch) -> tuple:
    return ([p.response_ids for p in batch.probes], [p.reasoning_len for p in batch.probes], batch.groups,
            batch.rewards)


def _excluded(batch: ScoringBatch) -> tuple[int, ...]:
    pad = getattr(batch.tokenizer, "pad_token_id", None)  # the released code gives its pad token 0
    return () if pad is None else (int(pad),)


def ktae(batch: ScoringBatch) -> list[Tensor]:
    return key_tokens.ktae_scores(*_key_token_inputs(batch), excluded=_excluded(batch))


def ktae_signed(batch: ScoringBatch) -> list[Tensor]:
    return key_tokens.ktae_values(*_key_token_inputs(batch), excluded=_excluded(batch))


def ktae_presence(batch: ScoringBatch) -> list[Tensor]:
    return key_tokens.ktae_scores(*_key_token_inputs(batch), frequency=False, excluded=_excluded(batch))


def prime(batch: ScoringBatch) -> list[Tensor]:
    """The reference model is PRIME's implicit reward model (a policy trained on outcome rewards), the
    model the policy it is measured against (oar.method.implicit_reward)."""
    return implicit_reward.implicit_reward_scores(batch.model, batch.reference_model, batch.probes,
                                                  batch.config.chunk_tokens)


def answer_attention(batch: ScoringBatch) -> list[Tensor]:
    return attention.answer_attention_scores(batch.model, batch.probes, batch.kinds)


def grail(batch: ScoringBatch) -> list[Tensor]:
    return saliency.grail_scores(batch.model, batch.probes, batch.tokenizer, batch.config.grad_budget)


def grail_released(batch: ScoringBatch) -> list[Tensor]:
    return saliency.grail_scores(batch.model, batch.probes, batch.tokenizer, batch.config.grad_budget, shifted=True)


def oar_g_grail(batch: ScoringBatch) -> list[Tensor]:
    return grail_oar_g.oar_g_grail_scores(batch.model, batch.probes, batch.tokenizer, batch.config, seed=batch.seed)


def rlsd_signed(batch: ScoringBatch) -> list[Tensor]:
    gains = privileged_self.privileged_gains(batch.model, batch.probes, batch.references, batch.tokenizer,
                                             batch.config.chunk_tokens)
    return [g.float() for g in gains]


def rlsd(batch: ScoringBatch) -> list[Tensor]:
    return [g.abs() for g in rlsd_signed(batch)]


def rlsd_weight(batch: ScoringBatch) -> list[Tensor]:
    gains = privileged_self.privileged_gains(batch.model, batch.probes, batch.references, batch.tokenizer,
                                             batch.config.chunk_tokens)
    return privileged_self.rlsd_weights(gains, privileged_self.advantage_signs(batch.groups, batch.rewards))


def shear(batch: ScoringBatch) -> list[Tensor]:
    states = hidden_distance.reasoning_hidden_states(batch.model, batch.probes, batch.config.chunk_tokens)
    return hidden_distance.span_distances(states, batch.groups, batch.rewards)
def surprisal(batch: ScoringBatch) -> list[Tensor]:
    return surprise.surprisal_scores(batch.model, batch.probes, batch.config)


last_step_digits = structure_heuristics.scorer_for("last_step_digits")
last_step = structure_heuristics.scorer_for("last_step")
step_results = structure_heuristics.scorer_for("step_results")
relations_and_results = structure_heuristics.scorer_for("relations_and_results")
tilde_first = structure_heuristics.scorer_for("tilde_first")


def oar_g_inverted(batch: ScoringBatch) -> list[Tensor]:
    return inverted_importance.inverted_rows(oar_g(batch))


def first_divergence(batch: ScoringBatch) -> list[Tensor]:
    return divergence.first_divergence_scores(batch.probes, batch.tokenizer)


def _tempo(batch: ScoringBatch, signed: bool) -> list[Tensor]:
    return prefix_tree.tempo_scores([p.response_ids for p in batch.probes], [p.reasoning_len for p in batch.probes],
                                    batch.groups, batch.rewards, signed=signed)


def tempo(batch: ScoringBatch) -> list[Tensor]:
    return _tempo(batch, signed=False)


def tempo_signed(batch: ScoringBatch) -> list[Tensor]:
    return _tempo(batch, signed=True)
