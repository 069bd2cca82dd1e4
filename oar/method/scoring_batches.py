"""Batched scorer forwards that never make the host wait for the device, and what every batched scorer
shares: micro-batches within a token budget, every probe's ids on the device at once, results moved off
it in one copy (``micro_batches``, ``flat_ids``, ``gather_rows``, ``to_host``).

The model-reading scorers (``oar.method.substitution``, ``oar.method.gradient_scorers``,
``oar.method.controls``) run many forwards whose rows come from different probes: each row reads its own
probe's tokens, may replace some of them by the substitute id, and attends to a cached prefix of its own
probe. Everything that says which tokens a row runs is known on the host before the
first forward (probe lengths and spans are Python integers), so it is written once into a small table
(:func:`row_table`) and sent to the device once; every forward then builds its token ids, positions and
attention mask on the device from a slice of that table. Nothing inside the loops reads a device value
on the host (no ``.item()``, no boolean-mask indexing, no ``.tolist()``), so on a GPU the host queues
forward after forward while the device computes.

The attention mask is passed to the model as a 4D mask: transformers then uses it as it is, where a 2D
padding mask would make it check on the host whether any position is padded (one synchronisation per
forward). Padding queries attend to themselves only, so no softmax row is empty.

Outcomes (``oar.method.probes.outcome_from_logits``) are read for all rows of a forward at once, rows of
different answer lengths and outcome kinds included (:class:`OutcomeRows`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers.cache_utils import DynamicCache

from oar.method.probes import Probe

# Columns of the row table: the probe a row reads; it runs positions [first, first + first_len) and then
# [second, second + second_len) of that probe, its first ``substituted`` tokens replaced by the
# substitute id; its queries see the cached positions [0, cache_end), and the second segment's queries
# also [tail_begin, tail_end).
ROW_FIELDS = ("probe", "first", "first_len", "second", "second_len", "substituted", "cache_end", "tail_begin",
              "tail_end")
PROBE, FIRST, FIRST_LEN, SECOND, SECOND_LEN, SUBSTITUTED, CACHE_END, TAIL_BEGIN, TAIL_END = range(len(ROW_FIELDS))


def row_table(rows: Sequence[Sequence[int]], device) -> Tensor:
    """[rows, len(ROW_FIELDS)] int64 on ``device``, built on the host and copied without waiting."""
    table = torch.tensor(rows, dtype=torch.long).reshape(-1, len(ROW_FIELDS))
    return table.to(device, non_blocking=True)


def mask_format(model) -> str:
    """``"bool"`` for SDPA (and what else takes a boolean mask), ``"additive"`` for eager attention."""
    implementation = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if implementation == "eager":
        return "additive"
    if implementation in ("sdpa", "flex_attention"):
        return "bool"
    raise ValueError(f"the scorers pass a 4D attention mask, which attention implementation {implementation!r} "
                     "cannot take; load the model with attn_implementation='sdpa' or 'eager'")


def model_mask(visible: Tensor, fmt: str) -> Tensor:
    """[B, n, keys] visibility as the model's 4D mask [B, 1, n, keys]."""
    visible = visible[:, None]
    if fmt == "bool":
        return visible
    zero = torch.zeros((), dtype=torch.float32, device=visible.device)
    return torch.where(visible, zero, torch.finfo(torch.float32).min)


def row_inputs(table: Tensor, width: int, cache_len: int, flat_ids: Tensor, starts: Tensor, substitute_id: int,
               fmt: str) -> tuple[Tensor, Tensor, Tensor]:
    """Token ids [B, width], position ids [B, width] and the 4D mask [B, 1, width, cache_len + width] of
    the rows in ``table`` (a slice of :func:`row_table`), left-padded to ``width``. ``flat_ids`` holds every
    probe's ids one after the other, ``starts`` [probes] where each begins."""
    device = flat_ids.device
    length = table[:, FIRST_LEN] + table[:, SECOND_LEN]
    t = torch.arange(width, device=device)
    u = t[None, :] - (width - length)[:, None]  # index within the row's own tokens; < 0 is padding
    real = u >= 0
    in_second = u >= table[:, FIRST_LEN, None]
    position = torch.where(in_second, table[:, SECOND, None] + u - table[:, FIRST_LEN, None],
                           table[:, FIRST, None] + u)
    position = torch.where(real, position, 0)
    ids = flat_ids[starts[table[:, PROBE]][:, None] + position]
    ids = torch.where(real & (u < table[:, SUBSTITUTED, None]), substitute_id, ids)
    ids = torch.where(real, ids, substitute_id)

    key = torch.arange(cache_len, device=device)
    cached = (key < table[:, CACHE_END, None, None]) | (
        in_second[:, :, None] & (key >= table[:, TAIL_BEGIN, None, None]) & (key < table[:, TAIL_END, None, None]))
    cached = cached & real[:, :, None]
    own = (t[None, None, :] <= t[None, :, None]) & real[:, None, :] & real[:, :, None]
    own = own | torch.eye(width, dtype=torch.bool, device=device)[None]  # padding queries see themselves
    return ids, position, model_mask(torch.cat([cached, own], dim=-1), fmt)


