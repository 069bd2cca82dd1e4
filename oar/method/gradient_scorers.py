"""The gradient scorers (method.md sections 5 and 7): ``oar_g`` (OAR-G, gradient x input of the outcome's
divergence at a noised point) and ``grad_norm`` (the gradient's norm at the clean point, a control).

Both take the gradient of an objective on the outcome with respect to the reasoning's input embeddings
(:func:`_embedding_gradients`), in micro-batches of at most ``grad_chunk_tokens`` tokens (``chunk_tokens``
unless set): either each distinct prompt runs once into a KV cache without gradient and only ``reasoning |
conclude | answer`` runs with it (``grad_prompt: cached``), or every probe runs whole with no attention mask
(``inline``: flash attention on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers.cache_utils import DynamicCache

from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import (FIRST_LEN, PROBE, KeepNothingCache, OutcomeRows, batch_pad_id,
                                        even_micro_batches, flat_ids, gather_rows, left_aligned, logits_at,
                                        logits_to_keep, mask_format, micro_batches, model_device, piece_starts,
                                        row_inputs, row_table, to_host)


@dataclass
class _GradRows:
    """One micro-batch of probes as the model runs it: the probe of each row [B], its token ids
    [B, width], the column of its first reasoning token [B], its reasoning's length [B] and where its
    scores go in the flat output [B]; ``run(inputs)`` calls the model on ``input_ids=`` or
    ``inputs_embeds=`` and returns the rows' kept logits [B, K, V], each row's last ``K`` positions."""

    probe_of: Tensor
    ids: Tensor
    first: Tensor
    count: Tensor
    dest: Tensor
    run: Callable[..., Tensor]


def _embedding_gradients(
    model,
    probes: Sequence[Probe],
    kinds: Sequence[str],
    config: ScorerConfig,
    objective: Callable[[OutcomeRows, Tensor, tuple, tuple | None], Tensor],
    needs_clean: bool,
    noise_sigma: float | None,
    reduce: Callable[[Tensor, Tensor], Tensor],
    seed: int = 0,
) -> list[Tensor]:
    """Per reasoning token of each probe, ``reduce(gradient, clean embedding)`` [B, n, hidden] -> [B, n]
    (float32), the gradient being the objective's with respect to the input embeddings, in micro-batches
    of at most ``config.grad_budget`` tokens.

    Only the reasoning is noised and only its gradient is read, so the prompt before it is the same in
    the clean and the noisy pass. ``config.grad_prompt`` says how the prompt runs: ``cached``
    (:func:`_cached_rows`) or ``inline`` (:func:`_inline_rows`); both give the full-probe computation's
    result, to float rounding. Token layouts are built on the device (``oar.method.scoring_batches``)
    and the scores leave it once.

    The gradient is taken with ``torch.autograd.grad`` with respect to the input embeddings only:
    nothing is accumulated into (or cleared from) any parameter's ``.grad``.
    """
    device = model_device(model)
    pad_id = batch_pad_id(probes)
    embed = model.get_input_embeddings()
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    flat, flat_starts = flat_ids(seqs, device)
    outcomes = OutcomeRows.of(probes, kinds, device)
    reasoning = [p.reasoning_len for p in probes]
    dest, total = piece_starts(reasoning), sum(reasoning)
    with _phase("inputs"):
        noise = _reasoning_noise(probes, seqs, seed, noise_sigma, embed.weight.shape[-1], device)
    layout = _inline_rows if config.grad_prompt == "inline" else _cached_rows
    out = torch.zeros(total + 1, dtype=torch.float32, device=device)
    for rows in layout(model, probes, kinds, seqs, flat, flat_starts, pad_id, config, dest):
        clean = None
        if needs_clean:
            with torch.no_grad(), _phase("clean_forward"):
                clean = outcomes.read(rows.run(input_ids=rows.ids), rows.probe_of)
        with _phase("inputs"):
            clean_embeds = embed(rows.ids).detach()
            inputs = clean_embeds
            if noise is not None:
                # row r's reasoning is its columns first[r] + u, u < count[r]: noise row dest[r] + u
                u = torch.arange(rows.ids.shape[1], device=device)[None, :] - rows.first[:, None]
                noised = (u >= 0) & (u < rows.count[:, None])
                drawn = noise[torch.where(noised, rows.dest[:, None] + u, 0)]
                inputs = (clean_embeds.float() + torch.where(noised[..., None], drawn, 0.0)).to(clean_embeds.dtype)
            inputs = inputs.clone().requires_grad_(True)
        with torch.enable_grad():
            with _phase("noisy_forward"):
                perturbed = outcomes.read(rows.run(inputs_embeds=inputs), rows.probe_of)
                objective_value = objective(outcomes, rows.probe_of, perturbed, clean)
            with _phase("backward"):
                (grad,) = torch.autograd.grad(objective_value, inputs)
        gather_rows(out, reduce(grad.float(), clean_embeds.float()), rows.first, rows.count, rows.dest)
    return to_host(list(out[:total].split(reasoning)))


def _cached_rows(model, probes: Sequence[Probe], kinds: Sequence[str], seqs: Sequence[list[int]], flat: Tensor,
                 flat_starts: Tensor, pad_id: int, config: ScorerConfig, dest: Sequence[int]) -> Iterator[_GradRows]:
    """``grad_prompt: cached``: each distinct prompt runs once, without gradient, into a KV cache
    (``_prompt_caches``; a GRPO group shares one prompt), and only ``reasoning | conclude | answer`` runs
    on top of it, left-padded, micro-batched by its length, through a 4D mask (which leaves a GPU the
    memory-efficient attention kernel). The fewest FLOPs; the published testbed tables were scored so."""
    device = flat.device
    fmt = mask_format(model)
    with _phase("prefix"):
        prompt_of, prompt_bank = _prompt_caches(model, probes, flat, flat_starts, pad_id, config.chunk_tokens, fmt)
    starts = [p.reasoning_start for p in probes]
    suffixes = [len(s) - st for s, st in zip(seqs, starts)]
    groups = micro_batches(suffixes, config.grad_budget)
    table = row_table([(i, starts[i], suffixes[i], 0, 0, 0, starts[i], 0, 0) for g in groups for i in g], device)
    per_row = torch.tensor([[dest[i], probes[i].reasoning_len] for g in groups for i in g], dtype=torch.long)
    per_row = per_row.reshape(-1, 2).to(device, non_blocking=True)
    begin = 0
    for group in groups:
        rows = table[begin : begin + len(group)]
        row_dest, row_count = per_row[begin : begin + len(group)].unbind(1)
        begin += len(group)
        width, cache_len = suffixes[group[0]], max(starts[i] for i in group)
        probe_of = rows[:, PROBE]
        keep = max(logits_to_keep(probes[i], kinds[i]) for i in group)
        with _phase("inputs"):
            ids, positions, mask = row_inputs(rows, width, cache_len, flat, flat_starts, pad_id, fmt)
            prefix = [(k[prompt_of[probe_of], :, :cache_len], v[prompt_of[probe_of], :, :cache_len])
                      for k, v in prompt_bank] if cache_len else None

        def run(mask=mask, positions=positions, prefix=prefix, keep=keep, **inputs) -> Tensor:
            return model(**inputs, attention_mask=mask, position_ids=positions, past_key_values=_cache_of(prefix),
                         logits_to_keep=keep).logits

        yield _GradRows(probe_of, ids, width - rows[:, FIRST_LEN], row_count, row_dest, run)


def _inline_rows(model, probes: Sequence[Probe], kinds: Sequence[str], seqs: Sequence[list[int]], flat: Tensor,
                 flat_starts: Tensor, pad_id: int, config: ScorerConfig, dest: Sequence[int]) -> Iterator[_GradRows]:
    """``grad_prompt: inline``: every probe's whole sequence (prompt included) in a row of its own,
    micro-batched by its length (as evenly as the number of micro-batches allows: no published table
    depends on this grouping) and right-padded. A real token never sees the padding after it, so the
    model needs no attention mask: SDPA runs causal attention alone (flash attention on a GPU, with the
    key-value heads shared rather than repeated), at the price of running each prompt again per probe.
    The logits are read at each row's own last positions (``logits_at``); an empty cache that keeps nothing
    spares each forward transformers' host-side check for packed rows (``KeepNothingCache``)."""
    device = flat.device
    lengths = [len(s) for s in seqs]
    groups = even_micro_batches(lengths, config.grad_budget)
    per_row = torch.tensor([[i, lengths[i], probes[i].reasoning_start, probes[i].reasoning_len, dest[i]]
                            for g in groups for i in g], dtype=torch.long)
    per_row = per_row.reshape(-1, 5).to(device, non_blocking=True)
    begin = 0
    for group in groups:
        probe_of, length, first, count, row_dest = per_row[begin : begin + len(group)].unbind(1)
        begin += len(group)
        width = lengths[group[0]]
        keep = max(logits_to_keep(probes[i], kinds[i]) for i in group)
        with _phase("inputs"):
            t = torch.arange(width, device=device)[None, :]
            real = t < length[:, None]
            ids = torch.where(real, flat[flat_starts[probe_of][:, None] + torch.where(real, t, 0)], pad_id)
            j = length[:, None] - keep + torch.arange(keep, device=device)[None, :]
            last = torch.arange(len(group), device=device)[:, None] * width + j.clamp_min(0)

        def run(last=last, **inputs) -> Tensor:
            with logits_at(model, last):
                return model(**inputs, past_key_values=KeepNothingCache(), logits_to_keep=0).logits

        yield _GradRows(probe_of, ids, first, count, row_dest, run)


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
    groups = micro_batches([lengths[k] for k in named], budget)
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
    """A named region of the gradient scorers for torch.profiler (perf/oar_g_breakdown.py); free when no
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


def oar_g_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig,
                 seed: int = 0) -> list[Tensor]:
    """OAR-G (method.md section 5): s_t = |<dJ/de_t, e_t>|, J = KL(p_0 || p(e + noise)) (AS-Joint:
    phi_0 - phi(e + noise)), noise N(0, sigma^2) on reasoning embeddings only, drawn from ``seed``, float32
    objective."""
    return _embedding_gradients(model, probes, kinds, config, _kl_objective, True, config.noise_sigma,
                                lambda g, e: (g * e).sum(dim=-1).abs(), seed)


def grad_norm_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Gradient-norm proxy (method.md section 7): s_t = ||dJ'/de_t|| at the clean point, J' the clean
    answer log-likelihood (AS-Joint) or the log-probability of the clean distribution's argmax token."""
    return _embedding_gradients(model, probes, kinds, config, _likelihood_objective, False, None,
                                lambda g, _e: g.norm(dim=-1))
