"""GPU-hours of a config's training runs, its targets and the whole DAG: planned from shapes, not measured.

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

Each model call also costs a fixed time (kernel launches, Python): what dominates small models, CPUs,
and eager transformers forwards on a GPU. Work without host synchronisations overlaps its calls' fixed
cost with its compute on a GPU. Times are work over a sustained rate: peak x utilisation and an assumed
per-layer call cost, printed above the table, or the rates and fixed costs measured on a GPU by
``bench/gpu_check.py`` (its ``calibration.json``; :func:`calibrate`), each applied to what it measured.

    python -m oar.experiment.cost_plan --config config/paper.yaml                 # H100, Markdown
    python -m oar.experiment.cost_plan --config config/paper.yaml --hardware a100
    python -m oar.experiment.cost_plan --config config/paper.yaml --hardware h200 \\
        --calibration bench/calibration/h200-2026-11/calibration_1024.json \\
                      bench/calibration/h200-2026-11/calibration_256.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oar.experiment.memory_plan import (CONCLUDE_AND_ANSWER_TOKENS, PlanError, load_config, model_config, oar_p_copies,
                                       stacked_forwards)
from oar.experiment.shapes import Shape, shape_of
from oar.method.names import scorer_of
from oar.training.settings import OARSettings

GB = 1e9


# ------------------------------------------------------------------------------------ hardware


@dataclass(frozen=True)
class Hardware:
    """Peak figures (vendor data sheets, dense bf16) and the share of them assumed sustained, or the
    sustained figures and fixed costs measured by ``bench/gpu_check.py`` (:func:`calibrate`)."""

    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s of GPU memory
    memory_gb: float
    mfu: float = 0.4  # assumed: sustained share of peak FLOP/s in training matmuls
    bandwidth_util: float = 0.65  # assumed: sustained share of bandwidth in a decode step
    layer_overhead_s: float = 20e-6  # assumed: fixed time per layer per forward call (a dozen kernel launches)
    measured: str = ""  # where the sustained figures come from when calibrated
    # A GPU runs kernels while the host queues the next ones: work without host synchronisations takes the
    # larger of its compute and its calls' fixed cost, not their sum. A CPU does both itself (False).
    asynchronous: bool = False
    # Measured fixed costs (None: layers x layer_overhead_s per call, nothing per update)
    call_s: float | None = None  # one eager transformers forward call (the trainer's: prefill, scoring, update)
    update_fixed_s: float | None = None  # per update micro-batch beyond its FLOPs (backward, clipping, AdamW, launches)
    decode_backend: str = ""  # the generation backend the decode calibration was measured with
    decode_step_s: float | None = None  # that backend's fixed cost per decode step
    first_step_decode_s: float | None = None  # the same in a run's first step (allocator and kernel warm-up)
    # fixed cost per model call of each scorer, measured from score_s, and the schedule it was measured on
    scorer_call_s: tuple = ()  # ((method, schedule, seconds), ...)

    @property
    def flops(self) -> float:
        return self.peak_flops * self.mfu

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth * self.bandwidth_util

    def fixed_call_s(self, layers: int) -> float:
        """Fixed cost of one eager forward (or backward) call of a model of ``layers`` layers."""
        return self.call_s if self.call_s is not None else layers * self.layer_overhead_s

    def scorer_call(self, method: str, schedule: str) -> float | None:
        """The measured fixed cost per model call of ``method``'s scorer run on ``schedule``, if any."""
        for m, sched, seconds in self.scorer_call_s:
            if m == method and sched == schedule:
                return seconds
        return None


HARDWARE = {
    "a100": Hardware("A100 80GB SXM", 312e12, 2.0e12, 80, asynchronous=True),
    "h100": Hardware("H100 SXM", 989e12, 3.35e12, 80, asynchronous=True),
    "h200": Hardware("H200", 989e12, 4.8e12, 141, asynchronous=True),
}


def hardware(name: str, **overrides) -> Hardware:
    if name not in HARDWARE:
        raise PlanError(f"--hardware: {name!r} is not one the plan knows ({', '.join(HARDWARE)})")
    return dataclasses.replace(HARDWARE[name], **{k: v for k, v in overrides.items() if v is not None})


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
    overlapped: bool = False  # no host synchronisation between the calls: on an asynchronous device the
    # calls' fixed cost hides behind the compute (or the compute behind it)

    def seconds(self, hw: Hardware, layers: int, call_s: float | None = None,
                decode_step_s: float | None = None) -> float:
        """``call_s``: fixed cost per call (default ``hw.fixed_call_s``); ``decode_step_s``: per decode
        step (default the same)."""
        call = hw.fixed_call_s(layers) if call_s is None else call_s
        compute, fixed = self.flops / hw.flops, self.calls * call
        t = (max(compute, fixed) if self.overlapped and hw.asynchronous else compute + fixed) + self.fixed_s
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


