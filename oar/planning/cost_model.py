"""The work of one training step's phases, counted from model shapes: FLOPs, model calls and decode
steps (:class:`Work`), timed on a :class:`~oar.planning.hardware.Hardware`; and the workload the plan
assumes (:class:`Assumptions`).

One training step has three phases; each is counted as work and turned into time by a hardware figure:

- **generation**: a memory-bound decode. Every decode step reads the bf16 weights once for the whole
  batch of sequences and the KV cache of every sequence; a step takes max(bytes / bandwidth, FLOPs /
  FLOP rate) (the roofline: at a few hundred sequences the matmuls can outweigh the weight read). A
  colocated vLLM engine holds as many sequences at once as its KV cache fits; the rest wait (waves).
- **scoring** of the rows with advantage != 0 (only those are scored, unless ``oar.score_all``):
  OAR-P one clean probe forward plus, for each substituted reasoning position j (every
  ``oar.span_tokens``-th, 1 = exact), a forward of the suffix after j over the clean prefix's KV
  cache: about R^2/2 token-forwards for R reasoning tokens (with ``oar.window_tokens`` K, only K
  reasoning tokens and the conclusion: about R x (K + tail)); the copies of all responses of a scoring
  call stacked, longest first, into forwards of ``oar.chunk_tokens`` (``SCHEDULE``). OAR-G a clean
  no-grad forward, a forward with grad on the input embeddings and its backward (input gradients only:
  about one forward's matmuls, two of its attention). grad_norm the same without the clean forward; entropy one no-grad
  forward of prompt + reasoning keeping R + 1 logits; truth, position and random read no model.
- **update**: forward + backward of prompt + completion (weight and input gradients: 3x the forward's
  matmuls), one more forward with gradient checkpointing, plus TRL's no-grad forwards: the old
  log-probabilities when vLLM's importance-sampling correction is on (TRL 1.16 ``_generate_and_score_completions``:
  also when gradient_accumulation_steps is not a multiple of steps_per_generation x num_iterations,
  which this project's settings never make) and the reference model's when ``beta`` != 0.

FLOPs of a forward of ``n`` new tokens over ``c`` cached ones, keeping ``k`` logits::

    2 * N_layers * n  +  4 * layers * n * (c + n) * heads * head_dim  +  2 * hidden * vocab * k

N_layers = the decoder layers' parameters (no embedding, no LM head). The attention term counts the full
n x (c + n) score and value products, as torch's FLOP counter and the math kernel do; a flash kernel
skips the masked half of a causal square, so for long sequences the term is up to 2x high. A backward
of the weights and inputs is 2x the forward's matmuls, attention's included (a flash kernel's backward
also recomputes the scores: half a forward's attention more, not counted).

Times are work over a sustained rate (``Work.seconds``): peak x utilisation and an assumed per-layer call
cost, or the rates and fixed costs measured on a GPU (``oar.planning.calibration``), each applied to
what it measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from oar.method.names import ADVANTAGE_RULES, BASELINE, MODEL_FREE_SCORERS
from oar.planning.hardware import Hardware
from oar.planning.memory_plan import CONCLUDE_AND_ANSWER_TOKENS, PlanError, oar_p_copies, stacked_forwards
from oar.planning.shapes import Shape
from oar.training.settings import OARSettings, grad_budget

# -------------------------------------------------------------------------------------- FLOPs


def forward_flops(shape: Shape, new: float, cached: float = 0.0, keep: float | None = None) -> float:
    """One sequence's forward of ``new`` tokens over ``cached`` ones, ``keep`` logits (None: all new)."""
    keep = new if keep is None else keep
    return (2 * shape.layer_params_total * new + 4 * shape.layers * new * (cached + new) * shape.attn_width
            + 2 * shape.hidden * shape.vocab * keep)


