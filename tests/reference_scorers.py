"""The scorers as they were before they were batched across responses: one response's OAR-P at a time,
OAR-G's noise drawn on the host, results moved off the device row by row. Kept verbatim as the
reference the batched scorers (``oar.method.importance``) must reproduce, to float rounding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers.cache_utils import DynamicCache

from oar.method import scorer_registry
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import ScorerSpec, scorer_spec
from oar.method.scoring_batches import batch_pad_id, logits_to_keep, micro_batches, model_device
from oar.method.probes import Outcome, Probe, divergence, outcome_from_logits

# --- shared plumbing ---------------------------------------------------------------------------------


def _left_pad(seqs: Sequence[list[int]], pad_id: int, device) -> tuple[Tensor, Tensor, Tensor, list[int]]:
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), pad_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), longest), dtype=torch.long)
    offsets = []
    for r, s in enumerate(seqs):
        off = longest - len(s)
        ids[r, off:] = torch.tensor(s, dtype=torch.long)
        attention[r, off:] = 1
        offsets.append(off)
    positions = (attention.cumsum(dim=1) - 1).clamp_min(0)
    return ids.to(device), attention.to(device), positions.to(device), offsets


def _batched_outcomes(logits: Tensor, probes: Sequence[Probe], kinds: Sequence[str]) -> list[Outcome]:
    """Per-row outcomes from the last ``keep`` logits of a left-padded batch (all rows end together)."""
    keep_all = logits.shape[1]
    outcomes = []
    for r, (p, kind) in enumerate(zip(probes, kinds)):
        k = logits_to_keep(p, kind)
        window = logits[r : r + 1, keep_all - k :]
        answer = torch.tensor([p.answer_ids], device=logits.device) if kind != "lt_logits" else None
        outcomes.append(outcome_from_logits(window, kind, answer))
    return outcomes


def _rows_objective(clean: Sequence[Outcome], perturbed: Sequence[Outcome]) -> Tensor:
    """Sum over rows of the unclamped divergence (rows are independent, so its gradient is per row)."""
    return torch.stack([divergence(c, p, clamp=False).sum() for c, p in zip(clean, perturbed)]).sum()


# --- OAR-P --------------------------------------------------------------------------------------------


def _cache_prefix(cache: DynamicCache, length: int, copies: int) -> DynamicCache:
    """The first ``length`` positions of a batch-1 cache, repeated ``copies`` times (views, no copy)."""
    layers = []
    for layer in cache.layers:
        k = layer.keys[:, :, :length].expand(copies, -1, -1, -1)
        v = layer.values[:, :, :length].expand(copies, -1, -1, -1)
        layers.append((k, v))
    return DynamicCache(layers)


@torch.no_grad()
def oar_p_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """OAR-P (method.md section 4): s_j = KL(p_0 || p_j), p_j the outcome with reasoning token j
    replaced by the pad id (AS-Joint: max(phi_0 - phi_j, 0)).

    Exact, and cheaper than the authors' all-copies batch in two ways: substituting token j cannot
    change positions before it, so each chunk of copies j0..j1 reuses the clean KV cache of
    ``probe[:prompt + j0]`` and only runs the suffix; and only the last ``A + 1`` logits are computed.

    With ``config.span_tokens`` w > 1, each copy substitutes a span of w consecutive reasoning tokens
    (``reasoning_spans``) and every token of the span gets the span's divergence; w = 1 is the
    definition above, computed by the very same operations.

    With ``config.window_tokens`` K > 0, each copy recomputes only K reasoning tokens from its span's start
    and the tokens after the reasoning (``window_substitution_scores``): an approximation.
    """
    pad_id = batch_pad_id(probes)
    scores = []
    for probe, kind in zip(probes, kinds):
        spans = reasoning_spans(probe.reasoning_len, config.span_tokens)
        if config.window_tokens:
            scores.append(window_substitution_scores(model, probe, kind, spans, config.window_tokens,
                                                     config.chunk_tokens, pad_id))
        else:
            scores.append(span_substitution_scores(model, probe, kind, spans, config.chunk_tokens, pad_id))
    return scores


def _clean_pass(model, probe: Probe, kind: str):
    """The clean probe's forward for OAR-P: (ids [1, N], logits kept, answer ids or None, clean outcome,
    its KV cache)."""
    device = model_device(model)
    ids = torch.tensor([probe.ids(kind)], device=device)
    keep = logits_to_keep(probe, kind)
    answer = torch.tensor([probe.answer_ids], device=device) if kind != "lt_logits" else None
    out = model(input_ids=ids, use_cache=True, logits_to_keep=keep)
    return ids, keep, answer, outcome_from_logits(out.logits, kind, answer), out.past_key_values


def _score_copies(row: Tensor, chunk: Sequence[tuple[int, int]], clean: Outcome, logits: Tensor, kind: str,
                  answer: Tensor | None) -> None:
    """Each copy's divergence from the clean outcome, written to every token of its span in ``row``."""
    copies = len(chunk)
    perturbed = outcome_from_logits(logits, kind, None if answer is None else answer.expand(copies, -1))
    for (a, b), value in zip(chunk, divergence(_expand(clean, copies), perturbed)):
        row[a:b] = value  # a span's divergence is the score of each of its tokens


