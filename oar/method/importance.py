"""Token importance: how much each reasoning token moves the model's final-answer distribution.

A *scorer* turns a probe (``oar.method.probes``) into one score per reasoning token (method.md sections
4, 5 and 7): ``oar_p`` (pad substitution, exact), ``oar_g`` (gradient x input at a noised point), and
the controls ``grad_norm``, ``entropy``, ``position``, ``random``. All share one call shape,
``score(method, model, probes, config)``, and return scores [B, T] aligned with the response positions.

Only the logits a probe needs are computed (``logits_to_keep``). Probe batches are left-padded so
every probe ends at the same position, with explicit position ids and a 4D attention mask so padding
changes nothing. The model-reading scorers batch the rows of all probes of a call into forwards of at
most ``chunk_tokens`` tokens, build every forward's inputs on the model's device without waiting for it
(``oar.method.scoring_batches``), and move their scores off the device once per call.

Scoring runs in the precision of the training forward: the trainer calls the model accelerate prepared,
whose forward runs under bf16 autocast where training does (mixed precision on a GPU); the outcome and
the divergences are computed in float32 from the logits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers.cache_utils import DynamicCache

from oar.method.names import SCORER_NAMES
from oar.method.probes import PROBES, Probe, resolve_probe_kind
from oar.method.scoring_batches import (FIRST, FIRST_LEN, PROBE, OutcomeRows, left_aligned, mask_format, row_inputs,
                                        row_table)

# ----------------------------------------------------------------------------------------------------
# Scorers
# ----------------------------------------------------------------------------------------------------

SCORERS: dict[str, Callable] = {}


@dataclass(frozen=True)
class ScorerConfig:
    """Settings shared by every scorer.

    probe: outcome probe (``lt_logits``, ``as_mean``, ``as_joint``); the trainer passes ``lt_logits``
        during its warm-up steps.
    noise_sigma: OAR-G's absolute Gaussian noise on reasoning embeddings (the KL gradient is zero at
        the clean point).
    chunk_tokens: memory budget of one forward, in tokens: OAR-P's substituted copies of all responses
        of a call are stacked into forwards of at most this many new tokens (rows x longest row), and
        every scorer groups probes up to this many tokens. Smaller chunks pad less but launch more
        forwards: 512 was fastest on 2 CPU cores (bench/scoring_cost.py); on a GPU, where a forward's
        fixed cost dominates, use several thousand.
    seed: noise (OAR-G) and random-control seed; scores are reproducible for a fixed seed.
    span_tokens: OAR-P substitutes this many consecutive reasoning tokens at once and gives the span's
        divergence to each of its tokens; 1 is the exact one-token-at-a-time definition. A width w
        runs about R / w substituted suffixes instead of R (cost ~R^2 / (2 w) token-forwards).
    window_tokens: OAR-P with a local window (``window_substitution_scores``): after each substitution
        only this many reasoning tokens from the substituted one, and the conclusion and answer, are
        recomputed; the later reasoning keeps its clean keys and values (cost ~R x (window + tail)
        token-forwards). 0 recomputes the whole suffix, the exact definition.
    """

    probe: str = "as_mean"
    noise_sigma: float = 1e-3
    chunk_tokens: int = 512
    seed: int = 0
    span_tokens: int = 1
    window_tokens: int = 0

    def __post_init__(self):
        if self.probe not in PROBES:
            raise ValueError(f"probe must be one of {PROBES}, got {self.probe!r}")
        if self.noise_sigma <= 0:
            raise ValueError(f"noise_sigma must be > 0, got {self.noise_sigma}")
        if self.chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {self.chunk_tokens}")
        if isinstance(self.span_tokens, bool) or not isinstance(self.span_tokens, int) or self.span_tokens < 1:
            raise ValueError(f"span_tokens must be an integer >= 1, got {self.span_tokens!r}")
        if isinstance(self.window_tokens, bool) or not isinstance(self.window_tokens, int) or self.window_tokens < 0:
            raise ValueError(f"window_tokens must be an integer >= 0, got {self.window_tokens!r}")


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


def register(name: str):
    """Register a scorer against its name, which ``oar.method.names.SCORER_NAMES`` must list."""
    if name not in SCORER_NAMES:
        raise ValueError(f"scorer {name!r} is not in oar.method.names.SCORER_NAMES: add it there first")

    def wrap(fn):
        SCORERS[name] = fn
        return fn

    return wrap


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
            row_scores = SCORERS[method](model, [probes[i] for i in rows], [kinds[i] for i in rows], config)
        finally:
            model.train(was_training)
        for i, s in zip(rows, row_scores):  # on the host already: the scorers move their results off once
            scores[i, : probes[i].reasoning_len] = s.float().cpu()
    scored = torch.zeros(n, dtype=torch.bool)
    scored[rows] = True
    return Scores(scores=scores, reasoning_mask=mask, scored=scored, lt_fallback=fallback & scored)


# --- shared plumbing ---------------------------------------------------------------------------------


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _batch_pad_id(probes: Sequence[Probe]) -> int:
    """The pad id of a batch of probes (one tokenizer, one pad id)."""
    ids = {p.pad_id for p in probes}
    if len(ids) != 1:
        raise ValueError(f"probes of one batch carry different pad ids {sorted(ids)}")
    return ids.pop()


def _keep(probe: Probe, kind: str) -> int:
    """How many trailing probe logits an outcome needs: the answer tokens' predictors plus one."""
    return 1 if kind == "lt_logits" else len(probe.answer_ids) + 1


