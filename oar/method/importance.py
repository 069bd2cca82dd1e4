"""Token importance: how much each reasoning token moves the model's final-answer distribution, by any
scorer: ``score(method, model, probes, config)`` and the registry it looks the method up in.

A *scorer* turns probes (``oar.method.probes``) into one score per reasoning token (method.md sections
4, 5 and 7); every scorer takes ``(model, probes, kinds, config)`` and returns one host tensor per probe.
``SCORERS`` names each, one module per idea:

- ``oar_p`` (OAR-P, pad substitution; exact, span or window): ``oar.method.substitution``;
- ``oar_g`` (OAR-G, gradient x input at a noised point) and ``grad_norm``: ``oar.method.gradient_scorers``;
- the controls ``entropy``, ``position`` and ``random``: ``oar.method.controls``;
- ``truth``, ``truth_graded``, ``truth_final`` and ``truth_early`` (the chain task's parsed grammar, no
  model): ``oar.method.truth_scorers``.

Their settings are ``oar.method.scorer_config.ScorerConfig``. Only the logits a probe needs are computed
(``logits_to_keep``), and the model-reading scorers batch the rows of all probes of a call into forwards
of at most ``chunk_tokens`` tokens built on the device (``oar.method.scoring_batches``), moving their
scores off the device once per call.

Scoring runs in the precision of the training forward: the trainer calls the model accelerate prepared,
whose forward runs under bf16 autocast where training does (mixed precision on a GPU); the outcome and
the divergences are computed in float32 from the logits. Its attention runs on every SDPA kernel but
cuDNN's, which builds a graph for every new shape (``oar.method.attention_kernels``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from oar.method import controls, gradient_scorers, substitution, truth_scorers
from oar.method.attention_kernels import scoring_attention
from oar.method.names import SCORER_NAMES
from oar.method.probes import Probe, resolve_probe_kind
from oar.method.scorer_config import ScorerConfig

Scorer = Callable[[object, Sequence[Probe], Sequence[str], ScorerConfig], list[Tensor]]

# Every scorer by its method name, in the order of oar.method.names.SCORER_NAMES (which must list each).
SCORERS: dict[str, Scorer] = {
    "oar_p": substitution.oar_p_scores,
    "oar_g": gradient_scorers.oar_g_scores,
    "grad_norm": gradient_scorers.grad_norm_scores,
    "entropy": controls.entropy_scores,
    "position": controls.position_scores,
    "random": controls.random_scores,
    "truth": truth_scorers.truth_scores,
    "truth_graded": truth_scorers.graded_truth_scores,
    "truth_final": truth_scorers.final_step_truth_scores,
    "truth_early": truth_scorers.early_steps_truth_scores,
}
if tuple(SCORERS) != SCORER_NAMES:
    raise ImportError(f"the scorers {tuple(SCORERS)} are not oar.method.names.SCORER_NAMES {SCORER_NAMES}: "
                      "name a new scorer there and here")


@dataclass
class Scores:
    """Scores [B, T] on response positions (0 outside reasoning), and per-row bookkeeping."""

    scores: Tensor
    reasoning_mask: Tensor
    scored: Tensor  # [B] bool: rows a scorer actually ran on
    lt_fallback: Tensor  # [B] bool: rows that asked for an answer-span probe but had no answer span
    nonfinite: Tensor = field(init=False)  # [B] bool: rows with a NaN/inf reasoning score

    def __post_init__(self):
        bad = ~torch.isfinite(self.scores) & self.reasoning_mask
        self.nonfinite = bad.any(dim=1)


def score(
    method: str,
    model,
    probes: Sequence[Probe],
    config: ScorerConfig = ScorerConfig(),
    active: Tensor | Sequence[bool] | None = None,
    width: int | None = None,
) -> Scores:
    """Importance scores of every reasoning token of every probe.

    ``active`` [B] marks the rows that need scores (the trainer passes A_i != 0); inactive rows get
    zeros, which the gate turns into weights of 1. ``width`` is the T of the result (default: the
    longest response). The model is put in eval mode for scoring and restored after.
    """
    if method not in SCORERS:
        raise ValueError(f"unknown scorer {method!r}; expected one of {sorted(SCORERS)}")
    n = len(probes)
    width = width if width is not None else max((len(p.response_ids) for p in probes), default=0)
    if any(len(p.response_ids) > width for p in probes):
        raise ValueError(f"width {width} is shorter than a response")
    active_rows = torch.ones(n, dtype=torch.bool) if active is None else torch.as_tensor(active, dtype=torch.bool).cpu()
    if active_rows.shape != (n,):
        raise ValueError(f"active must have shape [{n}], got {tuple(active_rows.shape)}")

    scores = torch.zeros(n, width, dtype=torch.float32)
    mask = torch.zeros(n, width, dtype=torch.bool)
    for i, p in enumerate(probes):
        mask[i, : p.reasoning_len] = True
    active_list = active_rows.tolist()  # one read of a host tensor, not one per row
    rows = [i for i in range(n) if active_list[i] and probes[i].reasoning_len > 0]
    kinds = [resolve_probe_kind(p, config.probe) for p in probes]
    fallback = torch.tensor([k != config.probe for k in kinds], dtype=torch.bool)

    if rows:
        was_training = model.training
        model.eval()
        try:
            with scoring_attention(config.attention):  # no per-shape kernel builds (oar.method.attention_kernels)
                row_scores = SCORERS[method](model, [probes[i] for i in rows], [kinds[i] for i in rows], config)
        finally:
            model.train(was_training)
        for i, s in zip(rows, row_scores):  # on the host already: the scorers move their results off once
            scores[i, : probes[i].reasoning_len] = s.float().cpu()
    scored = torch.zeros(n, dtype=torch.bool)
    scored[rows] = True
    return Scores(scores=scores, reasoning_mask=mask, scored=scored, lt_fallback=fallback & scored)
