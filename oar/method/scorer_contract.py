"""The scorer contract, written once: what a scorer is given (``ScoringBatch``), what it must return, and
the check of every call's output (``checked_scores``).

**Call.** ``scorer(batch) -> list[Tensor]``: one argument, the call's :class:`ScoringBatch`. Its rows are
the responses to score (in training, those with a non-zero advantage, and for a scorer that reads groups
every response of each such group), each with at least one reasoning token. ``batch.model`` is the policy
in eval mode, the precision of the training forward; a scorer leaves it as it found it (no parameter
change, no ``.grad`` left behind: take gradients with ``torch.autograd.grad`` with respect to inputs),
which ``oar.method.importance.score`` checks around every call (``oar.method.weight_fingerprint``).

**Output.** One 1-D floating tensor per probe, in the probes' order, of the probe's ``reasoning_len``:
score t belongs to reasoning token ``probe.response_ids[t]``. Positions outside the reasoning get no score
(the gate gives them weight 1). Scores are finite and non-negative: an importance, which the gate logs,
normalises and ranks; values down to ``-NEGATIVE_ROUNDING`` count as float rounding of a divergence and
the gate clamps them to 0. A scorer of a signed quantity returns its magnitude (or another non-negative
transform) and says so; its signed form may be registered beside it with ``signed=True``
(``oar.method.scorer_registry.register_scorer``), whose scores may be negative: the token-credit
benchmark scores its sign, and the gate refuses it. Any device; the scores are moved to the host once per call.

**Determinism.** For a fixed ``batch.seed`` and inputs, the same scores on the same machine: draw noise
and random numbers only from generators seeded with ``batch.seed`` (never torch's global generator, which
the trainer's sampling uses). The trainer gives every step and every process its own seed.

**Several processes (DDP, FSDP2).** Each process scores its own rows, and processes may run different
numbers of forwards. ``batch.model`` (and ``batch.reference_model``) are then whole on every process (under
FSDP2 their weights are gathered before the call, ``oar.training.collective``), so their forwards issue no
collective; a scorer issues none itself (no ``torch.distributed`` call) and reads only its own rows.

**Needs.** What a scorer reads beyond the token ids and its settings it declares at registration
(``oar.method.scorer_registry.NEEDS``); the fields for undeclared needs are None: ``batch.model`` for a
scorer that does not read ``model``, the probes' parsed positions (``decisive``, ``final_step``,
``irrelevant``) for one that does not read ``parsed_steps`` (``oar.method.importance.score`` removes
them). The parsed positions exist only where the task's grammar marks them: a scorer that reads them
stops, naming itself and the positions, on a row that has none (``oar.method.truth_scorers``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import ScorerError, ScorerSpec

if TYPE_CHECKING:
    from oar.method.probes import Probe

NEGATIVE_ROUNDING = 1e-4  # scores in [-this, 0) are float rounding of a divergence (the gate clamps them to 0)


@dataclass(frozen=True)
class ScoringBatch:
    """Everything one scorer call is given.

    model: the policy (its forwards run in the training forward's precision; eval mode during the call).
    probes: the rows to score (``oar.method.probes.Probe``: prompt, response, reasoning length, answer span,
        and the chain task's parsed positions for a scorer that declares ``parsed_steps``).
    kinds: each row's outcome probe (``config.probe``; ``lt_logits`` where the row has no answer span).
    config: the run's scorer settings (``ScorerConfig``), built once per run.
    seed: this call's seed, for noise and random draws (per step and process in training).
    groups: each row's group, an integer shared by the responses to one prompt (``groups`` need).
    rewards: each row's reward (``groups`` need).
    reference_model: a second, frozen model (``reference_model`` need).
    tokenizer: the policy's tokenizer (every call has one where its caller has it: the trainer's
        processing class, the benchmark's policy tokenizer; None in a bare ``score`` call without one), for
        a scorer that reads the tokens' text.
    policy: the scored policy's name (the benchmark's frozen policy, the trainer's model name or path), or
        None where the caller does not know it.
    references: each row's problem's reference answer, as text (``reference_answer`` need: the answer key).
    """

    model: Any
    probes: Sequence[Probe]
    kinds: Sequence[str]
    config: ScorerConfig = ScorerConfig()
    seed: int = 0
    groups: Sequence[int] | None = None
    rewards: Sequence[float] | None = None
    reference_model: Any = None
    tokenizer: Any = None
    policy: str | None = None
    references: Sequence[str] | None = None


class ScorerRowError(ScorerError):
    """A score row that breaks the contract: ``scorer``, the ``row`` (an index into the probes the scorer was
    handed; ``oar.method.importance.score`` re-indexes it into its caller's probes, :meth:`at`) and what is
    wrong with it (``problem``), so that a caller can name the row as it knows it (the benchmark: its
    problem and sample)."""

    def __init__(self, scorer: str, row: int, problem: str):
        super().__init__(f"scorer {scorer!r}, row {row}: {problem}")
        self.scorer, self.row, self.problem = scorer, row, problem

    def at(self, row: int) -> ScorerRowError:
        """The same error for the row's index in another list of probes."""
        return ScorerRowError(self.scorer, row, self.problem)


def check_inputs(spec: ScorerSpec, batch: ScoringBatch) -> None:
    """The call gives the scorer what it declared it needs; raises ScorerError naming the scorer."""
    n = len(batch.probes)
    if len(batch.kinds) != n:
        raise ScorerError(f"scorer {spec.name!r}: {len(batch.kinds)} outcome kinds for {n} probes")
    if spec.reads("groups"):
        for what, values in (("groups", batch.groups), ("rewards", batch.rewards)):
            if values is None or len(values) != n:
                raise ScorerError(f"scorer {spec.name!r} reads each row's group and reward: the call gives "
                                  f"{what} {'none' if values is None else f'for {len(values)} of {n} rows'}")
    if spec.reads("reference_answer") and (batch.references is None or len(batch.references) != n):
        raise ScorerError(f"scorer {spec.name!r} reads each row's reference answer: the call gives "
                          f"{'none' if batch.references is None else f'{len(batch.references)} for {n} rows'}")
    if spec.reads("reference_model") and batch.reference_model is None:
        raise ScorerError(f"scorer {spec.name!r} reads a reference model and the call has none (OARTrainer: "
                          "pass reference_model=, or train with a KL term, beta > 0, whose reference it takes)")


def checked_scores(spec: ScorerSpec, batch: ScoringBatch, output: Any) -> list[Tensor]:
    """A call's output as host float32 tensors, after checking it against the contract; raises ScorerError
    naming the scorer, or :class:`ScorerRowError` naming it and the first row that breaks it (shape, type, a
    non-finite or negative score)."""
    name = spec.name
    if not isinstance(output, (list, tuple)):
        raise ScorerError(f"scorer {name!r} returned {type(output).__name__}, not a list of one tensor per probe")
    if len(output) != len(batch.probes):
        raise ScorerError(f"scorer {name!r} returned {len(output)} score rows for {len(batch.probes)} probes")
    rows = []
    for i, (row, probe) in enumerate(zip(output, batch.probes)):
        if not isinstance(row, Tensor) or not row.is_floating_point():
            raise ScorerRowError(name, i, "a score row must be a floating tensor, got "
                                 f"{getattr(row, 'dtype', type(row).__name__)}")
        if row.shape != (probe.reasoning_len,):
            raise ScorerRowError(name, i, f"scores of shape {tuple(row.shape)}, the reasoning has "
                                 f"{probe.reasoning_len} tokens (one score each, nothing outside the reasoning)")
        rows.append(row.detach())
    host = [r.to("cpu", torch.float32) for r in rows]
    # read on the host as numpy (the rows are there already): no device sync, no torch host-read op
    values = torch.cat(host).numpy() if host else np.zeros(0, dtype=np.float32)
    bad = ~np.isfinite(values) | ((values < -NEGATIVE_ROUNDING) & (not spec.signed))
    if bad.any():
        flat = int(np.argmax(bad))
        i = int(np.searchsorted(np.cumsum([r.numel() for r in host]), flat, side="right"))
        j = flat - sum(r.numel() for r in host[:i])
        value = float(values[flat])
        if not np.isfinite(value):
            raise ScorerRowError(name, i, f"score {value} at reasoning token {j} is not finite")
        raise ScorerRowError(name, i, f"score {value:.6g} at reasoning token {j} is negative; the gate needs "
                             "non-negative scores (return a magnitude)")
    return host


@contextlib.contextmanager
def eager_attention(*models: Any) -> Iterator[None]:
    """Within the block, each model (where it is one) runs eager attention, which returns attention weights
    (``output_attentions=True``); their implementation is restored after."""
    saved = []
    try:
        for model in models:
            config = getattr(model, "config", None)
            if model is None or config is None or not hasattr(model, "set_attn_implementation"):
                continue
            saved.append((model, config._attn_implementation))
            model.set_attn_implementation("eager")
        yield
    finally:
        for model, implementation in reversed(saved):
            model.set_attn_implementation(implementation)


def same_scores_twice(spec: ScorerSpec, batch: ScoringBatch) -> bool:
    """Whether two calls with the batch's seed give the same scores bit for bit (the contract's determinism;
    what a benchmark checks before it ranks a scorer)."""
    first = checked_scores(spec, batch, spec.function(batch))
    second = checked_scores(spec, batch, spec.function(batch))
    return all(torch.equal(a, b) for a, b in zip(first, second))
