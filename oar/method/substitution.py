"""OAR-P, counterfactual substitution (method.md section 4): the ``oar_p`` scorer, its exact, span and
window variants, its schedule of forwards, and its cost counted from that schedule.

Each reasoning token (or span of ``span_tokens``) is replaced by the substitute id, and its score is how
far the outcome moves: KL(p_0 || p_j), or the drop of AS-Joint's phi. Substituting position j cannot
change the positions before it, so every substituted copy runs only its suffix over the clean KV cache
of the probe's prefix, and the copies of all probes of a call are packed into forwards of at most
``chunk_tokens`` tokens, several copies of one probe to a row over that probe's prefix, held once
(:func:`substitution_scores`; ``oar.method.copy_packing``, ``oar.method.scoring_batches``).
With ``window_tokens`` K, a copy recomputes only K reasoning tokens and the conclusion and answer.
``forward_equivalents`` and ``span_forward_equivalents`` count what the schedule runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from transformers.cache_utils import DynamicCache

from oar.method.copy_packing import PackedForward, Placement, pack_copies
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import (CACHE_END, FIRST, FIRST_LEN, PROBE, SECOND_LEN, TAIL_END, OutcomeRows,
                                        batch_pad_id, flat_ids, left_aligned, logits_at, logits_to_keep, mask_format,
                                        micro_batches, model_device, packed_inputs, row_inputs, row_table, to_host)


@torch.no_grad()
def oar_p_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """OAR-P (method.md section 4): s_j = KL(p_0 || p_j), p_j the outcome with reasoning token j
    replaced by the pad id (AS-Joint: max(phi_0 - phi_j, 0)).

    Exact, and cheaper than the authors' all-copies batch in two ways: substituting token j cannot
    change positions before it, so each substituted copy runs only its suffix over the clean KV cache of
    ``probe[:prompt + j]``; and only the last ``A + 1`` logits are computed. The copies of every probe
    of the call are packed into forwards of at most ``config.chunk_tokens`` tokens
    (:func:`substitution_scores`).

    With ``config.span_tokens`` w > 1, each copy substitutes a span of w consecutive reasoning tokens
    (``reasoning_spans``) and every token of the span gets the span's divergence; w = 1 is the
    definition above, computed by the very same operations.

    With ``config.window_tokens`` K > 0, each copy recomputes only K reasoning tokens from its span's start
    and the tokens after the reasoning: an approximation (:func:`substitution_scores`).
    """
    spans = [reasoning_spans(p.reasoning_len, config.span_tokens) for p in probes]
    return substitution_scores(model, probes, kinds, spans, config.chunk_tokens, batch_pad_id(probes),
                               config.window_tokens)


def substitution_rows(lengths: Sequence[int], starts: Sequence[int], reasoning: Sequence[int],
                      spans: Sequence[Sequence[tuple[int, int]]], window_tokens: int = 0) -> list[tuple[int, ...]]:
    """One row-table row (``oar.method.scoring_batches.ROW_FIELDS``) per substituted copy, by probe and
    span. Probe i has ``lengths[i]`` tokens, its reasoning starting at ``starts[i]`` and ``reasoning[i]``
    tokens long.

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
    return rows