def packed_inputs(table: Tensor, placement: Tensor, rows: int, width: int, cache_len: int, flat_ids: Tensor,
                  starts: Tensor, substitute_id: int, fmt: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inputs of a forward whose rows each hold several copies of one probe side by side (OAR-P's packed
    copies, ``oar.method.copy_packing``): the copies in ``table`` (a slice of :func:`row_table`) start at
    (row, column) ``placement`` [C, 2]. Returns token ids and position ids [rows, width], the 4D mask
    [rows, 1, width, cache_len + width] and each copy's last column as a flat index into rows x width.

    A query sees its own copy's cached positions (``cache_end``, and with a window the tail's clean
    reasoning) and the tokens of its own copy up to itself, never a neighbour's: the row's cache is its
    probe's clean prefix, shared by its copies. Padding queries see the padding before them and themselves."""
    device = flat_ids.device
    copies = table.shape[0]
    length = table[:, FIRST_LEN] + table[:, SECOND_LEN]
    u = torch.arange(width, device=device)[None, :]  # index within a copy
    real = u < length[:, None]
    in_second = u >= table[:, FIRST_LEN, None]
    position = torch.where(in_second, table[:, SECOND, None] + u - table[:, FIRST_LEN, None], table[:, FIRST, None] + u)
    position = torch.where(real, position, 0)
    ids = flat_ids[starts[table[:, PROBE]][:, None] + position]
    ids = torch.where(u < table[:, SUBSTITUTED, None], substitute_id, ids)
    spare = rows * width  # a slot past the forward that takes every padding write
    slot = torch.where(real, placement[:, :1] * width + placement[:, 1:] + u, spare).reshape(-1)

    def scatter(values: Tensor, fill) -> Tensor:
        out = torch.full((spare + 1,), fill, dtype=values.dtype, device=device)
        out.index_put_((slot,), values.reshape(-1))
        return out[:spare].view(rows, width)

    copy_of = scatter(torch.arange(copies, device=device)[:, None].expand(copies, width), -1)
    token_ids = scatter(ids, substitute_id)
    positions = scatter(position, 0)
    second = scatter(in_second, False)
    occupied = copy_of >= 0
    own_row = table[copy_of.clamp_min(0)]  # [rows, width, fields]: each column's copy
    key = torch.arange(cache_len, device=device)
    cached = (key < own_row[..., CACHE_END, None]) | (
        second[..., None] & (key >= own_row[..., TAIL_BEGIN, None]) & (key < own_row[..., TAIL_END, None]))
    cached = cached & occupied[..., None]
    t = torch.arange(width, device=device)
    own = (copy_of[:, None, :] == copy_of[:, :, None]) & (t[None, None, :] <= t[None, :, None])
    own = own | torch.eye(width, dtype=torch.bool, device=device)[None]
    last = placement[:, 0] * width + placement[:, 1] + length - 1
    return token_ids, positions, model_mask(torch.cat([cached, own], dim=-1), fmt), last


class KeepNothingCache(DynamicCache):
    """A key-value cache that keeps nothing, for a forward that needs no cache and passes no mask (OAR-G's
    inline rows). Given neither, transformers' mask builder checks whether the rows pack several
    sequences (``masking_utils.find_packed_sequence_indices``: ``(...).all()`` read on the host), one wait
    for the device per forward wherever the model's ``use_cache`` is off, as a trainer sets it. With a
    cache the check is skipped; this one hands every layer its own keys and values back unchanged (no
    copy), and the causal mask is left to SDPA's ``is_causal`` as before: the same kernels, the same
    floats."""

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        return key_states, value_states