def _micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group row indices (longest first) so that rows x longest length stays within ``budget`` tokens."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[current[0]] > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def _flat_ids(seqs: Sequence[Sequence[int]], device) -> tuple[Tensor, Tensor]:
    """Every sequence's ids one after the other on ``device``, and where each begins."""
    starts = _offsets([len(s) for s in seqs])
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    return flat.to(device, non_blocking=True), torch.tensor(starts, dtype=torch.long).to(device, non_blocking=True)


def _offsets(counts: Sequence[int]) -> list[int]:
    """Where each of ``counts`` consecutive pieces starts in their concatenation."""
    return [0, *itertools.accumulate(counts)][:-1]


def _to_host(rows: Sequence[Tensor]) -> list[Tensor]:
    """Per-row results moved off the device in one copy (one wait for the device per scoring call)."""
    if not rows:
        return []
    flat = torch.cat([r.reshape(-1).float() for r in rows]).cpu()
    return list(flat.split([r.numel() for r in rows]))


# --- OAR-P --------------------------------------------------------------------------------------------


@register("oar_p")
@torch.no_grad()
def oar_p_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """OAR-P (method.md section 4): s_j = KL(p_0 || p_j), p_j the outcome with reasoning token j
    replaced by the pad id (AS-Joint: max(phi_0 - phi_j, 0)).

    Exact, and cheaper than the authors' all-copies batch in two ways: substituting token j cannot
    change positions before it, so each substituted copy runs only its suffix over the clean KV cache of
    ``probe[:prompt + j]``; and only the last ``A + 1`` logits are computed. The copies of every probe
    of the call are stacked into forwards of at most ``config.chunk_tokens`` tokens
    (:func:`substitution_scores`).

    With ``config.span_tokens`` w > 1, each copy substitutes a span of w consecutive reasoning tokens
    (``reasoning_spans``) and every token of the span gets the span's divergence; w = 1 is the
    definition above, computed by the very same operations.

    With ``config.window_tokens`` K > 0, each copy recomputes only K reasoning tokens from its span's start
    and the tokens after the reasoning: an approximation (:func:`substitution_scores`).
    """
    spans = [reasoning_spans(p.reasoning_len, config.span_tokens) for p in probes]
    return substitution_scores(model, probes, kinds, spans, config.chunk_tokens, _batch_pad_id(probes),
                               config.window_tokens)


@dataclass(frozen=True)
class SubstitutionForward:
    """One forward of OAR-P's schedule: rows [begin, end) of the sorted copies, each left-padded to
    ``width`` new tokens over ``cache_len`` cached positions."""

    begin: int
    end: int
    width: int
    cache_len: int


def substitution_rows(lengths: Sequence[int], starts: Sequence[int], reasoning: Sequence[int],
                      spans: Sequence[Sequence[tuple[int, int]]], window_tokens: int = 0) -> list[tuple[int, ...]]:
    """One row-table row (``oar.method.scoring_batches.ROW_FIELDS``) per substituted copy, in the order
    the copies are scored: longest first, then by probe and span. Probe i has ``lengths[i]`` tokens, its
    reasoning starting at ``starts[i]`` and ``reasoning[i]`` tokens long.

    Exact (``window_tokens`` 0): the copy of span [a, b) runs the probe from reasoning position a to its
    end, over the clean cache of everything before a. With a window K, it runs reasoning positions
    [a, max(b, a + K)) (cut at the reasoning's end), then the tokens after the reasoning, which also see
    the clean cache of the reasoning after the window."""
    rows = []
    for i, (n, start, r) in enumerate(zip(lengths, starts, reasoning)):
        end = start + r
        for a, b in spans[i]:
            if window_tokens:
                e = min(max(b, a + window_tokens), r)
                rows.append((i, start + a, e - a, end, n - end, b - a, start + a, start + e, end))
            else:
                rows.append((i, start + a, n - start - a, 0, 0, b - a, start + a, 0, 0))
    rows.sort(key=lambda row: -(row[2] + row[4]))  # stable: probe and span order among equal lengths
    return rows