def backward_flops(shape: Shape, new: float, cached: float = 0.0, keep: float | None = None,
                   weights: bool = True) -> float:
    """The backward of :func:`forward_flops`: input gradients (1x the matmuls) and, with ``weights``,
    weight gradients (1x more); attention's two products have two gradient products each (2x)."""
    keep = new if keep is None else keep
    per = 2 if weights else 1
    return (per * (2 * shape.layer_params_total * new + 2 * shape.hidden * shape.vocab * keep)
            + 2 * 4 * shape.layers * new * (cached + new) * shape.attn_width)


# -------------------------------------------------------------------------------- assumptions


@dataclass(frozen=True)
class Assumptions:
    prompt_tokens: int = 256  # mean prompt with the chat template (MATH: ~100-300 tokens; the data is not read)
    completion_fill: float = 1.0  # mean completion / max_completion_length; 1.0 = every response at the limit
    # Share of rows with advantage != 0, the only ones scored. A group's rows all have advantage 0 when
    # its G rewards agree: a problem of pass rate p gives p^G + (1 - p)^G such groups, near 1 for the many
    # MATH problems a 1.5B-7B model always or never solves, near 0 for the rest; 0.5 is a middle guess,
    # not a measurement (each run logs its own as frac_scored in metrics.jsonl; the testbed's was 0.94).
    scored_share: float = 0.5
    answer_tokens: int = 3  # tokens of a final answer (as_mean / as_joint keep A + 1 logits)
    vllm_overhead_gb: float = 1.0  # of the engine's share, neither weights nor KV cache (profiling forward, sampler)


# --------------------------------------------------------------------------------------- work


@dataclass
class Work:
    """Work of one phase: FLOPs, model calls (a fixed cost each), a fixed time, and decode steps, each
    timed by the roofline: the larger of its FLOPs and its bytes over their rates."""

    flops: float = 0.0
    calls: float = 0.0  # forward (or backward) calls, each over every layer
    decode: list = dataclasses.field(default_factory=list)  # [(flops, bytes, count)] decode steps
    forwards: float = 0.0  # of the calls, the forward calls (what a forward hook counts)
    fixed_s: float = 0.0  # seconds beyond FLOPs and calls (the update's measured fixed cost)

    def seconds(self, hw: Hardware, layers: int, call_s: float | None = None,
                decode_step_s: float | None = None, flops: float | None = None) -> float:
        """``call_s``: fixed cost per call (default ``hw.fixed_call_s``); ``decode_step_s``: per decode
        step (default the same); ``flops``: the FLOP rate (default ``hw.flops``)."""
        call = hw.fixed_call_s(layers) if call_s is None else call_s
        t = self.flops / (hw.flops if flops is None else flops) + self.calls * call + self.fixed_s
        step = call if decode_step_s is None else decode_step_s
        for flops, nbytes, count in self.decode:
            t += count * (max(flops / hw.flops, nbytes / hw.bytes_per_s) + step)
        return t


def generation_work(shape: Shape, sequences: int, prompt: float, completion: int, concurrent: int) -> Work:
    """Prefill (compute) and ``completion`` decode steps of ``sequences`` sequences, ``concurrent`` at a time.
    Every decode step reads the bf16 weights once for all sequences in flight and each one's KV cache."""
    concurrent = max(1, min(sequences, concurrent))
    waves = math.ceil(sequences / concurrent)
    work = Work(flops=sequences * forward_flops(shape, prompt, keep=1), calls=waves, forwards=waves)
    # decode step t (0-based) of a wave: every sequence attends prompt + t cached tokens; the mean over t
    # is exact for the linear terms, so one averaged entry per wave stands for its steps
    mean_context = prompt + (completion - 1) / 2
    step_flops = concurrent * forward_flops(shape, 1, mean_context, keep=1)
    step_bytes = 2 * shape.params + concurrent * mean_context * shape.kv_bytes_per_token_bf16
    work.decode.append((step_flops, step_bytes, waves * completion))
    return work