@contextmanager
def logits_at(model, index: Tensor) -> Iterator[None]:
    """While active, the model's output head computes logits only at ``index`` (flat positions into the
    forward's rows x columns; any shape, e.g. [copies, K]) and the model returns them in that shape plus
    the vocabulary. Packed copies end at different columns of their rows, which ``logits_to_keep`` (the
    same columns in every row) cannot express; call the model with ``logits_to_keep=0`` so the head
    receives every position, and the head runs inside the model's forward (and so under its autocast)."""
    head = model.get_output_embeddings()

    def gather(module, args):
        hidden = args[0]
        return (hidden.reshape(-1, hidden.shape[-1])[index], *args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()


def left_aligned(layer: Tensor, padding: Tensor, length: int | None = None) -> Tensor:
    """A left-padded cache tensor [B, heads, W, dim] shifted so that each row's first real position is at
    index 0, its first ``length`` positions (default W; positions past a row's end repeat its last one:
    they are never visible)."""
    width = layer.shape[2]
    length = width if length is None else min(length, width)
    source = (padding[:, None] + torch.arange(length, device=layer.device)[None, :]).clamp_max(width - 1)
    rows = torch.arange(layer.shape[0], device=layer.device)[:, None]
    return layer[rows, :, source].transpose(1, 2)  # advanced indices first: [B, length, heads, dim]


@dataclass
class OutcomeRows:
    """What reading an outcome needs, per probe, on the device: the logits it keeps (``keep``), its answer
    ids (padded) and their count, and its outcome kind (LT-Logits, AS-Mean or AS-Joint)."""

    keep: Tensor  # [P] long
    answers: Tensor  # [P, max(1, longest answer)] long
    answer_len: Tensor  # [P] long
    is_lt: Tensor  # [P] bool
    is_joint: Tensor  # [P] bool
    any_kl: bool  # some probe's outcome is a distribution (LT-Logits or AS-Mean)
    any_joint: bool  # some probe's outcome is AS-Joint's phi

    @classmethod
    def of(cls, probes: Sequence[Probe], kinds: Sequence[str], device) -> "OutcomeRows":
        longest = max([1] + [len(p.answer_ids) for p in probes])
        answers = torch.zeros((len(probes), longest), dtype=torch.long)
        for r, p in enumerate(probes):
            if kinds[r] != "lt_logits":
                answers[r, : len(p.answer_ids)] = torch.tensor(p.answer_ids, dtype=torch.long)
        answer_len = [0 if k == "lt_logits" else len(p.answer_ids) for p, k in zip(probes, kinds)]
        keep = [1 if k == "lt_logits" else len(p.answer_ids) + 1 for p, k in zip(probes, kinds)]

        def send(values, dtype):
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        return cls(send(keep, torch.long), answers.to(device, non_blocking=True), send(answer_len, torch.long),
                   send([k == "lt_logits" for k in kinds], torch.bool),
                   send([k == "as_joint" for k in kinds], torch.bool),
                   any(k != "as_joint" for k in kinds), any(k == "as_joint" for k in kinds))

    def read(self, logits: Tensor, probe: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """Outcomes of rows whose probes are ``probe`` [B] from their last logits [B, K, V], K at least
        every row's ``keep`` (rows end together): log-probabilities [B, V] (LT-Logits: the first answer
        token's; AS-Mean: of the mean answer-span logits) and AS-Joint's phi [B] (mean answer
        log-likelihood), each None when no probe needs it. As ``outcome_from_logits``, in float32."""
        z = logits.float()
        rows, window = z.shape[0], z.shape[1]
        begin = window - self.keep[probe]  # where each row's kept logits begin
        count = self.answer_len[probe]
        j = torch.arange(window, device=z.device)[None, :]
        span = (j >= begin[:, None]) & (j < (begin + count)[:, None])  # positions predicting answer tokens
        logprobs = phi = None
        if self.any_kl:
            first = z[torch.arange(rows, device=z.device), begin]
            mean = (z * span[..., None]).sum(dim=1) / count.clamp_min(1)[:, None]
            logprobs = F.log_softmax(torch.where(self.is_lt[probe][:, None], first, mean), dim=-1)
        if self.any_joint:
            answer = self.answers[probe].gather(1, (j - begin[:, None]).clamp(0, self.answers.shape[1] - 1))
            token = F.log_softmax(z, dim=-1).gather(-1, answer[..., None]).squeeze(-1)
            phi = (token * span).sum(dim=1) / count.clamp_min(1)
        return logprobs, phi

    def divergence(self, probe: Tensor, clean: tuple[Tensor | None, Tensor | None],
                   other: tuple[Tensor | None, Tensor | None], clamp: bool = True) -> Tensor:
        """Per row, KL(p_clean || p_other), or phi_clean - phi_other for AS-Joint rows (clamped at 0 with
        ``clamp``), as ``oar.method.probes.divergence``; ``clean`` holds the rows' clean outcomes."""
        (clean_lp, clean_phi), (lp, phi) = clean, other
        kl = drop = None
        if lp is not None:
            kl = (clean_lp.exp() * (clean_lp - lp)).sum(dim=-1)
        if phi is not None:
            drop = clean_phi - phi
            drop = drop.clamp_min(0.0) if clamp else drop
        if kl is None:
            return drop
        if drop is None:
            return kl
        return torch.where(self.is_joint[probe], drop, kl)


# --- what every batched scorer shares ---------------------------------------------------------------


def model_device(model) -> torch.device:
    """Where the model's parameters (and so every input the scorers build) live."""
    return next(model.parameters()).device


def batch_pad_id(probes: Sequence[Probe]) -> int:
    """The pad id of a batch of probes (one tokenizer, one pad id)."""
    ids = {p.pad_id for p in probes}
    if len(ids) != 1:
        raise ValueError(f"probes of one batch carry different pad ids {sorted(ids)}")
    return ids.pop()


def logits_to_keep(probe: Probe, kind: str) -> int:
    """How many trailing probe logits an outcome needs: the answer tokens' predictors plus one."""
    return 1 if kind == "lt_logits" else len(probe.answer_ids) + 1


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group row indices, longest first, into consecutive groups, each filled in turn while rows x its
    longest length stays within ``budget`` tokens (a row longer than ``budget`` is a group of its own).

    Which rows share a forward changes their padding, and with it the floats of every score: the
    published testbed tables were computed with these groups, so another grouping gives other numbers
    (evening the groups out, 4 + 4 rather than 7 + 1, lowered a scoring call's peak on an H200 but not
    its time, nor the training step's peak, which the update sets; ``perf/oar_g_variants.py``)."""
    groups, current = [], []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if current and (len(current) + 1) * lengths[current[0]] > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def even_micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """As many groups as :func:`micro_batches` makes within ``budget``, as even as that number allows: its
    groups under the smallest budget that needs no more of them (eight equal rows that fill in turn as
    7 + 1 go 4 + 4). No group holds more than ``budget`` allows, and a lone row's forward, which costs a
    GPU almost what a full one does, is spared. For layouts whose grouping no published table depends
    on (OAR-G's inline prompt)."""
    fewest = len(micro_batches(lengths, budget))
    low, high = 0, budget
    while low < high:
        middle = (low + high) // 2
        if len(micro_batches(lengths, middle)) <= fewest:
            high = middle
        else:
            low = middle + 1
    return micro_batches(lengths, low)


def flat_ids(seqs: Sequence[Sequence[int]], device) -> tuple[Tensor, Tensor]:
    """Every sequence's ids one after the other on ``device``, and where each begins."""
    starts = piece_starts([len(s) for s in seqs])
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    return flat.to(device, non_blocking=True), torch.tensor(starts, dtype=torch.long).to(device, non_blocking=True)


def piece_starts(counts: Sequence[int]) -> list[int]:
    """Where each of ``counts`` consecutive pieces starts in their concatenation."""
    return [0, *itertools.accumulate(counts)][:-1]


def to_host(rows: Sequence[Tensor]) -> list[Tensor]:
    """Per-row results moved off the device in one copy (one wait for the device per scoring call)."""
    if not rows:
        return []
    flat = torch.cat([r.reshape(-1).float() for r in rows]).cpu()
    return list(flat.split([r.numel() for r in rows]))



def gather_rows(out: Tensor, values: Tensor, first: Tensor, count: Tensor, dest: Tensor) -> None:
    """Write ``values[r, first[r] + u]`` for u < ``count[r]`` to ``out[dest[r] + u]``, every row at once;
    the other columns go to ``out``'s last element, a spare slot (no boolean indexing: no host wait)."""
    u = torch.arange(values.shape[1], device=values.device)[None, :] - first[:, None]
    valid = (u >= 0) & (u < count[:, None])
    index = torch.where(valid, dest[:, None] + u, out.shape[0] - 1)
    out.index_put_((index.reshape(-1),), values.reshape(-1).to(out.dtype))