def oar_p_work(shape: Shape, prompt: float, reasoning: float, probe: float, keep: int, chunk_tokens: int,
               span: int = 1, window: int = 0, responses: int = 1, schedule: str = SCHEDULE) -> Work:
    """OAR-P of ``responses`` alike responses in one scoring call: a clean forward of each probe (its KV
    cache kept) and one forward row per substituted span [a, a + w) (span w, 1 = exact) running the tokens
    from reasoning position a to the probe's end over the clean prefix of prompt + a tokens; with a
    window K (``oar.window_tokens``) a row runs min(max(w, K), R - a) reasoning tokens and the tail over
    the cache of the whole prompt and reasoning.

    ``stacked`` (``oar.method.substitution`` now): the copies of all responses sorted by length, longest
    first, packed greedily into forwards of rows x longest <= ``chunk_tokens`` (at least one row, each
    padded to the longest); the clean probes in micro-batches of rows x probe <= ``chunk_tokens``; no host
    synchronisation inside the loops (``overlapped``).
    ``per_response`` (before): one response at a time, its clean forward alone, then chunks of
    ``chunk_tokens // suffix`` copies from the chunk's first position (``chunk_tokens // (K + tail)``
    with a window), a host synchronisation every chunk."""
    if schedule not in SCHEDULES:
        raise PlanError(f"schedule {schedule!r} is not one of {SCHEDULES}")
    reasoning, span, responses = int(round(reasoning)), max(1, int(span)), max(1, int(round(responses)))
    if schedule == "per_response":
        return _scale(_oar_p_per_response(shape, prompt, reasoning, probe, keep, chunk_tokens, span, window),
                      responses)
    clean_rows = max(1, int(chunk_tokens // probe))
    clean_calls = math.ceil(responses / clean_rows)
    work = Work(flops=responses * forward_flops(shape, probe, keep=keep), calls=clean_calls, forwards=clean_calls,
                overlapped=True)
    copies = oar_p_copies(prompt, reasoning, probe, span, window)
    for longest, members in stacked_forwards(copies, responses, chunk_tokens):
        work.calls += 1
        work.forwards += 1
        work.flops += sum(rows * forward_flops(shape, longest, cached, keep) for cached, rows in members)
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
               group: int = 1) -> Work:
    """One response, as ``oar.method.gradient_scorers._embedding_gradients`` runs it: its prompt once without
    gradient into a KV cache (shared by the ``group`` responses of a GRPO group), then on top of that cache
    a no-grad clean forward (OAR-G; grad_norm has none), a forward with grad on the input embeddings and
    its backward to the inputs only (``torch.autograd.grad(..., inputs)``: no weight gradients), of
    ``reasoning | conclude | answer`` alone, in micro-batches of ``chunk_tokens // suffix`` probes."""
    suffix = probe - prompt
    per_batch = max(1, int(chunk_tokens // suffix))
    fwd = forward_flops(shape, suffix, prompt, keep=keep)
    work = Work(flops=forward_flops(shape, prompt, keep=1) / group + (2 if clean else 1) * fwd
                + backward_flops(shape, suffix, prompt, keep=keep, weights=False))
    prompt_passes = 1 / (group * max(1, int(chunk_tokens // max(prompt, 1))))
    work.calls = (3 if clean else 2) / per_batch + prompt_passes
    work.forwards = (2 if clean else 1) / per_batch + prompt_passes
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


def _scale(work: Work, n: float) -> Work:
    return Work(work.flops * n, work.calls * n, [(f, b, c * n) for f, b, c in work.decode], work.forwards * n,
                work.fixed_s * n, work.overlapped)


# --------------------------------------------------------------------------------------- plan


@dataclass
class StepPlan:
    """Seconds of one training step per phase, on one process (all processes run in parallel)."""

    generation: float
    scoring: float
    update: float
    processes: int  # GPUs a run holds

    @property
    def step(self) -> float:
        return self.generation + self.scoring + self.update


SCORERS_WITHOUT_MODEL = ("grpo", "truth", "truth_graded", "truth_final", "truth_early", "position", "random")


def step_plan(shape: Shape, settings: Mapping, hw: Hardware, assume: Assumptions, processes: int = 1,
              schedule: str = SCHEDULE, first_step: bool = False) -> StepPlan:
    """One step of a run (``settings`` as ``Registry.run_settings`` resolves them) on one process, its
    scorer run on ``schedule``; ``first_step``: a run's first step (generation at the first step's
    measured decode cost, where calibrated)."""
    trainer, oar, method = settings["trainer"], settings["oar"], settings["method"]
    prompt = assume.prompt_tokens
    completion = trainer["max_completion_length"] * assume.completion_fill
    # TRL generates per_device_train_batch_size x steps_per_generation (= gradient_accumulation_steps) per
    # process for each optimizer step, and scores them in one call
    sequences = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
    backend = "vllm" if trainer.get("use_vllm") else "transformers"
    if backend == "vllm":
        kv_budget = (trainer["vllm_gpu_memory_utilization"] * hw.memory_gb - assume.vllm_overhead_gb) * GB \
            - 2 * shape.params
        context = prompt + trainer["max_completion_length"]
        concurrent = int(kv_budget // (context * shape.kv_bytes_per_token_bf16))
        if concurrent < 1:
            model = settings["run_id"].split("/", 1)[0]
            raise PlanError(f"models.{model}.trainer.vllm_gpu_memory_utilization (or training.trainer's): "
                            f"{trainer['vllm_gpu_memory_utilization']} of {hw.memory_gb:.0f} GB leaves no KV cache "
                            f"for one {context:.0f}-token sequence beside {2 * shape.params / GB:.1f} GB of weights")
    else:
        concurrent = sequences  # transformers' generate: the whole batch at once
    gen = generation_work(shape, sequences, prompt, int(round(completion)), concurrent)
    # A decode calibration holds for the backend that was measured only: vLLM's engine (CUDA graphs) is
    # not timed by transformers' eager generate, nor the other way round.
    measured_decode = hw.decode_step_s if hw.decode_backend == backend else None
    if first_step and hw.decode_backend == backend and hw.first_step_decode_s is not None:
        measured_decode = hw.first_step_decode_s
    if backend == "vllm":  # the engine's calls: the assumed per-layer cost, never the eager forward's
        generation = gen.seconds(hw, shape.layers, call_s=shape.layers * hw.layer_overhead_s,
                                 decode_step_s=measured_decode)
    else:
        generation = gen.seconds(hw, shape.layers, decode_step_s=measured_decode)

    scored = sequences * (1.0 if oar.get("score_all") else assume.scored_share)
    reasoning, probe = reasoning_probe(prompt, completion)
    keep = 1 if oar.get("probe") == "lt_logits" else assume.answer_tokens + 1
    scorer = scorer_of(method) or method  # a rescue costs its scorer's scoring; GRPO none
    score = scoring_work(shape, scorer, oar, prompt, reasoning, probe, keep, scored, trainer["num_generations"],
                         schedule)
    calibrated = "oar_g" if scorer == "grad_norm" else scorer
    scoring = score.seconds(hw, shape.layers, call_s=hw.scorer_call(calibrated, schedule))

    extra = int(bool(trainer.get("use_vllm")) and trainer.get("vllm_importance_sampling_correction", True))
    extra += int(float(trainer.get("beta", 0.0)) != 0.0)
    micro = trainer["per_device_train_batch_size"]
    upd = _scale(update_work(shape, prompt, completion, micro, bool(trainer.get("gradient_checkpointing")), extra),
                 sequences)
    if hw.update_fixed_s is not None:  # measured: a fixed time per micro-batch stands for its calls' cost
        upd.calls, upd.fixed_s = 0.0, hw.update_fixed_s * sequences / micro
    return StepPlan(generation, scoring, upd.seconds(hw, shape.layers), processes)


def scoring_work(shape: Shape, method: str, oar: Mapping, prompt: float, reasoning: float, probe: float, keep: int,
                 scored: float, group: int, schedule: str = SCHEDULE) -> Work:
    """The work of one scoring call over ``scored`` responses."""
    chunk = oar["chunk_tokens"]
    if method == "oar_p":
        span, window = (oar.get(name, getattr(OARSettings, name)) for name in ("span_tokens", "window_tokens"))
        return oar_p_work(shape, prompt, reasoning, probe, keep, chunk, span, window, responses=scored, schedule=schedule)
    if method in ("oar_g", "grad_norm"):
        work = _scale(oar_g_work(shape, prompt, probe, keep, chunk, clean=method == "oar_g", group=group), scored)
        work.overlapped = schedule == "stacked"  # noise drawn on the device, results moved once per call
        return work
    if method == "entropy":
        seq = prompt + reasoning
        per = 1 / max(1, int(chunk // seq))
        return _scale(Work(forward_flops(shape, seq, keep=reasoning + 1), per, forwards=per), scored)
    if method in SCORERS_WITHOUT_MODEL:
        return Work()
    raise PlanError(f"runs: method {method!r} has no cost model")


# ------------------------------------------------------------------------------- calibration

CALIBRATION_ROW_FIELDS = ("method", "prompt_tokens", "completion_length", "batch", "generate_s", "score_s",
                          "update_s", "step_s")
CALIBRATED_METHODS = ("grpo", "oar_p", "oar_g", "grad_norm", "entropy")


def calibration_rows(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, rows) of a ``calibration.json``: the current format (``rows``: one per method and length)
    or the earlier one (``methods`` at one ``response_tokens``), normalised to the current one. Stops with
    a :class:`PlanError` naming the field that is missing or of the wrong type."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise PlanError(f"--calibration {path}: {error}") from error
    where = f"--calibration {path}"
    if not isinstance(data, dict):
        raise PlanError(f"{where}: not a JSON object (written by bench/gpu_check.py)")
    for key in ("shape", "batch") + (() if "rows" in data else ("prompt_tokens", "response_tokens", "methods")):
        if key not in data:
            raise PlanError(f"{where}: no key {key!r} (written by bench/gpu_check.py)")
    if not isinstance(data["shape"], dict):
        raise PlanError(f"{where}: field 'shape' is not a mapping of a Qwen2 config's sizes")
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size"):
        if not isinstance(data["shape"].get(key), int):
            raise PlanError(f"{where}: field 'shape.{key}' is missing or not an integer")
    if "rows" in data:
        if not isinstance(data["rows"], list):
            raise PlanError(f"{where}: field 'rows' is not a list")
        rows = [dict(r) if isinstance(r, dict) else r for r in data["rows"]]
    else:  # the earlier format: one length, per method; its scorers ran on the per-response schedule
        if not isinstance(data["methods"], dict):
            raise PlanError(f"{where}: field 'methods' is not a mapping of method to times")
        rows = []
        for method, r in data["methods"].items():
            if not isinstance(r, dict):
                raise PlanError(f"{where}: field 'methods.{method}' is not a mapping")
            rows.append({"method": method, "prompt_tokens": data["prompt_tokens"],
                         "completion_length": r.get("completion_length") or data["response_tokens"],
                         "batch": data["batch"], "num_generations": data.get("num_generations", data["batch"]),
                         "chunk_tokens": data.get("chunk_tokens", OARSettings.chunk_tokens), "span_tokens": 1,
                         "window_tokens": data.get("oar_p_window_tokens", OARSettings.window_tokens), "probe": "as_mean",
                         "scorer_schedule": "per_response", "generation_backend": "transformers",
                         "gradient_checkpointing": data.get("gradient_checkpointing", False),
                         "frac_scored": r.get("frac_scored", 0.0 if method == "grpo" else 1.0),
                         **{k: r.get(k) for k in ("generate_s", "score_s", "update_s", "step_s")}})
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise PlanError(f"{where}: field 'rows[{n}]' is not a mapping")
        row.setdefault("batch", data["batch"])
        if not isinstance(row.get("method"), str):
            raise PlanError(f"{where}: field 'rows[{n}].method' is missing or not a string")
        if row["method"] not in CALIBRATED_METHODS:
            raise PlanError(f"{where}: field 'rows[{n}].method': {row['method']!r} is not one of {CALIBRATED_METHODS}")
        for key in CALIBRATION_ROW_FIELDS[1:]:
            value = row.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise PlanError(f"{where}: field {key!r} of the {row['method']} row (rows[{n}].{key}) is missing "
                                "or not a number >= 0")
        schedule = row.setdefault("scorer_schedule", "per_response")
        if schedule not in SCHEDULES:
            raise PlanError(f"{where}: field 'rows[{n}].scorer_schedule': {schedule!r} is not one of {SCHEDULES}")
    if not any(r["method"] == "grpo" for r in rows):
        raise PlanError(f"{where}: no GRPO row (field 'method' = 'grpo' in no row): the update, generation and "
                        "per-call costs are fitted from GRPO's step")
    return data, rows


def calibrate(paths, base: Hardware) -> Hardware:
    """Sustained rates and fixed costs from one or more ``calibration.json`` files of
    ``bench/gpu_check.py`` (one model shape; the rows of every file together):

    - the update: FLOP rate R and a fixed time U per micro-batch, t = FLOPs / R + U, from GRPO's update
      at two or more lengths (least squares; one length: U = 0, R = FLOPs / t);
    - generation: the fixed cost of a decode step of the backend that generated (``generation_backend``):
      what its time leaves beside the prefill and the decode's roofline; for transformers' eager
      ``generate`` this is also taken as the fixed cost of one forward call of the trainer's model
      (``call_s``); the first step's, where recorded (``first_generate_s``);
    - each scorer: its fixed cost per model call on the schedule it ran on (``scorer_schedule``): what
      its ``score_s`` leaves beside its FLOPs at R, over its model calls (the plan's count, scaled to the
      counted forwards where the file records ``score_forwards``).

    The FLOP rate replaces the peak (utilisation 1); the decode bandwidth stays the base's assumption (a
    decode of a few sequences is bound by fixed costs and says nothing of bandwidth)."""
    from transformers import Qwen2Config

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise PlanError("--calibration: no file given")
    rows, header, shape_spec = [], None, None
    for path in paths:
        data, file_rows = calibration_rows(path)
        spec = {k: v for k, v in sorted(data["shape"].items())}
        if shape_spec is not None and spec != shape_spec:
            raise PlanError(f"--calibration {path}: field 'shape' differs from {paths[0]}'s: the files of one "
                            "calibration must time one model shape")
        shape_spec, header = spec, header or data
        rows += file_rows
    shape = shape_of(Qwen2Config(**shape_spec))
    grpo = [r for r in rows if r["method"] == "grpo"]
    # a GPU queues kernels ahead of the host; a CPU runs them itself (the check records which it ran on)
    base = dataclasses.replace(base, asynchronous=header.get("device", "CPU") != "CPU")

    # the update: t = F / R + U over GRPO's lengths
    points = sorted({(_scale(update_work(shape, r["prompt_tokens"], r["completion_length"], r["batch"],
                                         bool(r.get("gradient_checkpointing")), 0), r["batch"]).flops, r["update_s"])
                     for r in grpo if r["update_s"] > 0})
    if not points:
        raise PlanError(f"--calibration {paths[0]}: field 'update_s' of every GRPO row is 0")
    rate, fixed = points[-1][0] / points[-1][1], 0.0
    if len({f for f, _ in points}) >= 2:
        mf = sum(f for f, _ in points) / len(points)
        mt = sum(t for _, t in points) / len(points)
        slope = sum((f - mf) * (t - mt) for f, t in points) / sum((f - mf) ** 2 for f, _ in points)
        if slope > 0 and mt - slope * mf >= 0:
            rate, fixed = 1 / slope, mt - slope * mf
    # the check runs one micro-batch per update: its fixed time is taken per micro-batch (the larger reading)
    measured = dataclasses.replace(base, peak_flops=rate, mfu=1.0, update_fixed_s=fixed)

    # generation: the decode step's fixed cost, for the one backend that generated
    backends = {r.get("generation_backend", "transformers") for r in grpo}
    if len(backends) > 1:
        raise PlanError(f"--calibration: field 'generation_backend' differs between the GRPO rows "
                        f"({sorted(backends)}); calibrate with one backend's rows")
    backend = backends.pop()

    def decode_fixed(r, key):
        gen = generation_work(shape, r["batch"], r["prompt_tokens"], int(round(r["completion_length"])), r["batch"])
        (step_flops, step_bytes, count), = gen.decode
        roof = max(step_flops / measured.flops, step_bytes / measured.bytes_per_s)
        # the prefill is one more call, its fixed cost taken to be a decode step's
        return max(0.0, (r[key] - gen.flops / measured.flops - count * roof) / (count + 1))

    # a length generated for the first time in its process is not a steady generation
    steady = [r for r in grpo if not r.get("generate_first_at_length")] or grpo
    decode_s = statistics.median(decode_fixed(r, "generate_s") for r in steady)
    firsts = [decode_fixed(r, "first_generate_s") for r in rows if r.get("first_generate_s")]
    measured = dataclasses.replace(measured, decode_backend=backend, decode_step_s=decode_s,
                                   first_step_decode_s=statistics.median(firsts) if firsts else None,
                                   call_s=decode_s if backend == "transformers" else None)

    # scorers: the fixed cost per model call, per method and schedule
    per_call: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["method"] == "grpo" or not r.get("frac_scored"):
            continue
        work = _check_scoring_work(shape, r)
        calls = work.calls
        if r.get("score_forwards") and work.forwards:
            calls *= r["score_forwards"] / work.forwards
        compute = work.flops / measured.flops
        left = r["score_s"] if work.overlapped and base.asynchronous else r["score_s"] - compute
        key = ("oar_g" if r["method"] == "grad_norm" else r["method"], r["scorer_schedule"])
        per_call.setdefault(key, []).append(max(0.0, left) / calls if calls else 0.0)
    device = header.get("device", "unknown device")
    return dataclasses.replace(measured, name=f"{device} (calibrated)",
                               memory_gb=header.get("memory_gb") or base.memory_gb,
                               measured=f"{', '.join(str(p) for p in paths)} ({device})",
                               scorer_call_s=tuple((m, s, statistics.median(v))
                                                   for (m, s), v in sorted(per_call.items())))


def _check_scoring_work(shape: Shape, row: Mapping, schedule: str | None = None) -> Work:
    """The scoring work of one row of a calibration file (the check's settings), on its own schedule or
    ``schedule``."""
    reasoning, probe = reasoning_probe(row["prompt_tokens"], row["completion_length"])
    keep = 1 if row.get("probe", OARSettings.probe) == "lt_logits" else Assumptions.answer_tokens + 1
    oar = {name: row.get(name, getattr(OARSettings, name)) for name in ("chunk_tokens", "span_tokens", "window_tokens")}
    return scoring_work(shape, row["method"], oar, row["prompt_tokens"], reasoning, probe, keep,
                        row["batch"] * row.get("frac_scored", 1.0), row.get("num_generations", row["batch"]),
                        schedule or row.get("scorer_schedule", "per_response"))


def check_settings(row: Mapping, run_id: str = "check") -> dict:
    """``Registry.run_settings``-like settings of one calibration row (the check's own), for
    :func:`step_plan` with ``Assumptions(prompt_tokens=row's, completion_fill=1, ...)``."""
    return {"run_id": run_id, "method": row["method"],
            "oar": {**{name: row.get(name, getattr(OARSettings, name))
                       for name in ("chunk_tokens", "span_tokens", "window_tokens", "probe")}, "score_all": True},
            "trainer": {"max_completion_length": row["completion_length"], "per_device_train_batch_size": row["batch"],
                        "gradient_accumulation_steps": 1, "num_generations": row.get("num_generations", row["batch"]),
                        "gradient_checkpointing": row.get("gradient_checkpointing", False), "use_vllm":
                        row.get("generation_backend", "transformers") == "vllm", "beta": 0.0}}


# ---------------------------------------------------------------------------------- the config


EVAL_PROBLEMS = {"gsm8k_test": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40}
TARGETS = {"main_table": "main", "ablation_gating": "gating", "ablation_grid": "grid", "ablation_probe": "probes",
           "controls table": "controls"}


def _processes(spec: Mapping) -> int:
    from oar.experiment.memory_plan import layout_of

    return layout_of(spec.get("launcher", "python"), "bfloat16", "auto", "models").gpus


def run_type(settings: Mapping) -> str:
    from oar.method.names import USES_PROBE

    model = settings["run_id"].split("/", 1)[0]
    probe = f" ({settings['oar']['probe']})" if settings["method"] in USES_PROBE else ""
    return f"{model} {settings['method']}{probe}"


@dataclass
class Plan:
    hw: Hardware
    assume: Assumptions
    runs: dict  # run id -> (run type, GPU-hours, StepPlan, steps)
    evals: dict  # run id -> GPU-hours of its evaluations on every benchmark it is evaluated on
    groups: dict  # group -> run ids
    eval_groups: dict  # group -> evaluated run ids (the base models included)
    over_budget: list  # one message per run planned longer than its SLURM runtime x (retries + 1), naming the key
    schedule: str = SCHEDULE

    def check(self) -> None:
        """Stop at the first run that its job's time limits cannot hold."""
        if self.over_budget:
            raise PlanError(self.over_budget[0] + (f" ({len(self.over_budget) - 1} more runs over)"
                                                   if len(self.over_budget) > 1 else ""))


def plan_config(config: Mapping, hw: Hardware, assume: Assumptions, results_dir: str | None = None,
                schedule: str = SCHEDULE) -> Plan:
    from oar.data.catalogue import DATASETS
    from oar.experiment.memory_plan import _trainer_keys
    from oar.experiment.runs import Registry, model_of

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    shapes = {name: shape_of(model_config(spec["source"], results_dir or registry.model_dir(name)))
              for name, spec in config["models"].items()
              if any(model_of(r) == name for r in registry.runs)}
    runs, over = {}, []
    for run, settings in registry.runs.items():
        model = model_of(run)
        gpus = _processes(config["models"][model])
        step = step_plan(shapes[model], settings, hw, assume, gpus, schedule)
        steps = settings["trainer"]["max_steps"]
        hours = step.step * steps / 3600
        res = registry.resource_set("train", model)
        allowed = res["runtime"] / 60 * (res.get("retries", 0) + 1)
        if hours > allowed:
            key = registry.resource_key("train", model, "runtime")
            retries_key = registry.resource_key("train", model, "retries").replace("resources.default.",
                                                                                   "resources.train.")
            attempts = math.ceil(hours / (res["runtime"] / 60))
            over.append(f"{key}: run {run} is planned at {hours:,.1f} h ({steps} steps of {step.step:,.0f} s on "
                        f"{hw.name}), more than runtime {res['runtime']} min x (retries {res.get('retries', 0)} "
                        f"+ 1) = {allowed:,.1f} h allow; set {retries_key} to {attempts - 1} or more (or raise "
                        f"{key}), or shorten the run (training.trainer.max_steps)"
                        + (" (oar.span_tokens and oar.window_tokens make OAR-P cheaper, less faithful)"
                           if settings["method"] == "oar_p" else ""))
        runs[run] = (run_type(settings), hours * gpus, step, steps)

    eval_groups = {g: registry.eval_runs(g) for g in TARGETS.values() if registry.groups[g]}
    evals: dict[str, float] = {}
    for group, ids in eval_groups.items():
        for run in ids:
            model = model_of(run)
            if model not in shapes:
                continue
            for bench in registry.group_benchmarks(group):
                key = (run, bench)
                if key in evals:
                    continue
                ev = registry.eval_settings(model, bench)
                spec = DATASETS.get(bench)
                n = ev.get("n") or (spec.eval.n if spec is not None and spec.eval else 1)
                problems = ev.get("limit") or EVAL_PROBLEMS.get(bench)
                if problems is None:
                    continue  # a generated or local benchmark of unknown size: left out (cheap: the testbed's)
                util = ev.get("gpu_memory_utilization") or 0.5  # oar.evaluation.generation's default
                kv_budget = (util * hw.memory_gb - assume.vllm_overhead_gb) * GB - 2 * shapes[model].params
                context = assume.prompt_tokens + ev["max_new_tokens"]
                concurrent = max(1, int(kv_budget // (context * shapes[model].kv_bytes_per_token_bf16)))
                work = generation_work(shapes[model], problems * n, assume.prompt_tokens, ev["max_new_tokens"],
                                       concurrent)
                layers = shapes[model].layers  # vLLM's engine: a measured decode of another backend is not its
                decode = hw.decode_step_s if hw.decode_backend == "vllm" else None
                evals[key] = work.seconds(hw, layers, call_s=layers * hw.layer_overhead_s,
                                          decode_step_s=decode) / 3600
    per_run: dict[str, float] = {}
    for (run, _bench), hours in evals.items():
        per_run[run] = per_run.get(run, 0.0) + hours
    return Plan(hw, assume, runs, per_run, dict(registry.groups), eval_groups, over, schedule)


def _eval_hours(plan: Plan, groups) -> float:
    ids = {r for g in groups for r in plan.eval_groups.get(g, [])}
    return sum(plan.evals.get(r, 0.0) for r in ids)


def table(plan: Plan) -> str:
    hw, a = plan.hw, plan.assume
    if hw.measured:
        rates = (f"measured by {hw.measured}: sustained {hw.flops / 1e12:.3g} TFLOP/s (the update's, fitted with "
                 f"{(hw.update_fixed_s or 0) * 1e3:.0f} ms fixed per update micro-batch), an eager forward call "
                 + (f"{hw.call_s * 1e3:.1f} ms fixed" if hw.call_s is not None else
                    f"{hw.layer_overhead_s * 1e6:.0f} us per layer (assumed)")
                 + f", a {hw.decode_backend} decode step {hw.decode_step_s * 1e3:.1f} ms fixed (applied to "
                 f"{hw.decode_backend} generation only); "
                 + "".join(f"{m} {sched} scoring {sec * 1e3:.1f} ms a model call; "
                           for m, sched, sec in hw.scorer_call_s)
                 + f"decode {hw.bandwidth / 1e12:.2f} TB/s x {hw.bandwidth_util} (assumed) = "
                 f"{hw.bytes_per_s / 1e12:.2f} TB/s; vLLM's calls {hw.layer_overhead_s * 1e6:.0f} us per layer "
                 "(assumed)")
    else:
        rates = (f"{hw.peak_flops / 1e12:,.0f} TFLOP/s bf16 dense x MFU {hw.mfu} (assumed) = "
                 f"{hw.flops / 1e12:,.0f} TFLOP/s; {hw.bandwidth / 1e12:.2f} TB/s x {hw.bandwidth_util} (assumed) = "
                 f"{hw.bytes_per_s / 1e12:.2f} TB/s for decode; {hw.layer_overhead_s * 1e6:.0f} us per layer per "
                 "forward call (assumed)")
    lines = [
        f"Cost plan (planned, not measured) on {hw.name}, {hw.memory_gb:.0f} GB: {rates}. Scorers on the "
        f"{plan.schedule} schedule" + (" (oar.method.substitution's)" if plan.schedule == SCHEDULE else
                                        " (the scorers' earlier one)") + ".",
        f"Assumed: mean prompt {a.prompt_tokens} tokens; completions at {a.completion_fill:.0%} of "
        f"max_completion_length; {a.scored_share:.0%} of rows have advantage != 0 and are scored; "
        f"{a.answer_tokens}-token answers. Evaluation: vLLM decode of problems x samples x max_new_tokens. "
        "Not included: model and data preparation, the held-out analysis (oracle, scoring), restarts.",
        "",
        "| run type | runs | GPUs | steps | generate s | score s | update s | step s | GPU-h per run | GPU-h |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    kinds: dict[str, list] = {}
    for run, (kind, hours, step, steps) in plan.runs.items():
        kinds.setdefault(kind, []).append((hours, step, steps))
    for kind, items in kinds.items():
        hours, step, steps = items[0]
        lines.append(f"| {kind} | {len(items)} | {step.processes} | {steps} | {step.generation:,.0f} | "
                     f"{step.scoring:,.0f} | {step.update:,.0f} | {step.step:,.0f} | {hours:,.1f} | "
                     f"{sum(h for h, _, _ in items):,.0f} |")
    lines += ["", "| target | training runs | training GPU-h | evaluation GPU-h | GPU-h |", "|---|---|---|---|---|"]
    for target, group in TARGETS.items():
        if not plan.groups.get(group):
            continue
        train = sum(plan.runs[r][1] for r in plan.groups[group])
        ev = _eval_hours(plan, [group])
        lines.append(f"| {target} | {len(plan.groups[group])} | {train:,.0f} | {ev:,.0f} | {train + ev:,.0f} |")
    train = sum(v[1] for v in plan.runs.values())
    ev = _eval_hours(plan, plan.eval_groups)
    lines.append(f"| **all (total)** | {len(plan.runs)} | {train:,.0f} | {ev:,.0f} | **{train + ev:,.0f}** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/paper.yaml")
    parser.add_argument("--hardware", default="h100", help=f"one of {', '.join(HARDWARE)}")
    parser.add_argument("--mfu", type=float, help="sustained share of peak FLOP/s (default 0.4, assumed)")
    parser.add_argument("--bandwidth-util", type=float, help="sustained share of bandwidth in decode (default 0.65)")
    parser.add_argument("--calibration", nargs="+", metavar="JSON",
                        help="calibration.json file(s) written by bench/gpu_check.py (one model shape; two lengths "
                             "fit the update's fixed cost), e.g. bench/calibration/h200-2026-11/*.json")
    parser.add_argument("--schedule", choices=SCHEDULES, default=SCHEDULE,
                        help="the scorers' schedule: stacked (the code's) or per_response (the earlier code's)")
    parser.add_argument("--prompt-tokens", type=int, default=Assumptions.prompt_tokens)
    parser.add_argument("--completion-fill", type=float, default=Assumptions.completion_fill)
    parser.add_argument("--scored-share", type=float, default=Assumptions.scored_share,
                        help="share of rows with advantage != 0 (scored)")
    parser.add_argument("--span-tokens", type=int,
                        help="plan OAR-P over spans of this many tokens (training.oar.span_tokens) instead of "
                             "the config's, to see what the cheaper, less faithful variant would cost")
    parser.add_argument("--window-tokens", type=int,
                        help="plan OAR-P with a local window of this many tokens (training.oar.window_tokens; "
                             "0: exact) instead of the config's")
    args = parser.parse_args(argv)
    try:
        for flag, value in (("--scored-share", args.scored_share), ("--completion-fill", args.completion_fill)):
            if not 0 < value <= 1:
                raise PlanError(f"{flag}: {value} is not in (0, 1]")
        assume = Assumptions(args.prompt_tokens, args.completion_fill, args.scored_share)
        hw = hardware(args.hardware, mfu=args.mfu, bandwidth_util=args.bandwidth_util)
        if args.calibration:
            hw = calibrate(args.calibration, hw)
        config = load_config(args.config)
        if args.span_tokens is not None:
            if args.span_tokens < 1:
                raise PlanError(f"--span-tokens: {args.span_tokens} is not a positive number of tokens")
            config["training"]["oar"]["span_tokens"] = args.span_tokens
        if args.window_tokens is not None:
            if args.window_tokens < 0:
                raise PlanError(f"--window-tokens: {args.window_tokens} is not a number of tokens >= 0")
            config["training"]["oar"]["window_tokens"] = args.window_tokens
        plan = plan_config(config, hw, assume, schedule=args.schedule)
    except PlanError as error:
        print(f"cost plan: {error}", file=sys.stderr)
        return 2
    variant = []
    if args.span_tokens is not None:
        variant.append(f"spans of {args.span_tokens} tokens")
    if args.window_tokens:
        variant.append(f"a window of {args.window_tokens} tokens")
    print(f"Cost plan of {args.config}" + (f" with OAR-P over {' and '.join(variant)}" if variant else "") + "\n")
    print(table(plan))
    try:
        plan.check()
    except PlanError as error:
        print(f"cost plan: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