@torch.no_grad()
def span_substitution_scores(model, probe: Probe, kind: str, spans: Sequence[tuple[int, int]], chunk_tokens: int,
                             pad_id: int) -> Tensor:
    """One probe's OAR-P scores over given substitution spans: consecutive [start, end) reasoning
    positions in order, covering the reasoning. Each copy replaces one span by ``pad_id`` and runs only
    the suffix after the clean prefix it shares (KV cache); every token of the span gets its divergence."""
    device = model_device(model)
    ids, keep, answer, clean, cache = _clean_pass(model, probe, kind)
    start = probe.reasoning_start
    row = torch.empty(probe.reasoning_len, dtype=torch.float32, device=device)
    for k0, copies in _span_chunks(probe, kind, chunk_tokens, spans):
        chunk = spans[k0 : k0 + copies]
        j0 = chunk[0][0]
        suffix = ids[:, start + j0 :].repeat(copies, 1)
        suffix[_substituted(chunk, j0, suffix.shape[1], device)] = pad_id
        out = model(
            input_ids=suffix,
            past_key_values=_cache_prefix(cache, start + j0, copies),
            use_cache=True,
            logits_to_keep=keep,
        )
        _score_copies(row, chunk, clean, out.logits, kind, answer)
    return row


@torch.no_grad()
def window_substitution_scores(model, probe: Probe, kind: str, spans: Sequence[tuple[int, int]], window_tokens: int,
                               chunk_tokens: int, pad_id: int) -> Tensor:
    """OAR-P with a local window: like :func:`span_substitution_scores`, but after substituting the span
    starting at reasoning position a, only reasoning positions [a, a + ``window_tokens``) (at least the
    span) and the tokens after the reasoning (conclusion and answer) are recomputed; every later reasoning
    position keeps its clean keys and values. A copy then runs ``window_tokens + tail`` tokens instead of
    the whole suffix, so the cost grows as R x window instead of R^2 / 2. Where the window reaches the
    end of the reasoning the result is exact OAR-P's; what it leaves out is the substitution's effect
    carried through the later reasoning tokens' own states (the text stays fixed, so the outcome reads it
    mostly through attention to the window and the conclusion).

    The copies of a chunk share the clean cache of ``prompt | reasoning``; a 4D additive mask hides each
    copy's stale window from its new tokens and keeps causality between its new tokens."""
    device = model_device(model)
    ids, keep, answer, clean, cache = _clean_pass(model, probe, kind)
    start, end = probe.reasoning_start, probe.reasoning_start + probe.reasoning_len
    tail = ids[0, end:]
    cached = [(layer.keys[:, :, :end], layer.values[:, :, :end]) for layer in cache.layers]
    dtype = cached[0][0].dtype if cached else torch.float32
    hidden = torch.finfo(dtype).min

    row = torch.empty(probe.reasoning_len, dtype=torch.float32, device=device)
    per_copy = window_tokens + len(tail)
    copies_per_chunk = max(1, chunk_tokens // per_copy)
    for k0 in range(0, len(spans), copies_per_chunk):
        chunk = spans[k0 : k0 + copies_per_chunk]
        windows = [(a, min(max(b, a + window_tokens), probe.reasoning_len)) for a, b in chunk]
        n = max(e - a for a, e in windows) + len(tail)
        new_ids = torch.full((len(chunk), n), pad_id, dtype=torch.long, device=device)
        positions = torch.zeros((len(chunk), n), dtype=torch.long, device=device)
        mask = torch.full((len(chunk), 1, n, end + n), hidden, dtype=dtype, device=device)
        for c, ((a, b), (_, e)) in enumerate(zip(chunk, windows)):
            real = (e - a) + len(tail)
            off = n - real  # left padding
            tokens = torch.cat([ids[0, start + a : start + e], tail])
            tokens[: b - a] = pad_id  # the substituted span
            new_ids[c, off:] = tokens
            pos = torch.cat([torch.arange(start + a, start + e, device=device),
                             torch.arange(end, ids.shape[1], device=device)])
            positions[c, off:] = pos
            positions[c, :off] = pos[0]
            # cached keys: the clean prefix before the window, and (for the tail) the reasoning after it
            mask[c, 0, off:, : start + a] = 0
            mask[c, 0, off + (e - a) :, start + e : end] = 0
            # new keys: causal among the copy's own tokens
            mask[c, 0, off:, end + off :] = torch.triu(torch.full((real, real), hidden, dtype=dtype, device=device), 1)
        shared = DynamicCache([(k.expand(len(chunk), -1, -1, -1), v.expand(len(chunk), -1, -1, -1)) for k, v in cached])
        out = model(input_ids=new_ids, attention_mask=mask, position_ids=positions, past_key_values=shared,
                    use_cache=True, logits_to_keep=keep)
        _score_copies(row, chunk, clean, out.logits, kind, answer)
    return row


def reasoning_spans(reasoning_len: int, span_tokens: int) -> list[tuple[int, int]]:
    """OAR-P's substitution units: consecutive [start, end) spans of ``span_tokens`` reasoning positions
    covering the reasoning (the last one shorter when ``span_tokens`` does not divide it)."""
    return [(a, min(a + span_tokens, reasoning_len)) for a in range(0, reasoning_len, span_tokens)]


def _substituted(chunk: Sequence[tuple[int, int]], j0: int, width: int, device) -> Tensor:
    """[copies, width] mask of the suffix positions copy c substitutes: its span, shifted by ``j0``
    (the suffix starts at reasoning position ``j0``)."""
    mask = torch.zeros((len(chunk), width), dtype=torch.bool, device=device)
    for c, (a, b) in enumerate(chunk):
        mask[c, a - j0 : b - j0] = True
    return mask


def _expand(outcome: Outcome, copies: int) -> Outcome:
    if outcome.phi is not None:
        return Outcome(None, outcome.phi.expand(copies))
    return Outcome(outcome.logprobs.expand(copies, -1), None)


# --- gradient scorers ----------------------------------------------------------------------------------


def _embedding_gradients(
    model,
    probes: Sequence[Probe],
    kinds: Sequence[str],
    config: ScorerConfig,
    objective: Callable[[Tensor, list[Outcome] | None], Tensor],
    needs_clean: bool,
    noise_sigma: float | None,
) -> list[tuple[Tensor, Tensor]]:
    """(gradient, clean embedding) on the reasoning positions of each probe, in micro-batches.

    Only the reasoning is noised and only its gradient is read, so the prompt before it is the same in
    the clean and the noisy pass and no gradient needs to cross it: each distinct prompt runs once,
    without gradient, into a KV cache (``_prompt_caches``; a GRPO group shares one prompt), and both
    passes and the backward run only ``reasoning | conclude | answer`` on top of it. The result is the
    full-probe computation's, to float rounding.

    The gradient is taken with ``torch.autograd.grad`` with respect to the input embeddings only:
    nothing is accumulated into (or cleared from) any parameter's ``.grad``.
    """
    device = model_device(model)
    pad_id = batch_pad_id(probes)
    embed = model.get_input_embeddings()
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    with _phase("inputs"):
        noises = _reasoning_noise(probes, seqs, config.seed, noise_sigma, embed.weight.shape[-1])
    with _phase("prefix"):
        prompts = _prompt_caches(model, probes, pad_id, config.chunk_tokens)
    suffixes = [s[p.reasoning_start :] for s, p in zip(seqs, probes)]
    results: list[tuple[Tensor, Tensor] | None] = [None] * len(probes)
    for group in micro_batches([len(s) for s in suffixes], config.chunk_tokens):
        g_probes = [probes[i] for i in group]
        g_kinds = [kinds[i] for i in group]
        with _phase("inputs"):
            ids, attention, positions, offsets = _left_pad([suffixes[i] for i in group], pad_id, device)
            prefix, prefix_mask, prompt_lens = _stacked_prefix([prompts[p.prompt_ids] for p in g_probes], device)
            attention = torch.cat([prefix_mask, attention], dim=1)  # the prompt's keys, then the suffix's
            positions = positions + prompt_lens[:, None]  # the suffix continues its own prompt's positions
        keep = max(logits_to_keep(p, k) for p, k in zip(g_probes, g_kinds))
        clean = None
        if needs_clean:
            with torch.no_grad(), _phase("clean_forward"):
                logits = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                               past_key_values=_cache_of(prefix), logits_to_keep=keep).logits
                clean = _batched_outcomes(logits, g_probes, g_kinds)
        with _phase("inputs"):
            clean_embeds = embed(ids).detach()
            inputs = clean_embeds
            if noise_sigma is not None:
                noise = torch.zeros(clean_embeds.shape, dtype=torch.float32)
                for r, (i, off) in enumerate(zip(group, offsets)):
                    noise[r, off : off + probes[i].reasoning_len] = noises[i]
                inputs = (clean_embeds.float() + noise.to(device)).to(clean_embeds.dtype)
            inputs = inputs.clone().requires_grad_(True)
        with torch.enable_grad():
            with _phase("noisy_forward"):
                logits = model(inputs_embeds=inputs, attention_mask=attention, position_ids=positions,
                               past_key_values=_cache_of(prefix), logits_to_keep=keep).logits
                perturbed = _batched_outcomes(logits, g_probes, g_kinds)
                objective_value = objective(perturbed, clean)
            with _phase("backward"):
                (grad,) = torch.autograd.grad(objective_value, inputs)
        for r, (i, p, off) in enumerate(zip(group, g_probes, offsets)):
            results[i] = (grad[r, off : off + p.reasoning_len].float(),
                          clean_embeds[r, off : off + p.reasoning_len].float())
    return results