def reasoning_probe(prompt: float, completion: float) -> tuple[float, float]:
    """(reasoning tokens R, probe length): the probe is prompt | reasoning | conclusion and answer."""
    reasoning = max(1.0, completion)
    return reasoning, prompt + reasoning + CONCLUDE_AND_ANSWER_TOKENS


SCHEDULES = ("stacked", "per_response")
# oar.method.substitution's schedule: "stacked" stacks the substituted copies of every scored response of a
# scoring call into shared forwards and batches the clean passes, without host synchronisations inside its
# loops; "per_response" is the earlier one (a response at a time, a synchronisation every chunk), which
# the calibration files measured before the change were made with.
SCHEDULE = "stacked"
PACKED_RESPONSES = 64  # responses of a scoring call packed as the scorer packs them; more are scaled from these


def oar_p_work(shape: Shape, prompt: float, reasoning: float, probe: float, keep: int, chunk_tokens: int,
               span: int = 1, window: int = 0, responses: int = 1, schedule: str = SCHEDULE) -> Work:
    """OAR-P of ``responses`` alike responses in one scoring call: a clean forward of each probe (its KV
    cache kept) and one forward row per substituted span [a, a + w) (span w, 1 = exact) running the tokens
    from reasoning position a to the probe's end over the clean prefix of prompt + a tokens; with a
    window K (``oar.window_tokens``) a row runs min(max(w, K), R - a) reasoning tokens and the tail over
    the cache of the whole prompt and reasoning.

    ``stacked`` (``oar.method.substitution`` now): the copies of all responses packed by the scorer's own
    packing (``oar.method.copy_packing``): rows of copies of one response over its prefix, rows x width
    <= ``chunk_tokens``; the clean probes in micro-batches of rows x probe <= ``chunk_tokens``; no host
    synchronisation inside the loops.
    ``per_response`` (before): one response at a time, its clean forward alone, then chunks of
    ``chunk_tokens // suffix`` copies from the chunk's first position (``chunk_tokens // (K + tail)``
    with a window), a host synchronisation every chunk."""
    if schedule not in SCHEDULES:
        raise PlanError(f"schedule {schedule!r} is not one of {SCHEDULES}")
    reasoning, span, responses = int(round(reasoning)), max(1, int(span)), max(1, int(round(responses)))
    if schedule == "per_response":
        return scaled(_oar_p_per_response(shape, prompt, reasoning, probe, keep, chunk_tokens, span, window),
                      responses)
    clean_rows = max(1, int(chunk_tokens // probe))
    clean_calls = math.ceil(responses / clean_rows)
    work = Work(flops=responses * forward_flops(shape, probe, keep=keep), calls=clean_calls, forwards=clean_calls)
    copies = oar_p_copies(prompt, reasoning, probe, span, window)
    # alike responses pack alike: beyond PACKED_RESPONSES the packing of that many is scaled (its forwards
    # and FLOPs within 0.2% of the whole packing's for the paper's 1.5B steps, in a tenth of the time)
    packed = min(responses, PACKED_RESPONSES)
    copies_work = Work()
    for fwd in stacked_forwards(copies, packed, chunk_tokens):
        # every row runs its width over the forward's cached prefix (masked, still computed); the output
        # head runs only at each copy's kept positions
        copies_work.calls += 1
        copies_work.forwards += 1
        copies_work.flops += fwd.rows * forward_flops(shape, fwd.width, fwd.cache_len, keep=0) \
            + (fwd.end - fwd.begin) * forward_flops(shape, 0, keep=keep)
    copies_work = scaled(copies_work, responses / packed)
    work.calls += copies_work.calls
    work.forwards += copies_work.forwards
    work.flops += copies_work.flops
    return work


def _oar_p_per_response(shape: Shape, prompt: float, reasoning: int, probe: float, keep: int, chunk_tokens: int,
                        span: int, window: int) -> Work:
    work = Work(flops=forward_flops(shape, probe, keep=keep), calls=1, forwards=1)
    starts = list(range(0, reasoning, span))
    if window:
        tail = probe - prompt - reasoning
        per_chunk = max(1, int(chunk_tokens // (window + tail)))
        for i in range(0, len(starts), per_chunk):
            chunk = starts[i : i + per_chunk]
            n = max(min(max(span, window), reasoning - a) for a in chunk) + tail
            work.flops += len(chunk) * forward_flops(shape, n, prompt + reasoning, keep)
            work.calls += 1
            work.forwards += 1
        return work
    i = 0
    while i < len(starts):
        suffix = probe - prompt - starts[i]
        copies = max(1, min(len(starts) - i, int(chunk_tokens // suffix)))
        # every copy of a chunk runs the whole suffix from the chunk's first position (one batch)
        work.flops += copies * forward_flops(shape, suffix, prompt + starts[i], keep)
        work.calls += 1
        work.forwards += 1
        i += copies
    return work


def oar_g_work(shape: Shape, prompt: float, probe: float, keep: int, chunk_tokens: int, clean: bool = True,
               group: int = 1, responses: float = 1.0, inline: bool = False) -> Work:
    """``responses`` responses in one scoring call, as ``oar.method.gradient_scorers._embedding_gradients``
    runs them: each distinct prompt once without gradient into a KV cache (shared by the ``group``
    responses of a GRPO group), then on top of that cache a no-grad clean forward (OAR-G; grad_norm has
    none), a forward with grad on the input embeddings and its backward to the inputs only
    (``torch.autograd.grad(..., inputs)``: no weight gradients), of ``reasoning | conclude | answer`` alone,
    in micro-batches of whole probes, ``chunk_tokens // suffix`` of them at most (a call's last micro-batch
    may be partly empty: 8 probes of 1,030 tokens in 8,192-token micro-batches take 2 of them). With
    ``inline`` (``grad_prompt: inline``) the same passes run each whole probe, prompt included, and no
    prompt runs apart."""
    if inline:
        per_batch = max(1, int(chunk_tokens // probe))
        fwd = forward_flops(shape, probe, keep=keep)
        backward = backward_flops(shape, probe, keep=keep, weights=False)
        work = Work(flops=responses * ((2 if clean else 1) * fwd + backward))
        batches = math.ceil(responses / per_batch - 1e-9)
        work.calls, work.forwards = (3 if clean else 2) * batches, (2 if clean else 1) * batches
        return work
    suffix = probe - prompt
    per_batch = max(1, int(chunk_tokens // suffix))
    fwd = forward_flops(shape, suffix, prompt, keep=keep)
    work = Work(flops=responses * (forward_flops(shape, prompt, keep=1) / group + (2 if clean else 1) * fwd
                                   + backward_flops(shape, suffix, prompt, keep=keep, weights=False)))
    batches = math.ceil(responses / per_batch - 1e-9)
    prompts = max(1.0, responses / group)
    prompt_passes = math.ceil(prompts / max(1, int(chunk_tokens // max(prompt, 1))) - 1e-9)
    work.calls = (3 if clean else 2) * batches + prompt_passes
    work.forwards = (2 if clean else 1) * batches + prompt_passes
    return work


def update_work(shape: Shape, prompt: float, completion: float, micro_batch: int, checkpointing: bool,
                extra_forwards: int) -> Work:
    """One completion's update: TRL's forward keeps the completion's logits (``logits_to_keep``)."""
    tokens, keep = prompt + completion, completion + 1
    fwd = forward_flops(shape, tokens, keep=keep)
    # checkpointing reruns every layer's forward in the backward (torch's non-reentrant checkpoint stops
    # once it has every saved tensor, so a layer's last matmul is not rerun: counted here, a few % high)
    recompute = forward_flops(shape, tokens, keep=0) if checkpointing else 0.0
    calls_per_batch = 2 + (1 if checkpointing else 0) + extra_forwards
    return Work(flops=fwd + backward_flops(shape, tokens, keep=keep) + recompute + extra_forwards * fwd,
                calls=calls_per_batch / micro_batch)


def scaled(work: Work, n: float) -> Work:
    """``work`` done ``n`` times."""
    return Work(work.flops * n, work.calls * n, [(f, b, c * n) for f, b, c in work.decode], work.forwards * n,
                work.fixed_s * n)


# scorers that run forwards only, over each scored response's prompt and reasoning -> forwards per response:
# the entropy control's, TRL's 80/20 mask (the same forward), attention from the answer span (one forward with
# eager attention, whose kernels no row measured) and PRIME's implicit reward (the policy's and the reward
# model's). Their fixed cost per call is the entropy control's, the one of them a calibration row measures.
FORWARD_SCORERS = {"entropy": 1, "top_entropy": 1, "answer_attention": 1, "prime": 2,
                   # the privileged self (with and without the answer) and the hidden-state distance
                   "rlsd": 2, "rlsd_signed": 2, "rlsd_weight": 2, "shear": 1,
                   "surprisal": 1}  # the trivial baseline's -log p: one forward
# scorers that run OAR-G's passes over each whole probe (prompt | response, no prompt cache), as
# grad_prompt: inline does: GRAIL's saliency (no clean forward) and the GRAIL codebase's OAR-G
INLINE_GRADIENT_SCORERS = {"grail": False, "grail_released": False, "oar_g_grail": True}  # -> runs a clean forward
# scorers that cost what another does (the same passes, their scores transformed after)
SAME_COST = {"oar_g_inverted": "oar_g"}


def calibrated_scorer(scorer: str, grad_prompt: str | None = None) -> str:
    """The name under which a scorer's fixed cost per model call is calibrated: grad_norm's is OAR-G's (the
    same passes less one), and OAR-G's over an inline prompt (``grad_prompt: inline``) is its own, its
    forwards running other attention kernels on a GPU (flash attention, no mask); a forward-only scorer's is
    the entropy control's."""
    scorer = SAME_COST.get(scorer, scorer)
    if scorer in FORWARD_SCORERS:
        return "entropy"
    if scorer in INLINE_GRADIENT_SCORERS:  # OAR-G's passes (calibrated as OAR-G's: no inline row need exist)
        return "oar_g"
    name = "oar_g" if scorer == "grad_norm" else scorer
    return f"{name} inline" if name == "oar_g" and grad_prompt == "inline" else name


def scoring_work(shape: Shape, method: str, oar: Mapping, prompt: float, reasoning: float, probe: float, keep: int,
                 scored: float, group: int, schedule: str = SCHEDULE) -> Work:
    """The work of one scoring call over ``scored`` responses."""
    method = SAME_COST.get(method, method)
    chunk = oar["chunk_tokens"]
    if method == "oar_p":
        span, window = (oar.get(name, getattr(OARSettings, name)) for name in ("span_tokens", "window_tokens"))
        return oar_p_work(shape, prompt, reasoning, probe, keep, chunk, span, window, responses=scored,
                          schedule=schedule)
    if method in ("oar_g", "grad_norm"):
        return oar_g_work(shape, prompt, probe, keep, grad_budget(oar), clean=method == "oar_g", group=group,
                          responses=scored, inline=oar.get("grad_prompt", OARSettings.grad_prompt) == "inline")
    if method in INLINE_GRADIENT_SCORERS:
        return oar_g_work(shape, prompt, probe, keep, grad_budget(oar), clean=INLINE_GRADIENT_SCORERS[method],
                          group=group, responses=scored, inline=True)
    if method in FORWARD_SCORERS:
        seq = prompt + reasoning
        per = FORWARD_SCORERS[method] / max(1, int(chunk // seq))
        return scaled(Work(FORWARD_SCORERS[method] * forward_flops(shape, seq, keep=reasoning + 1), per, forwards=per),
                      scored)
    if method == BASELINE or method in MODEL_FREE_SCORERS or method in ADVANTAGE_RULES:  # no model call
        return Work()
    raise PlanError(f"runs: method {method!r} has no cost model")
