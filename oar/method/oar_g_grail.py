"""OAR-G as the GRAIL codebase (declare-lab/grail, ``GrailTrainerV2.compute_oar_g_weights``) computes it,
beside the project's OAR-G (method.md sections 5 and 6), with every difference between the two a switch.

Both take the gradient of ``KL(p_0 || p(e + noise))`` with respect to the input embeddings, p the AS-Mean
outcome (one softmax of the mean of the logits that predict the answer tokens), noise N(0, sigma^2), score
``|<g_t, e_t>|`` and put the scores through the bi-level gate (log1p, min-max, a tau cut, suppression
``max(n / theta, 0.1)`` below it, boost ``1 + beta (n - theta) / (1 - theta)`` above, renormalised to the
scored tokens' count). Where they differ (:class:`Differences`, every field False is the project's OAR-G):

1. ``whole_completion``: noise on, scores of and the gate over *every* completion token (the answer and what
   follows it included), not the reasoning alone (the project's other tokens keep weight 1);
2. ``first_box``: the outcome is read on the response as written (no probe), over the tokens of the *first*
   complete ``\\boxed{...}``, marker and closing brace included; the project reads it on its probe
   (``prompt | reasoning | conclude | answer``), over the answer text of the *last* box;
3. ``nearest_rank``: the tau cut is the sorted normalised scores' element ``floor(T tau)`` (clamped to the
   last), the authors' gate with its epsilons; the project's is the linear-interpolation quantile
   (``torch.quantile``), ``oar.method.gate.gate``;
4. ``no_box_weight_one``: a response without a box gets weight 1 on every token; the project reads its
   answer from a statement or the last number, else the first answer token's distribution (LT-Logits);
5. weights recomputed at every iteration of a generation batch (in ``compute_loss``, with that iteration's
   policy and a fresh draw of noise from torch's global generator), where the project computes them once,
   at generation, from the call's seed. That is no switch of one call: ``perf/grail_oar_g_comparison.py``
   measures it by recomputing the weights after an optimizer step and with another seed.

Two more differences the code shows, switches here too:

6. ``shifted``: noise and scores one position earlier than the token they weight (``[:, -(T + 1):-1]``,
   the input that predicts token t, sliced as the logits are);
7. ``noised_input``: the gradient is multiplied with the *noised* embedding (``noisy_embeds``), not the
   clean one.

With every switch off, :func:`oar_g_rows` computes the project's OAR-G scores (the same noise draws, to float
rounding: tested against ``oar.method.gradient_scorers.oar_g_scores``). The registered scorer ``oar_g_grail``
(:func:`oar_g_grail_scores`) returns the reasoning tokens' scores with the switches that change scores on
(1, 2, 4, 6, 7); the gate's differences (1, 3) act on weights, which :func:`oar_g_weights` computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor

from oar.method.grail import first_box_tokens
from oar.method.probes import resolve_probe_kind

GRAIL_EPS = 1e-12  # the authors' oar_g_eps: in the min-max, the cut and the boost's denominators
FLOOR = 0.1


@dataclass(frozen=True)
class Differences:
    """Which of the GRAIL codebase's differences from the project's OAR-G apply (see the module)."""

    whole_completion: bool = False
    first_box: bool = False
    nearest_rank: bool = False
    no_box_weight_one: bool = False
    shifted: bool = False
    noised_input: bool = False

    @classmethod
    def grail(cls) -> Differences:
        """Every difference: OAR-G as the GRAIL codebase computes it."""
        return cls(**{f.name: True for f in fields(cls)})

    @classmethod
    def only(cls, name: str) -> Differences:
        if name not in {f.name for f in fields(cls)}:
            raise ValueError(f"unknown difference {name!r}; known: {[f.name for f in fields(cls)]}")
        return cls(**{name: True})


@dataclass
class Row:
    """One response as the variant scores it: the token ids it runs, the logit positions whose mean is the
    outcome, where noise goes, the positions it scores (each with the response token it weights, or None
    for a token of the probe that is not the response's), and whether it is left at weight 1."""

    ids: list[int]
    outcome_at: list[int]
    noised: list[int]
    scored: list[int]
    response_index: list[int | None]
    weight_one: bool = False


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def build_row(probe, tokenizer, differences: Differences, probe_kind: str = "as_mean") -> Row:
    """The row of one response under ``differences`` (see the module and :class:`Row`)."""
    prompt = len(probe.prompt_ids)
    box = first_box_tokens(tokenizer, probe.response_ids) if differences.first_box else None
    if differences.first_box and box is not None:
        ids = list(probe.prompt_ids) + list(probe.response_ids)
        outcome_at = [prompt + k - 1 for k in range(*box)]  # the logits that predict the box's tokens
        weight_one = False
    else:
        kind = resolve_probe_kind(probe, probe_kind)
        ids = probe.ids(kind)
        answer = len(probe.answer_ids) if kind != "lt_logits" else 0
        outcome_at = [len(ids) - answer - 1 + k for k in range(answer)] if answer else [len(ids) - 1]
        no_box = probe.answer_kind != "boxed" if not differences.first_box else True
        weight_one = differences.no_box_weight_one and no_box
    end = len(ids) if differences.whole_completion else prompt + probe.reasoning_len
    scored = list(range(prompt, end))
    shift = 1 if differences.shifted else 0
    noised = [q - shift for q in scored]
    own = _common_prefix(ids[prompt:], probe.response_ids)  # probe positions that are the response's own tokens
    index = [q - prompt if q - prompt < own else None for q in scored]
    return Row(ids, outcome_at, noised, scored, index, weight_one)


def _noise(rows: Sequence[Row], probes: Sequence, kinds: Sequence[str], seed: int, sigma: float, hidden: int,
           device) -> list[Tensor]:
    """Each row's noise [len(noised), hidden]: its first ``reasoning_len`` rows are the project's draws
    (``oar.method.gradient_scorers._reasoning_noise``: one generator seeded ``seed``, longest probe first),
    the rest from a second generator seeded ``seed + 1``, in row order."""
    generator = torch.Generator(device=device).manual_seed(seed)
    first: list[Tensor | None] = [None] * len(rows)
    for i in sorted(range(len(rows)), key=lambda i: -len(probes[i].ids(kinds[i]))):
        first[i] = torch.randn((probes[i].reasoning_len, hidden), generator=generator, device=device) * sigma
    extra = torch.Generator(device=device).manual_seed(seed + 1)
    out = []
    for i, row in enumerate(rows):
        more = len(row.noised) - probes[i].reasoning_len
        rest = torch.randn((more, hidden), generator=extra, device=device) * sigma if more > 0 else None
        drawn = first[i][: len(row.noised)]
        out.append(drawn if rest is None else torch.cat([drawn, rest]))
    return out


def oar_g_rows(model, probes: Sequence, tokenizer, differences: Differences, *, sigma: float = 1e-3, seed: int = 0,
               probe_kind: str = "as_mean", chunk_tokens: int = 512) -> tuple[list[Row], list[Tensor]]:
    """Every probe's :class:`Row` and the scores of its scored positions (float32, host): ``|<g, x>|`` at the
    source of each scored position (one earlier where shifted), g the gradient of ``KL(p_0 || p(e + noise))``
    and x the clean (or, with ``noised_input``, the noised) embedding. A weight-1 row scores 0."""
    from oar.method.scoring_batches import micro_batches, model_device

    device = model_device(model)
    embed = model.get_input_embeddings()
    rows = [build_row(p, tokenizer, differences, probe_kind) for p in probes]
    kinds = [resolve_probe_kind(p, probe_kind) for p in probes]
    noise = _noise(rows, probes, kinds, seed, sigma, embed.weight.shape[-1], device)
    out: list[Tensor] = [torch.zeros(len(r.scored), dtype=torch.float32) for r in rows]
    live = [i for i, r in enumerate(rows) if not r.weight_one and r.scored]
    for group in micro_batches([len(rows[i].ids) for i in live], chunk_tokens):
        members = [live[g] for g in group]
        width = max(len(rows[i].ids) for i in members)
        ids = torch.zeros(len(members), width, dtype=torch.long)
        for r, i in enumerate(members):
            ids[r, : len(rows[i].ids)] = torch.tensor(rows[i].ids, dtype=torch.long)
        ids = ids.to(device)
        clean = embed(ids).detach()
        added = torch.zeros_like(clean, dtype=torch.float32)
        for r, i in enumerate(members):
            added[r, rows[i].noised] = noise[i]
        with torch.no_grad():
            clean_logits = model(inputs_embeds=clean).logits.float()
        with torch.enable_grad():
            noisy = (clean.float() + added).to(clean.dtype).requires_grad_(True)
            logits = model(inputs_embeds=noisy).logits.float()
            total = logits.new_zeros(())
            for r, i in enumerate(members):
                at = rows[i].outcome_at
                p0 = F.log_softmax(clean_logits[r, at].mean(dim=0), dim=-1)
                pe = F.log_softmax(logits[r, at].mean(dim=0), dim=-1)
                total = total + (p0.exp() * (p0 - pe)).sum()
            (grad,) = torch.autograd.grad(total, noisy)
        x = noisy.detach() if differences.noised_input else clean
        product = (grad.float() * x.float()).sum(dim=-1).abs()
        for r, i in enumerate(members):
            out[i] = product[r, rows[i].noised].detach().cpu()
    return rows, out


def oar_g_grail_scores(model, probes: Sequence, tokenizer, config, seed: int = 0) -> list[Tensor]:
    """The registered ``oar_g_grail``: the reasoning tokens' scores of OAR-G as the GRAIL codebase computes
    them (every difference that changes a score: 1, 2, 4, 6 and 7), in the project's scorer contract."""
    if tokenizer is None:
        raise ValueError("oar_g_grail finds the first box in the response's text: the call needs the tokenizer")
    differences = Differences(whole_completion=True, first_box=True, no_box_weight_one=True, shifted=True,
                              noised_input=True)
    rows, scores = oar_g_rows(model, probes, tokenizer, differences, sigma=config.noise_sigma, seed=seed,
                              chunk_tokens=config.grad_budget)
    out = []
    for p, row, s in zip(probes, rows, scores):
        reasoning = torch.zeros(p.reasoning_len, dtype=torch.float32)
        for slot, k in enumerate(row.response_index):
            if k is not None and k < p.reasoning_len:
                reasoning[k] = s[slot]
        out.append(reasoning)
    return out


# ------------------------------------------------------------------------------------ the two gates


def grail_gate(scores: Tensor, tau: float, beta: float) -> tuple[Tensor, Tensor]:
    """The GRAIL codebase's gate of one row's scores [n] (float32): weights [n] and the boost band [n]
    (the tokens at or above the cut). ``floor(n tau)``-th smallest normalised score as the cut; its
    epsilons as the authors'."""
    s = scores.float()
    log = torch.log1p(s)
    low, high = log.min(), log.max()
    normal = (log - low) / (high - low + GRAIL_EPS)
    index = min(int(math.floor(len(s) * tau)), len(s) - 1)
    theta = normal.sort().values[index]
    suppress = (normal / (theta + GRAIL_EPS)).clamp_min(FLOOR)
    boost = 1 + beta * (normal - theta) / (1 - theta + GRAIL_EPS)
    omega = torch.where(normal < theta, suppress, boost)
    weights = omega * len(s) / (omega.sum() + 1e-8)
    band = normal >= theta if high > low else torch.zeros_like(normal, dtype=torch.bool)
    return weights, band


def project_gate(scores: Tensor, tau: float, beta: float) -> tuple[Tensor, Tensor]:
    """The project's gate of one row's scores [n] (``oar.method.gate.gate``) and its boost band [n]: the
    normalised scores at or above the linear-interpolation tau-quantile (none in a row it leaves at 1)."""
    from oar.method.gate import gate

    s = scores.float()[None, :]
    weights = gate(s, torch.ones_like(s, dtype=torch.bool), tau, beta)[0]
    log = torch.log1p(s[0].clamp_min(0))
    if not bool(torch.isfinite(log).all()) or log.max() <= log.min():
        return weights, torch.zeros_like(log, dtype=torch.bool)
    normal = (log - log.min()) / (log.max() - log.min())
    return weights, normal >= torch.quantile(normal, tau)


def oar_g_weights(model, probes: Sequence, tokenizer, differences: Differences, *, tau: float = 0.4,
                  beta: float = 2.0, sigma: float = 1e-3, seed: int = 0,
                  chunk_tokens: int = 512) -> tuple[list[Tensor], list[Tensor]]:
    """Per probe, the advantage weight of every response token [len(response_ids)] and its boost-band
    membership (bool, same shape) under ``differences``: a token the variant does not gate keeps weight 1
    and is in no band (the project's reasoning-only gate, a row left at weight 1)."""
    rows, scores = oar_g_rows(model, probes, tokenizer, differences, sigma=sigma, seed=seed,
                              chunk_tokens=chunk_tokens)
    gate_of = grail_gate if differences.nearest_rank else project_gate
    weights, bands = [], []
    for p, row, s in zip(probes, rows, scores):
        w = torch.ones(len(p.response_ids), dtype=torch.float32)
        band = torch.zeros(len(p.response_ids), dtype=torch.bool)
        if not row.weight_one and len(s):
            gated, in_band = gate_of(s, tau, beta)
            for slot, k in enumerate(row.response_index):
                if k is not None:
                    w[k], band[k] = gated[slot], in_band[slot]
        weights.append(w)
        bands.append(band)
    return weights, bands