# A forward's rows each hold their own copy of every layer's cached prefix (transformers' cache concatenates
# past and new keys per row), so the cached positions are budgeted too: at most this many per chunk token.
# Near the reasoning's end the copies are short and their prefixes long; without it a 7B forward of 4,096
# tokens could hold 160 rows of 3,500 cached positions (31 GB of keys and values).
CACHED_PER_CHUNK_TOKEN = 8


def substitution_forwards(rows: Sequence[tuple[int, ...]], chunk_tokens: int) -> list[SubstitutionForward]:
    """Greedy packing of the sorted copies: a forward takes rows while rows x its longest row (the first)
    stays within ``chunk_tokens`` tokens and rows x its longest cached prefix within
    ``CACHED_PER_CHUNK_TOKEN x chunk_tokens`` (at least one row)."""
    forwards, begin = [], 0
    while begin < len(rows):
        width = rows[begin][2] + rows[begin][4]
        end, cache_len = begin + 1, max(rows[begin][6], rows[begin][8])
        while end < len(rows):
            cached = max(cache_len, rows[end][6], rows[end][8])
            taken = end - begin + 1
            if taken * width > chunk_tokens or taken * cached > CACHED_PER_CHUNK_TOKEN * chunk_tokens:
                break
            end, cache_len = end + 1, cached
        forwards.append(SubstitutionForward(begin, end, width, cache_len))
        begin = end
    return forwards


@torch.no_grad()
def substitution_scores(model, probes: Sequence[Probe], kinds: Sequence[str],
                        spans: Sequence[Sequence[tuple[int, int]]], chunk_tokens: int, pad_id: int,
                        window_tokens: int = 0) -> list[Tensor]:
    """OAR-P's scores of every probe over given substitution spans (consecutive [start, end) reasoning
    positions in order, covering its reasoning); every token of a span gets the span's divergence.

    1. The clean probes run in left-padded micro-batches of at most ``chunk_tokens`` tokens; their
       outcomes are kept, and their KV caches are stored once, left-aligned, in one bank per layer.
    2. The substituted copies of all probes (:func:`substitution_rows`) run in forwards of at most
       ``chunk_tokens`` tokens (:func:`substitution_forwards`); each row's cache is its own probe's clean
       prefix, gathered from the bank, and a 4D mask lets it see only that prefix (with a window, also
       the clean reasoning after the window, for the conclusion and answer).
    3. Each forward's divergences are written into one vector; the scores leave the device once.

    The token layout of every row is computed on the host before the first forward, so nothing in the
    loops waits for the device (``oar.method.scoring_batches``)."""
    device = _device(model)
    fmt = mask_format(model)
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    lengths = [len(s) for s in seqs]
    starts = [p.reasoning_start for p in probes]
    reasoning = [p.reasoning_len for p in probes]
    flat, flat_starts = _flat_ids(seqs, device)
    outcomes = OutcomeRows.of(probes, kinds, device)
    keeps = [_keep(p, k) for p, k in zip(probes, kinds)]
    cached = max(s + r for s, r in zip(starts, reasoning))  # no row sees a cached position past its reasoning

    # 1. clean passes, their outcomes and the bank of their KV caches
    clean_lp = clean_phi = None
    bank: list[tuple[Tensor, Tensor]] = []
    groups = _micro_batches(lengths, chunk_tokens)
    clean_table = row_table([(i, 0, lengths[i], 0, 0, 0, 0, 0, 0) for group in groups for i in group], device)
    begin = 0
    for group in groups:
        table = clean_table[begin : begin + len(group)]
        begin += len(group)
        width = lengths[group[0]]
        ids, positions, mask = row_inputs(table, width, 0, flat, flat_starts, pad_id, fmt)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    logits_to_keep=max(keeps[i] for i in group))
        rows = table[:, PROBE]
        lp, phi = outcomes.read(out.logits, rows)
        if lp is not None:
            clean_lp = lp.new_zeros((len(probes), lp.shape[-1])) if clean_lp is None else clean_lp
            clean_lp[rows] = lp
        if phi is not None:
            clean_phi = phi.new_zeros(len(probes)) if clean_phi is None else clean_phi
            clean_phi[rows] = phi
        padding = width - (table[:, FIRST_LEN])
        for layer, cache in enumerate(out.past_key_values.layers):
            keys, values = left_aligned(cache.keys, padding, cached), left_aligned(cache.values, padding, cached)
            if len(bank) <= layer:
                shape = (len(probes), keys.shape[1], cached, keys.shape[3])
                bank.append((keys.new_zeros(shape), values.new_zeros(shape)))
            bank[layer][0][rows, :, : keys.shape[2]] = keys
            bank[layer][1][rows, :, : values.shape[2]] = values

    # 2. the substituted copies of every probe, stacked
    copies = substitution_rows(lengths, starts, reasoning, spans, window_tokens)
    table = row_table(copies, device)
    divergences = torch.empty(len(copies), dtype=torch.float32, device=device)
    for fwd in substitution_forwards(copies, chunk_tokens):
        rows = table[fwd.begin : fwd.end]
        probe_of = rows[:, PROBE]
        ids, positions, mask = row_inputs(rows, fwd.width, fwd.cache_len, flat, flat_starts, pad_id, fmt)
        cache = DynamicCache([(k[probe_of, :, : fwd.cache_len], v[probe_of, :, : fwd.cache_len]) for k, v in bank]) \
            if fwd.cache_len else None
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                    use_cache=cache is not None, logits_to_keep=max(keeps[c[0]] for c in copies[fwd.begin : fwd.end]))
        clean = (None if clean_lp is None else clean_lp[probe_of], None if clean_phi is None else clean_phi[probe_of])
        divergences[fwd.begin : fwd.end] = outcomes.divergence(probe_of, clean, outcomes.read(out.logits, probe_of))

    # 3. every token of a span gets its copy's divergence
    copy_index = {(row[PROBE], row[FIRST] - starts[row[PROBE]]): c for c, row in enumerate(copies)}
    token_copy = [copy_index[(i, a)] for i in range(len(probes)) for a, b in spans[i] for _ in range(b - a)]
    token_scores = divergences[torch.tensor(token_copy, dtype=torch.long).to(device, non_blocking=True)]
    return _to_host(list(token_scores.split(reasoning)))