def _reasoning_noise(probes: Sequence[Probe], seqs: Sequence[list[int]], seed: int, sigma: float | None,
                     hidden: int) -> list[Tensor | None]:
    """Each probe's noise on its reasoning embeddings [R, hidden], float32, drawn from one seeded
    generator in a fixed order (longest probe first, the order of the full-probe micro-batches), so a
    probe's noise does not depend on how the batch is split."""
    if sigma is None:
        return [None] * len(probes)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    noises: list[Tensor | None] = [None] * len(probes)
    for i in sorted(range(len(probes)), key=lambda i: -len(seqs[i])):
        noises[i] = torch.randn((probes[i].reasoning_len, hidden), generator=generator) * sigma
    return noises


@torch.no_grad()
def _prompt_caches(model, probes: Sequence[Probe], pad_id: int, budget: int) -> dict[tuple[int, ...], list]:
    """Each distinct prompt's KV cache, per layer (keys, values) [1, heads, prompt, dim], run once without
    gradient in left-padded micro-batches of at most ``budget`` tokens; an empty prompt has none."""
    distinct = list(dict.fromkeys(p.prompt_ids for p in probes if p.prompt_ids))
    caches: dict[tuple[int, ...], list] = {(): []}
    device = model_device(model)
    for group in micro_batches([len(d) for d in distinct], budget):
        ids, attention, positions, offsets = _left_pad([list(distinct[i]) for i in group], pad_id, device)
        cache = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                      logits_to_keep=1).past_key_values
        for r, (i, off) in enumerate(zip(group, offsets)):
            caches[distinct[i]] = [(layer.keys[r : r + 1, :, off:], layer.values[r : r + 1, :, off:])
                                   for layer in cache.layers]
    return caches


