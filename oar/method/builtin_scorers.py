"""The built-in scorers as the registry calls them: each takes the call's ``ScoringBatch`` and hands its
fields to the scorer's module (``oar.method.scorer_registry`` registers them by these names).

- ``oar_p`` (OAR-P, pad substitution; exact, span or window): ``oar.method.substitution``;
- ``oar_g`` (OAR-G, gradient x input at a noised point) and ``grad_norm``: ``oar.method.gradient_scorers``;
- the controls ``entropy``, ``position`` and ``random``: ``oar.method.controls``;
- ``truth``, ``truth_graded``, ``truth_final`` and ``truth_early`` (the chain task's parsed grammar, no
  model): ``oar.method.truth_scorers``;
- the token-credit benchmark's entries: ``top_entropy`` (TRL's 80/20 rule, ``oar.method.entropy_mask``),
  ``ktae``, ``ktae_signed`` and ``ktae_presence`` (``oar.method.ktae``), ``prime``
  (``oar.method.implicit_reward``) and ``answer_attention`` (``oar.method.answer_attention``).
"""

from __future__ import annotations

from torch import Tensor

from oar.method import (answer_attention as attention, controls, entropy_mask, gradient_scorers, implicit_reward,
                        ktae as key_tokens, substitution, truth_scorers)
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