def span_substitution_scores(model, probe: Probe, kind: str, spans: Sequence[tuple[int, int]], chunk_tokens: int,
                             pad_id: int) -> Tensor:
    """One probe's exact OAR-P scores over given substitution spans (:func:`substitution_scores`)."""
    return substitution_scores(model, [probe], [kind], [spans], chunk_tokens, pad_id)[0]


def window_substitution_scores(model, probe: Probe, kind: str, spans: Sequence[tuple[int, int]], window_tokens: int,
                               chunk_tokens: int, pad_id: int) -> Tensor:
    """One probe's OAR-P scores with a local window: after substituting the span starting at reasoning
    position a, only reasoning positions [a, a + ``window_tokens``) (at least the span) and the tokens
    after the reasoning (conclusion and answer) are recomputed; every later reasoning position keeps its
    clean keys and values. A copy then runs ``window_tokens + tail`` tokens instead of the whole suffix,
    so the cost grows as R x window instead of R^2 / 2. Where the window reaches the end of the
    reasoning the result is exact OAR-P's; what it leaves out is the substitution's effect carried
    through the later reasoning tokens' own states (the text stays fixed, so the outcome reads it mostly
    through attention to the window and the conclusion). See :func:`substitution_scores`."""
    return substitution_scores(model, [probe], [kind], [spans], chunk_tokens, pad_id, window_tokens)[0]


def reasoning_spans(reasoning_len: int, span_tokens: int) -> list[tuple[int, int]]:
    """OAR-P's substitution units: consecutive [start, end) spans of ``span_tokens`` reasoning positions
    covering the reasoning (the last one shorter when ``span_tokens`` does not divide it)."""
    return [(a, min(a + span_tokens, reasoning_len)) for a in range(0, reasoning_len, span_tokens)]


# --- gradient scorers ----------------------------------------------------------------------------------