def substitution_forwards(copies: Sequence[tuple[int, ...]], chunk_tokens: int
                          ) -> tuple[list[Placement], list[PackedForward]]:
    """The copies of :func:`substitution_rows` packed into forwards (``oar.method.copy_packing``): each
    row holds copies of one probe over that probe's clean prefix, rows x width at most ``chunk_tokens``."""
    return pack_copies([c[PROBE] for c in copies], [c[FIRST_LEN] + c[SECOND_LEN] for c in copies],
                       [max(c[CACHE_END], c[TAIL_END]) for c in copies], chunk_tokens)


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
    device = model_device(model)
    fmt = mask_format(model)
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    lengths = [len(s) for s in seqs]
    starts = [p.reasoning_start for p in probes]
    reasoning = [p.reasoning_len for p in probes]
    flat, flat_starts = flat_ids(seqs, device)
    outcomes = OutcomeRows.of(probes, kinds, device)
    keeps = [logits_to_keep(p, k) for p, k in zip(probes, kinds)]
    cached = max(s + r for s, r in zip(starts, reasoning))  # no row sees a cached position past its reasoning

    # 1. clean passes, their outcomes and the bank of their KV caches
    clean_lp = clean_phi = None
    bank: list[tuple[Tensor, Tensor]] = []
    groups = micro_batches(lengths, chunk_tokens)
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

    # 2. the substituted copies of every probe, packed: a row's copies share its probe's cached prefix
    unpacked = substitution_rows(lengths, starts, reasoning, spans, window_tokens)
    placements, forwards = substitution_forwards(unpacked, chunk_tokens)
    copies = [unpacked[p.copy] for p in placements]
    table = row_table(copies, device)
    placement = torch.tensor([(p.row, p.offset) for p in placements], dtype=torch.long).reshape(-1, 2)
    placement = placement.to(device, non_blocking=True)
    divergences = torch.empty(len(copies), dtype=torch.float32, device=device)
    for fwd in forwards:
        rows = table[fwd.begin : fwd.end]
        probe_of = rows[:, PROBE]
        row_probe = [None] * fwd.rows  # each row's probe, known on the host
        for p in placements[fwd.begin : fwd.end]:
            row_probe[p.row] = unpacked[p.copy][PROBE]
        ids, positions, mask, last = packed_inputs(rows, placement[fwd.begin : fwd.end], fwd.rows, fwd.width,
                                                   fwd.cache_len, flat, flat_starts, pad_id, fmt)
        keep = max(keeps[c[PROBE]] for c in copies[fwd.begin : fwd.end])
        index = (last[:, None] - keep + 1 + torch.arange(keep, device=device)[None, :]).clamp_min(0)
        cache = None
        if fwd.cache_len:
            row_index = torch.tensor(row_probe, dtype=torch.long).to(device, non_blocking=True)
            cache = DynamicCache([(k[row_index, :, : fwd.cache_len], v[row_index, :, : fwd.cache_len])
                                  for k, v in bank])
        with logits_at(model, index):
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                        use_cache=cache is not None, logits_to_keep=0)
        clean = (None if clean_lp is None else clean_lp[probe_of], None if clean_phi is None else clean_phi[probe_of])
        divergences[fwd.begin : fwd.end] = outcomes.divergence(probe_of, clean, outcomes.read(out.logits, probe_of))

    # 3. every token of a span gets its copy's divergence
    copy_index = {(row[PROBE], row[FIRST] - starts[row[PROBE]]): c for c, row in enumerate(copies)}
    token_copy = [copy_index[(i, a)] for i in range(len(probes)) for a, b in spans[i] for _ in range(b - a)]
    token_scores = divergences[torch.tensor(token_copy, dtype=torch.long).to(device, non_blocking=True)]
    return to_host(list(token_scores.split(reasoning)))


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


# --- OAR-P's cost, counted from its schedule --------------------------------------------------------


def _oar_p_chunks(probe: Probe, kind: str, chunk_tokens: int, span_tokens: int = 1):
    """OAR-P's schedule for one probe, in positions: (reasoning position of the forward's first copy,
    number of copies) per forward. The longest copy left opens each forward, so forwards open at
    increasing spans."""
    spans = reasoning_spans(probe.reasoning_len, span_tokens)
    rows = substitution_rows([len(probe.ids(kind))], [probe.reasoning_start], [probe.reasoning_len], [spans])
    placements, forwards = substitution_forwards(rows, chunk_tokens)
    for fwd in forwards:
        yield rows[placements[fwd.begin].copy][FIRST] - probe.reasoning_start, fwd.end - fwd.begin


def forward_equivalents(probe: Probe, kind: str, chunk_tokens: int, span_tokens: int = 1) -> float:
    """OAR-P's cost for one probe in clean-forward token equivalents (tokens run / probe length)."""
    return span_forward_equivalents(probe, kind, chunk_tokens, reasoning_spans(probe.reasoning_len, span_tokens))


def span_forward_equivalents(probe: Probe, kind: str, chunk_tokens: int, spans: Sequence[tuple[int, int]]) -> float:
    """:func:`forward_equivalents` for given substitution spans (``span_substitution_scores``): the clean
    pass and every forward's rows x width, padding included."""
    total = len(probe.ids(kind))
    rows = substitution_rows([total], [probe.reasoning_start], [probe.reasoning_len], [spans])
    tokens = total + sum(f.tokens for f in substitution_forwards(rows, chunk_tokens)[1])
    return tokens / total if total else math.nan