def _stacked_prefix(caches: Sequence[list], device) -> tuple[list[tuple[Tensor, Tensor]], Tensor, Tensor]:
    """Per-prompt caches stacked into one left-padded batch: per layer (keys, values) [B, heads, P, dim]
    (zeros where padded), the padding mask [B, P] and each row's prompt length [B]."""
    lengths = [c[0][0].shape[2] if c else 0 for c in caches]
    longest = max(lengths)
    mask = torch.zeros((len(caches), longest), dtype=torch.long, device=device)
    for r, n in enumerate(lengths):
        mask[r, longest - n :] = 1
    layers = []
    reference = next((c for c in caches if c), None)
    for layer in range(len(reference) if reference is not None else 0):
        k0, v0 = reference[layer]
        keys = k0.new_zeros((len(caches), k0.shape[1], longest, k0.shape[3]))
        values = v0.new_zeros((len(caches), v0.shape[1], longest, v0.shape[3]))
        for r, (c, n) in enumerate(zip(caches, lengths)):
            if n:
                keys[r, :, longest - n :] = c[layer][0][0]
                values[r, :, longest - n :] = c[layer][1][0]
        layers.append((keys, values))
    return layers, mask, torch.tensor(lengths, device=device)


def _cache_of(prefix: list[tuple[Tensor, Tensor]]) -> DynamicCache | None:
    """A fresh cache holding ``prefix`` (a forward appends to its cache, so each pass gets its own)."""
    return DynamicCache(prefix) if prefix else None