def _gather_rows(out: Tensor, values: Tensor, first: Tensor, count: Tensor, dest: Tensor) -> None:
    """Write ``values[r, first[r] + u]`` for u < ``count[r]`` to ``out[dest[r] + u]``, every row at once;
    the other columns go to ``out``'s last element, a spare slot (no boolean indexing: no host wait)."""
    u = torch.arange(values.shape[1], device=values.device)[None, :] - first[:, None]
    valid = (u >= 0) & (u < count[:, None])
    index = torch.where(valid, dest[:, None] + u, out.shape[0] - 1)
    out.index_put_((index.reshape(-1),), values.reshape(-1).to(out.dtype))


def _embedding_gradients(
    model,
    probes: Sequence[Probe],
    kinds: Sequence[str],
    config: ScorerConfig,
    objective: Callable[[OutcomeRows, Tensor, tuple, tuple | None], Tensor],
    needs_clean: bool,
    noise_sigma: float | None,
    reduce: Callable[[Tensor, Tensor], Tensor],
) -> list[Tensor]:
    """Per reasoning token of each probe, ``reduce(gradient, clean embedding)`` [B, n, hidden] -> [B, n]
    (float32), the gradient being the objective's with respect to the input embeddings, in micro-batches
    of at most ``config.chunk_tokens`` tokens.

    Only the reasoning is noised and only its gradient is read, so the prompt before it is the same in
    the clean and the noisy pass and no gradient needs to cross it: each distinct prompt runs once,
    without gradient, into a KV cache (``_prompt_caches``; a GRPO group shares one prompt), and both
    passes and the backward run only ``reasoning | conclude | answer`` on top of it. The result is the
    full-probe computation's, to float rounding. Token layouts and masks are built on the device
    (``oar.method.scoring_batches``) and the scores leave it once.

    The gradient is taken with ``torch.autograd.grad`` with respect to the input embeddings only:
    nothing is accumulated into (or cleared from) any parameter's ``.grad``.
    """
    device = _device(model)
    fmt = mask_format(model)
    pad_id = _batch_pad_id(probes)
    embed = model.get_input_embeddings()
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    flat, flat_starts = _flat_ids(seqs, device)
    outcomes = OutcomeRows.of(probes, kinds, device)
    reasoning = [p.reasoning_len for p in probes]
    dest, total = _offsets(reasoning), sum(reasoning)
    with _phase("inputs"):
        noise = _reasoning_noise(probes, seqs, config.seed, noise_sigma, embed.weight.shape[-1], device)
    with _phase("prefix"):
        prompt_of, prompt_bank = _prompt_caches(model, probes, flat, flat_starts, pad_id, config.chunk_tokens, fmt)
    starts = [p.reasoning_start for p in probes]
    suffixes = [len(s) - st for s, st in zip(seqs, starts)]
    groups = _micro_batches(suffixes, config.chunk_tokens)
    table = row_table([(i, starts[i], suffixes[i], 0, 0, 0, starts[i], 0, 0) for g in groups for i in g], device)
    per_row = torch.tensor([[dest[i], reasoning[i]] for g in groups for i in g], dtype=torch.long)
    per_row = per_row.reshape(-1, 2).to(device, non_blocking=True)
    out = torch.zeros(total + 1, dtype=torch.float32, device=device)
    begin = 0
    for group in groups:
        rows = table[begin : begin + len(group)]
        row_dest, row_count = per_row[begin : begin + len(group)].unbind(1)
        begin += len(group)
        width, cache_len = suffixes[group[0]], max(starts[i] for i in group)
        probe_of = rows[:, PROBE]
        keep = max(_keep(probes[i], kinds[i]) for i in group)
        with _phase("inputs"):
            ids, positions, mask = row_inputs(rows, width, cache_len, flat, flat_starts, pad_id, fmt)
            prefix = [(k[prompt_of[probe_of], :, :cache_len], v[prompt_of[probe_of], :, :cache_len])
                      for k, v in prompt_bank] if cache_len else None
            padding = width - rows[:, FIRST_LEN]
        clean = None
        if needs_clean:
            with torch.no_grad(), _phase("clean_forward"):
                logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                               past_key_values=_cache_of(prefix), logits_to_keep=keep).logits
                clean = outcomes.read(logits, probe_of)
        with _phase("inputs"):
            clean_embeds = embed(ids).detach()
            inputs = clean_embeds
            if noise is not None:
                # row r's reasoning is its first R tokens after its padding: noise row dest + u
                u = torch.arange(width, device=device)[None, :] - padding[:, None]
                noised = (u >= 0) & (u < row_count[:, None])
                drawn = noise[torch.where(noised, row_dest[:, None] + u, 0)]
                inputs = (clean_embeds.float() + torch.where(noised[..., None], drawn, 0.0)).to(clean_embeds.dtype)
            inputs = inputs.clone().requires_grad_(True)
        with torch.enable_grad():
            with _phase("noisy_forward"):
                logits = model(inputs_embeds=inputs, attention_mask=mask, position_ids=positions,
                               past_key_values=_cache_of(prefix), logits_to_keep=keep).logits
                objective_value = objective(outcomes, probe_of, outcomes.read(logits, probe_of), clean)
            with _phase("backward"):
                (grad,) = torch.autograd.grad(objective_value, inputs)
        _gather_rows(out, reduce(grad.float(), clean_embeds.float()), padding, row_count, row_dest)
    return _to_host(list(out[:total].split(reasoning)))


