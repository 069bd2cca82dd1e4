"""Token importance: how much each reasoning token moves the model's final-answer distribution, by any
scorer: ``score(name, model, probes, config, ...)``.

A *scorer* turns probes (``oar.method.probes``) into one score per reasoning token (method.md sections
4, 5 and 7). The scorers are registered by name in ``oar.method.scorer_registry`` (the built-ins, one
module per idea, are listed in ``oar.method.builtin_scorers``); the contract each keeps, what a call gives
it and what it must return, is ``oar.method.scorer_contract``, which ``score`` checks on every call.
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

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from oar.method.attention_kernels import scoring_attention
from oar.method.probes import Probe, resolve_probe_kind
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_contract import ScorerRowError, ScoringBatch, check_inputs, checked_scores, eager_attention
from oar.method.scorer_registry import ScorerError, ScorerSpec, scorer_spec
from oar.method.weight_fingerprint import first_change, fingerprints


@dataclass
class Scores:
    """Scores [B, T] on response positions (0 outside reasoning), and per-row bookkeeping."""

    scores: Tensor
    reasoning_mask: Tensor
    scored: Tensor  # [B] bool: rows a scorer actually ran on
    lt_fallback: Tensor  # [B] bool: rows that asked for an answer-span probe but had no answer span
    # [B] bool: rows with a NaN/inf reasoning score (none: the contract's check stops such a call; kept for
    # the trainer's `oar/fallback_nonfinite` metric, which stays 0)
    nonfinite: Tensor = field(init=False)

    def __post_init__(self):
        bad = ~torch.isfinite(self.scores) & self.reasoning_mask
        self.nonfinite = bad.any(dim=1)


def score(
    method: str | ScorerSpec,
    model,
    probes: Sequence[Probe],
    config: ScorerConfig = ScorerConfig(),
    active: Tensor | Sequence[bool] | None = None,
    width: int | None = None,
    *,
    seed: int = 0,
    probe: str | None = None,
    groups: Sequence[int] | None = None,
    rewards: Sequence[float] | None = None,
    reference_model=None,
    tokenizer=None,
    policy: str | None = None,
    references: Sequence[str] | None = None,
) -> Scores:
    """Importance scores of every reasoning token of every probe, by the scorer ``method`` (a registered
    name or an import path, ``oar.method.scorer_registry``, or the spec either resolves to: the trainer
    resolves its scorer once a run).

    ``active`` [B] marks the rows that need scores (the trainer passes A_i != 0); inactive rows get
    zeros, which the gate turns into weights of 1; for a scorer that reads groups, every row of a group
    with an active row is scored. ``width`` is the T of the result (default: the longest response).
    ``seed`` seeds the call's noise and random draws; ``probe`` overrides ``config.probe`` for this call
    (the trainer's warm-up steps); ``groups``, ``rewards`` and ``reference_model`` are handed to a scorer
    that declares it reads them; ``tokenizer`` and ``policy`` (the policy's name) are handed to every
    scorer (``ScoringBatch``). A scorer sees only what it declares: ``batch.model`` is the model only
    for one that reads ``model`` (None otherwise), and the probes carry the parsed positions (``decisive``,
    ``final_step``, ``irrelevant``: the answer key) only for one that reads ``parsed_steps``, whatever the
    caller attached (:func:`visible_probes`); ``references`` (each row's reference answer) go to one that
    reads the answer key (``reference_answer``). The model is put in eval mode for scoring and restored after.
    A scorer whose output breaks the contract, or that changes the model's (or the reference model's)
    weights or gradients (``oar.method.weight_fingerprint``), stops with a ``ScorerError`` naming it; one
    that breaks it on a row names the row by its index in ``probes`` (``ScorerRowError.row``).
    """
    spec = method if isinstance(method, ScorerSpec) else scorer_spec(method)
    n = len(probes)
    width = width if width is not None else max((len(p.response_ids) for p in probes), default=0)
    if any(len(p.response_ids) > width for p in probes):
        raise ValueError(f"width {width} is shorter than a response")
    active_rows = torch.ones(n, dtype=torch.bool) if active is None else torch.as_tensor(active, dtype=torch.bool).cpu()
    if active_rows.shape != (n,):
        raise ValueError(f"active must have shape [{n}], got {tuple(active_rows.shape)}")
    if spec.reads("groups"):
        if groups is None or len(groups) != n:
            raise ValueError(f"scorer {spec.name!r} reads groups: give one group per probe ({n})")
        wanted = {g for g, a in zip(groups, active_rows.tolist()) if a}
        active_rows = torch.tensor([g in wanted for g in groups], dtype=torch.bool)

    scores = torch.zeros(n, width, dtype=torch.float32)
    mask = torch.zeros(n, width, dtype=torch.bool)
    for i, p in enumerate(probes):
        mask[i, : p.reasoning_len] = True
    active_list = active_rows.tolist()  # one read of a host tensor, not one per row
    rows = [i for i in range(n) if active_list[i] and probes[i].reasoning_len > 0]
    wanted_probe = config.probe if probe is None else probe
    kinds = [resolve_probe_kind(p, wanted_probe) for p in probes]
    fallback = torch.tensor([k != wanted_probe for k in kinds], dtype=torch.bool)

    if rows:
        batch = ScoringBatch(
            model=model if spec.reads("model") else None, probes=visible_probes(spec, [probes[i] for i in rows]),
            kinds=[kinds[i] for i in rows], config=config, seed=seed,
            groups=[groups[i] for i in rows] if spec.reads("groups") else None,
            rewards=[rewards[i] for i in rows] if spec.reads("groups") and rewards is not None else None,
            reference_model=reference_model if spec.reads("reference_model") else None,
            tokenizer=tokenizer, policy=policy,
            references=[references[i] for i in rows] if spec.reads("reference_answer") and references is not None
            else None)
        check_inputs(spec, batch)
        was_training = model.training if model is not None else None
        if model is not None:
            model.eval()
        try:
            attention = eager_attention(model, batch.reference_model) if spec.reads("attentions") \
                else contextlib.nullcontext()
            # no per-shape kernel builds (oar.method.attention_kernels)
            # the contract's "leaves the models as it found them", checked on every call (oar.method.weight_fingerprint)
            # of the real models, whether or not the scorer was handed them
            models = {"the policy (batch.model)": model, "the reference model": reference_model}
            before = fingerprints(models)
            with scoring_attention(config.scoring_attention), attention:
                output = spec.function(batch)
            change = first_change(before, models)
            if change is not None:
                raise ScorerError(f"scorer {spec.name!r} {change}: a scorer leaves the models as it found them "
                                  "(oar.method.scorer_contract)")
            try:
                row_scores = checked_scores(spec, batch, output)
            except ScorerRowError as error:  # its row in this call's probes, not in the rows it was handed
                raise error.at(rows[error.row]) from None
        finally:
            if model is not None:
                model.train(was_training)
        for i, s in zip(rows, row_scores):
            scores[i, : probes[i].reasoning_len] = s
    scored = torch.zeros(n, dtype=torch.bool)
    scored[rows] = True
    return Scores(scores=scores, reasoning_mask=mask, scored=scored, lt_fallback=fallback & scored)


# the probe fields that hold the chain task's parsed positions: the answer key of the token-credit benchmark
PARSED_FIELDS = ("decisive", "final_step", "irrelevant")


def visible_probes(spec: ScorerSpec, probes: Sequence[Probe]) -> list[Probe]:
    """The probes as ``spec`` may see them: with the parsed positions for a scorer that declares
    ``parsed_steps``, without them (None) for any other. The callers attach them for their own reasons (the
    benchmark's response set to every probe, the trainer when it logs where the credit goes), so a scorer
    that did not declare them must not find them there."""
    if spec.reads("parsed_steps"):
        return list(probes)
    hidden = dict.fromkeys(PARSED_FIELDS)
    return [p if all(getattr(p, f) is None for f in PARSED_FIELDS) else replace(p, **hidden) for p in probes]