def _phase(name: str):
    """A named region of the gradient scorers for torch.profiler (perf/oar_g_breakdown.py); free when no
    profiler runs."""
    return torch.profiler.record_function(f"embedding_gradients:{name}")


def oar_g_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """OAR-G (method.md section 5): s_t = |<dJ/de_t, e_t>|, J = KL(p_0 || p(e + noise)) (AS-Joint:
    phi_0 - phi(e + noise)), noise N(0, sigma^2) on reasoning embeddings only, float32 objective."""
    pairs = _embedding_gradients(
        model, probes, kinds, config, lambda pert, clean: _rows_objective(clean, pert), True, config.noise_sigma
    )
    return [(g * e).sum(dim=-1).abs() for g, e in pairs]


def grad_norm_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Gradient-norm proxy (method.md section 7): s_t = ||dJ'/de_t|| at the clean point, J' the clean
    answer log-likelihood (AS-Joint) or the log-probability of the clean distribution's argmax token."""

    def objective(outcomes: list[Outcome], _clean) -> Tensor:
        total = 0.0
        for o in outcomes:
            if o.phi is not None:
                total = total + o.phi.sum()
            else:
                top = o.logprobs.detach().argmax(dim=-1, keepdim=True)
                total = total + o.logprobs.gather(-1, top).sum()
        return total

    pairs = _embedding_gradients(model, probes, kinds, config, objective, False, None)
    return [g.norm(dim=-1) for g, _ in pairs]


@torch.no_grad()
def entropy_scores(model, probes: Sequence[Probe], kinds: Sequence[str], config: ScorerConfig) -> list[Tensor]:
    """Policy entropy of the distribution each reasoning token was sampled from (GTPO-style control)."""
    device = model_device(model)
    pad_id = batch_pad_id(probes)
    # The real sequence prompt | reasoning; position t's token was drawn from the logits one earlier.
    seqs = [list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len]) for p in probes]
    results: list[Tensor | None] = [None] * len(probes)
    for group in micro_batches([len(s) for s in seqs], config.chunk_tokens):
        ids, attention, positions, _ = _left_pad([seqs[i] for i in group], pad_id, device)
        keep = max(probes[i].reasoning_len for i in group) + 1
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=keep).logits
        for r, i in enumerate(group):
            r_len = probes[i].reasoning_len
            z = logits[r, keep - 1 - r_len : keep - 1].float()
            logp = F.log_softmax(z, dim=-1)
            results[i] = -(logp.exp() * logp).sum(dim=-1)
    return results




def _span_chunks(probe: Probe, kind: str, chunk_tokens: int, spans: Sequence[tuple[int, int]]):
    """OAR-P's schedule over substitution spans: (first span k0, number of copies) per forward. A chunk
    runs ``copies`` suffixes from the first span's start, ``len(probe) - prompt - spans[k0][0]`` tokens
    each, at most ``chunk_tokens`` in all (at least one copy)."""
    total, start = len(probe.ids(kind)), probe.reasoning_start
    k0 = 0
    while k0 < len(spans):
        copies = max(1, min(len(spans) - k0, chunk_tokens // (total - start - spans[k0][0])))
        yield k0, copies
        k0 += copies


# The reference of each batched scorer.
REFERENCE = {"oar_p": oar_p_scores, "oar_g": oar_g_scores, "grad_norm": grad_norm_scores, "entropy": entropy_scores}


@dataclass(frozen=True)
class SeededConfig(ScorerConfig):
    """The scorers' settings with the call's seed, where the references read it."""

    seed: int = 0


def as_registered(method: str) -> ScorerSpec:
    """The reference of a batched scorer as the registry holds a scorer (``oar.method.scorer_registry``)."""
    def call(batch):
        config = SeededConfig(**asdict(batch.config), seed=batch.seed)
        return REFERENCE[method](batch.model, batch.probes, batch.kinds, config)
    return ScorerSpec(method, call, scorer_spec(method).needs)


def use_reference(patch, method: str) -> None:
    """Within a monkeypatch context, ``score(method, ...)`` runs the reference of the scorer."""
    patch.setitem(scorer_registry._REGISTRY, method, as_registered(method))