def _reasoning_noise(probes: Sequence[Probe], seqs: Sequence[list[int]], seed: int, sigma: float | None,
                     hidden: int, device) -> Tensor | None:
    """Every probe's noise on its reasoning embeddings, float32, on ``device``: probe i's [R_i, hidden]
    rows one after the other in probe order. Drawn from one generator on the device, seeded with
    ``seed``, in a fixed order (longest probe first, then probe order), so a probe's noise depends on
    the seed and the batch, not on how the batch is split into micro-batches (on the CPU the same
    numbers as a CPU generator)."""
    if sigma is None:
        return None
    generator = torch.Generator(device=device).manual_seed(seed)
    noises: list[Tensor | None] = [None] * len(probes)
    for i in sorted(range(len(probes)), key=lambda i: -len(seqs[i])):
        noises[i] = torch.randn((probes[i].reasoning_len, hidden), generator=generator, device=device) * sigma
    return torch.cat(noises)


@torch.no_grad()
def _prompt_caches(model, probes: Sequence[Probe], flat: Tensor, flat_starts: Tensor, pad_id: int, budget: int,
                   fmt: str) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """Each distinct prompt's KV cache, run once without gradient in left-padded micro-batches of at most
    ``budget`` tokens: (the prompt index of every probe [P] on the device, per layer (keys, values)
    [prompts, heads, longest prompt, dim], left-aligned). An empty prompt has an all-zero entry that no
    row ever sees; without any prompt, the bank is empty."""
    device = flat.device
    distinct = list(dict.fromkeys(p.prompt_ids for p in probes))
    index = {prompt: k for k, prompt in enumerate(distinct)}
    first_probe = {}
    for i, p in enumerate(probes):
        first_probe.setdefault(p.prompt_ids, i)
    prompt_of = torch.tensor([index[p.prompt_ids] for p in probes], dtype=torch.long).to(device, non_blocking=True)
    lengths = [len(d) for d in distinct]
    longest = max(lengths)
    bank: list[tuple[Tensor, Tensor]] = []
    named = [k for k in range(len(distinct)) if lengths[k]]
    groups = _micro_batches([lengths[k] for k in named], budget)
    table = row_table([(first_probe[distinct[named[j]]], 0, lengths[named[j]], 0, 0, 0, 0, 0, 0)
                       for g in groups for j in g], device)
    slots = torch.tensor([named[j] for g in groups for j in g], dtype=torch.long).to(device, non_blocking=True)
    begin = 0
    for group in groups:
        rows, slot = table[begin : begin + len(group)], slots[begin : begin + len(group)]
        begin += len(group)
        width = lengths[named[group[0]]]
        ids, positions, mask = row_inputs(rows, width, 0, flat, flat_starts, pad_id, fmt)
        cache = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                      logits_to_keep=1).past_key_values
        padding = width - rows[:, FIRST_LEN]
        for layer, c in enumerate(cache.layers):
            if len(bank) <= layer:
                shape = (len(distinct), c.keys.shape[1], longest, c.keys.shape[3])
                bank.append((c.keys.new_zeros(shape), c.values.new_zeros(shape)))
            bank[layer][0][slot, :, :width] = left_aligned(c.keys, padding)
            bank[layer][1][slot, :, :width] = left_aligned(c.values, padding)
    return prompt_of, bank


def _cache_of(prefix: list[tuple[Tensor, Tensor]] | None) -> DynamicCache | None:
    """A fresh cache holding ``prefix`` (a forward appends to its cache, so each pass gets its own)."""
    return DynamicCache(prefix) if prefix else None


def _phase(name: str):
    """A named region of the gradient scorers for torch.profiler (bench/oar_g_breakdown.py); free when no
    profiler runs."""
    return torch.profiler.record_function(f"embedding_gradients:{name}")


def _kl_objective(outcomes: OutcomeRows, probe_of: Tensor, perturbed: tuple, clean: tuple) -> Tensor:
    """Sum over rows of the unclamped divergence (rows are independent, so its gradient is per row)."""
    return outcomes.divergence(probe_of, clean, perturbed, clamp=False).sum()


def _likelihood_objective(outcomes: OutcomeRows, probe_of: Tensor, perturbed: tuple, _clean) -> Tensor:
    """Sum over rows of the clean answer log-likelihood (AS-Joint's phi) or, for a distribution outcome,
    the log-probability of its own argmax token."""
    logprobs, phi = perturbed
    parts = []
    if logprobs is not None:
        parts.append(logprobs.gather(-1, logprobs.detach().argmax(dim=-1, keepdim=True)).squeeze(-1))
    if phi is not None:
        parts.append(phi)
    if len(parts) == 1:
        return parts[0].sum()
    return torch.where(outcomes.is_joint[probe_of], parts[1], parts[0]).sum()


@register("oar_g")
def oar_g_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """OAR-G (method.md section 5): s_t = |<dJ/de_t, e_t>|, J = KL(p_0 || p(e + noise)) (AS-Joint:
    phi_0 - phi(e + noise)), noise N(0, sigma^2) on reasoning embeddings only, float32 objective."""
    return _embedding_gradients(model, probes, kinds, config, _kl_objective, True, config.noise_sigma,
                                lambda g, e: (g * e).sum(dim=-1).abs())


@register("grad_norm")
def grad_norm_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Gradient-norm proxy (method.md section 7): s_t = ||dJ'/de_t|| at the clean point, J' the clean
    answer log-likelihood (AS-Joint) or the log-probability of the clean distribution's argmax token."""
    return _embedding_gradients(model, probes, kinds, config, _likelihood_objective, False, None,
                                lambda g, _e: g.norm(dim=-1))


# --- controls that need no outcome ------------------------------------------------------------------


@register("entropy")
@torch.no_grad()
def entropy_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Policy entropy of the distribution each reasoning token was sampled from (GTPO-style control)."""
    device = _device(model)
    fmt = mask_format(model)
    pad_id = _batch_pad_id(probes)
    # The real sequence prompt | reasoning; position t's token was drawn from the logits one earlier.
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    flat, flat_starts = _flat_ids(seqs, device)
    reasoning = [p.reasoning_len for p in probes]
    dest = _offsets(reasoning)
    groups = _micro_batches([len(s) for s in seqs], config.chunk_tokens)
    order = [i for g in groups for i in g]
    table = row_table([(i, 0, len(seqs[i]), 0, 0, 0, 0, 0, 0) for i in order], device)
    per_row = torch.tensor([[dest[i], reasoning[i]] for i in order], dtype=torch.long).reshape(-1, 2)
    per_row = per_row.to(device, non_blocking=True)
    out = torch.zeros(sum(reasoning) + 1, dtype=torch.float32, device=device)
    begin = 0
    for group in groups:
        rows = table[begin : begin + len(group)]
        row_dest, row_count = per_row[begin : begin + len(group)].unbind(1)
        begin += len(group)
        ids, positions, mask = row_inputs(rows, len(seqs[group[0]]), 0, flat, flat_starts, pad_id, fmt)
        keep = max(reasoning[i] for i in group) + 1
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        logp = F.log_softmax(logits[:, : keep - 1].float(), dim=-1)
        # the rows end together: row r's reasoning is predicted by the last R_r of these keep - 1 positions
        _gather_rows(out, -(logp.exp() * logp).sum(dim=-1), keep - 1 - row_count, row_count, row_dest)
    return _to_host(list(out[:-1].split(reasoning)))


def _require_parsed(probes: Sequence[Probe], scorer: str, what: str, *fields: str) -> None:
    """Stop when a probe lacks the positions a truth scorer reads (only a task whose grammar marks them has them)."""
    missing = [i for i, p in enumerate(probes) if any(getattr(p, f) is None for f in fields)]
    if missing:
        raise ValueError(f"scorer '{scorer}' needs the {what} of every probe; rows {missing[:5]} have none "
                         "(only a task whose grammar marks them, the chain task, has them)")


def _marked(probe: Probe, positions, value: float, row: Tensor | None = None) -> Tensor:
    """``row`` (default zeros over the reasoning) with ``value`` at the given reasoning positions."""
    row = torch.zeros(probe.reasoning_len, dtype=torch.float32) if row is None else row
    row[[j for j in positions if j < probe.reasoning_len]] = value
    return row


@register("truth")
def truth_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Exactly right scores that only boost: 1 on the response's decisive tokens (``Probe.decisive``, parsed from its
    text by the task's grammar), 0 elsewhere. Through the gate it shows what reshaping can do when the
    scores are exactly right; it reads no model. Not the intervention oracle of the causal-token study."""
    _require_parsed(probes, "truth", "decisive positions", "decisive")
    return [_marked(p, p.decisive, 1.0) for p in probes]


@register("truth_graded")
def graded_truth_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """The truth gate with the reward-irrelevant tokens ranked last: 1 on the decisive tokens, 0 on the
    choices that cannot change the answer (``Probe.irrelevant``: remark and note words), 0.5 on the rest
    (tokens the text before forces). With the truth scorer's binary scores the zeros tie at the gate's
    tau-quantile and nothing is suppressed; ranked this way the gate suppresses the irrelevant choices,
    as a continuous scorer that ranked them lowest would. Reads no model."""
    _require_parsed(probes, "truth_graded", "decisive and irrelevant positions", "decisive", "irrelevant")
    return [_marked(p, p.decisive, 1.0, _marked(p, p.irrelevant, 0.0, torch.full((p.reasoning_len,), 0.5)))
            for p in probes]


@register("truth_final")
def final_step_truth_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """The truth gate on the last step only: 1 on the decisive tokens of the reasoning's last equation
    (``Probe.final_step``), 0 elsewhere, earlier steps' decisive tokens included. A mechanism control, not
    an upper bound: it puts the credit where OAR-P puts most of it (the restatement the answer is copied
    from), with scores that are otherwise the truth gate's. Reads no model."""
    _require_parsed(probes, "truth_final", "last step's decisive positions", "final_step")
    return [_marked(p, p.final_step, 1.0) for p in probes]


@register("truth_early")
def early_steps_truth_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """The truth gate on the earlier steps only: 1 on the decisive tokens of every equation but the
    reasoning's last (``Probe.decisive`` less ``Probe.final_step``), 0 elsewhere, the last step's decisive
    tokens included. The complement of ``truth_final`` within the truth gate's credit: a mechanism control
    for whether credit on the steps where errors are made, without the restatement the answer is copied
    from, keeps what GRPO learns. Reads no model."""
    _require_parsed(probes, "truth_early", "decisive and last-step positions", "decisive", "final_step")
    return [_marked(p, set(p.decisive) - set(p.final_step), 1.0) for p in probes]


@register("position")
def position_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Recency control: the token's index in the response."""
    return [torch.arange(p.reasoning_len, dtype=torch.float32) for p in probes]


@register("random")
def random_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Random control: the same gate on uniform random scores (is the gain the signal or any reshaping?)."""
    generator = torch.Generator(device="cpu").manual_seed(config.seed)
    return [torch.rand(p.reasoning_len, generator=generator) for p in probes]


def _oar_p_chunks(probe: Probe, kind: str, chunk_tokens: int, span_tokens: int = 1):
    """OAR-P's schedule for one probe, in positions: (reasoning position of the forward's first copy,
    number of copies) per forward. The copies are longest first, so a forward's copies start at
    consecutive spans and each is padded to the first's suffix, ``len(probe) - prompt - j0`` tokens."""
    spans = reasoning_spans(probe.reasoning_len, span_tokens)
    rows = substitution_rows([len(probe.ids(kind))], [probe.reasoning_start], [probe.reasoning_len], [spans])
    for fwd in substitution_forwards(rows, chunk_tokens):
        yield rows[fwd.begin][1] - probe.reasoning_start, fwd.end - fwd.begin


def forward_equivalents(probe: Probe, kind: str, chunk_tokens: int, span_tokens: int = 1) -> float:
    """OAR-P's cost for one probe in clean-forward token equivalents (tokens run / probe length)."""
    return span_forward_equivalents(probe, kind, chunk_tokens, reasoning_spans(probe.reasoning_len, span_tokens))


def span_forward_equivalents(probe: Probe, kind: str, chunk_tokens: int, spans: Sequence[tuple[int, int]]) -> float:
    """:func:`forward_equivalents` for given substitution spans (``span_substitution_scores``): the clean
    pass and every forward's rows x its padded width."""
    total = len(probe.ids(kind))
    rows = substitution_rows([total], [probe.reasoning_start], [probe.reasoning_len], [spans])
    tokens = total + sum((f.end - f.begin) * f.width for f in substitution_forwards(rows, chunk_tokens))
    return tokens / total if total else math.nan
