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
  reasoning tokens and the conclusion: about R x (K + tail)). OAR-G a clean no-grad forward, a forward
  with grad on the input embeddings and its backward (input gradients only: about one forward's
  matmuls, two of its attention). grad_norm the same without the clean forward; entropy one no-grad
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

Each forward call also costs a fixed time per layer (kernel launches, Python): what dominates small
models and CPUs. Times are work over a sustained rate: peak x utilisation, both assumptions printed
above the table, or measured on a GPU by ``bench/gpu_check.py`` (its ``calibration.json``).

    python -m oar.experiment.cost_plan --config config/paper.yaml                 # H100, Markdown
    python -m oar.experiment.cost_plan --config config/paper.yaml --hardware a100
    python -m oar.experiment.cost_plan --config config/paper.yaml --calibration results/bench/gpu_check/calibration.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oar.experiment.memory_plan import CONCLUDE_AND_ANSWER_TOKENS, PlanError, load_config, model_config

GB = 1e9


# ------------------------------------------------------------------------------------ hardware


@dataclass(frozen=True)
class Hardware:
    """Peak figures (vendor data sheets, dense bf16) and the share of them assumed sustained."""

    name: str
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s of GPU memory
    memory_gb: float
    mfu: float = 0.4  # assumed: sustained share of peak FLOP/s in training matmuls
    bandwidth_util: float = 0.65  # assumed: sustained share of bandwidth in a decode step
    layer_overhead_s: float = 20e-6  # assumed: fixed time per layer per forward call (a dozen kernel launches)
    measured: str = ""  # where the sustained figures come from when calibrated

    @property
    def flops(self) -> float:
        return self.peak_flops * self.mfu

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth * self.bandwidth_util


HARDWARE = {
    "a100": Hardware("A100 80GB SXM", 312e12, 2.0e12, 80),
    "h100": Hardware("H100 SXM", 989e12, 3.35e12, 80),
    "h200": Hardware("H200", 989e12, 4.8e12, 141),
}


def hardware(name: str, **overrides) -> Hardware:
    if name not in HARDWARE:
        raise PlanError(f"--hardware: {name!r} is not one the plan knows ({', '.join(HARDWARE)})")
    return dataclasses.replace(HARDWARE[name], **{k: v for k, v in overrides.items() if v is not None})


# ------------------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Shape:
    """What a model's FLOPs and bytes depend on."""

    params: int  # unique parameters (tied embeddings once)
    layer_params: int  # every decoder layer's parameters (no embedding, no LM head, no final norm)
    layers: int
    hidden: int
    attn_width: int  # heads x head_dim (queries)
    vocab: int
    kv_bytes_per_token: int  # K and V of every layer, bf16


def shape_of(config) -> Shape:
    """From the model built on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Shape(params=sum(p.numel() for p in model.parameters()),
                 layer_params=sum(p.numel() for p in model.model.layers.parameters()),
                 layers=config.num_hidden_layers, hidden=config.hidden_size,
                 attn_width=config.num_attention_heads * head_dim, vocab=config.vocab_size,
                 kv_bytes_per_token=2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 2)


def forward_flops(shape: Shape, new: float, cached: float = 0.0, keep: float | None = None) -> float:
    """One sequence's forward of ``new`` tokens over ``cached`` ones, ``keep`` logits (None: all new)."""
    keep = new if keep is None else keep
    return (2 * shape.layer_params * new + 4 * shape.layers * new * (cached + new) * shape.attn_width
            + 2 * shape.hidden * shape.vocab * keep)


def backward_flops(shape: Shape, new: float, cached: float = 0.0, keep: float | None = None,
                   weights: bool = True) -> float:
    """The backward of :func:`forward_flops`: input gradients (1x the matmuls) and, with ``weights``,
    weight gradients (1x more); attention's two products have two gradient products each (2x)."""
    keep = new if keep is None else keep
    per = 2 if weights else 1
    return (per * (2 * shape.layer_params * new + 2 * shape.hidden * shape.vocab * keep)
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
    """Work of one phase: FLOPs, forward calls (a fixed overhead per layer each) and decode steps, each
    timed by the roofline: the larger of its FLOPs and its bytes over their rates."""

    flops: float = 0.0
    calls: float = 0.0  # forward (or backward) calls, each over every layer
    decode: list = dataclasses.field(default_factory=list)  # [(flops, bytes, count)] decode steps

    def seconds(self, hw: Hardware, layers: int) -> float:
        t = self.flops / hw.flops + self.calls * layers * hw.layer_overhead_s
        for flops, nbytes, count in self.decode:
            t += count * (max(flops / hw.flops, nbytes / hw.bytes_per_s) + layers * hw.layer_overhead_s)
        return t


def generation_work(shape: Shape, sequences: int, prompt: float, completion: int, concurrent: int) -> Work:
    """Prefill (compute) and ``completion`` decode steps of ``sequences`` sequences, ``concurrent`` at a time.
    Every decode step reads the bf16 weights once for all sequences in flight and each one's KV cache."""
    concurrent = max(1, min(sequences, concurrent))
    waves = math.ceil(sequences / concurrent)
    work = Work(flops=sequences * forward_flops(shape, prompt, keep=1), calls=waves)
    # decode step t (0-based) of a wave: every sequence attends prompt + t cached tokens; the mean over t
    # is exact for the linear terms, so one averaged entry per wave stands for its steps
    mean_context = prompt + (completion - 1) / 2
    step_flops = concurrent * forward_flops(shape, 1, mean_context, keep=1)
    step_bytes = 2 * shape.params + concurrent * mean_context * shape.kv_bytes_per_token
    work.decode.append((step_flops, step_bytes, waves * completion))
    return work


def reasoning_probe(prompt: float, completion: float) -> tuple[float, float]:
    """(reasoning tokens R, probe length): the probe is prompt | reasoning | conclusion and answer."""
    reasoning = max(1.0, completion)
    return reasoning, prompt + reasoning + CONCLUDE_AND_ANSWER_TOKENS


def oar_p_work(shape: Shape, prompt: float, reasoning: float, probe: float, keep: int, chunk_tokens: int,
               span: int = 1, window: int = 0) -> Work:
    """One response: the clean probe forward (its KV cache kept) and one suffix forward per substituted
    position j = 0, w, 2w, ... (span w), batched in chunks of at most ``chunk_tokens`` tokens as
    ``oar.method.importance._oar_p_chunks`` schedules them: a chunk of copies j0.. runs each copy from j0.

    With a window K > 0 (``oar.window_tokens``) each copy runs only the reasoning tokens
    [j, j + max(w, K)) and the tokens after the reasoning, over the cache of the whole prompt and
    reasoning, in chunks of ``chunk_tokens // (K + tail)`` copies padded to the chunk's longest
    (``oar.method.importance.window_substitution_scores``)."""
    reasoning, span = int(round(reasoning)), max(1, int(span))
    work = Work(flops=forward_flops(shape, probe, keep=keep), calls=1)
    starts = list(range(0, reasoning, span))
    if window:
        tail = probe - prompt - reasoning
        per_chunk = max(1, int(chunk_tokens // (window + tail)))
        for i in range(0, len(starts), per_chunk):
            chunk = starts[i : i + per_chunk]
            n = max(min(max(span, window), reasoning - a) for a in chunk) + tail
            work.flops += len(chunk) * forward_flops(shape, n, prompt + reasoning, keep)
            work.calls += 1
        return work
    i = 0
    while i < len(starts):
        suffix = probe - prompt - starts[i]
        copies = max(1, min(len(starts) - i, int(chunk_tokens // suffix)))
        # every copy of a chunk runs the whole suffix from the chunk's first position (one batch)
        work.flops += copies * forward_flops(shape, suffix, prompt + starts[i], keep)
        work.calls += 1
        i += copies
    return work


def oar_g_work(shape: Shape, prompt: float, probe: float, keep: int, chunk_tokens: int, clean: bool = True,
               group: int = 1) -> Work:
    """One response, as ``oar.method.importance._embedding_gradients`` runs it: its prompt once without
    gradient into a KV cache (shared by the ``group`` responses of a GRPO group), then on top of that cache
    a no-grad clean forward (OAR-G; grad_norm has none), a forward with grad on the input embeddings and
    its backward to the inputs only (``torch.autograd.grad(..., inputs)``: no weight gradients), of
    ``reasoning | conclude | answer`` alone, in micro-batches of ``chunk_tokens // suffix`` probes."""
    suffix = probe - prompt
    per_batch = max(1, int(chunk_tokens // suffix))
    fwd = forward_flops(shape, suffix, prompt, keep=keep)
    work = Work(flops=forward_flops(shape, prompt, keep=1) / group + (2 if clean else 1) * fwd
                + backward_flops(shape, suffix, prompt, keep=keep, weights=False))
    work.calls = (3 if clean else 2) / per_batch + 1 / (group * max(1, int(chunk_tokens // max(prompt, 1))))
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
    return Work(work.flops * n, work.calls * n, [(f, b, c * n) for f, b, c in work.decode])


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


SCORERS_WITHOUT_MODEL = ("grpo", "truth", "truth_graded", "truth_final", "position", "random")


def step_plan(shape: Shape, settings: Mapping, hw: Hardware, assume: Assumptions, processes: int = 1) -> StepPlan:
    """One step of a run (``settings`` as ``Registry.run_settings`` resolves them) on one process."""
    trainer, oar, method = settings["trainer"], settings["oar"], settings["method"]
    prompt = assume.prompt_tokens
    completion = trainer["max_completion_length"] * assume.completion_fill
    # TRL generates per_device_train_batch_size x steps_per_generation (= gradient_accumulation_steps) per
    # process for each optimizer step
    sequences = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
    if trainer.get("use_vllm"):
        kv_budget = (trainer["vllm_gpu_memory_utilization"] * hw.memory_gb - assume.vllm_overhead_gb) * GB \
            - 2 * shape.params
        context = prompt + trainer["max_completion_length"]
        concurrent = int(kv_budget // (context * shape.kv_bytes_per_token))
        if concurrent < 1:
            model = settings["run_id"].split("/", 1)[0]
            raise PlanError(f"models.{model}.trainer.vllm_gpu_memory_utilization (or training.trainer's): "
                            f"{trainer['vllm_gpu_memory_utilization']} of {hw.memory_gb:.0f} GB leaves no KV cache "
                            f"for one {context:.0f}-token sequence beside {2 * shape.params / GB:.1f} GB of weights")
    else:
        concurrent = sequences  # transformers' generate: the whole batch at once
    gen = generation_work(shape, sequences, prompt, int(round(completion)), concurrent)

    scored = sequences * (1.0 if oar.get("score_all") else assume.scored_share)
    reasoning, probe = reasoning_probe(prompt, completion)
    keep = 1 if oar.get("probe") == "lt_logits" else assume.answer_tokens + 1
    chunk = oar["chunk_tokens"]
    if method == "oar_p":
        score = _scale(oar_p_work(shape, prompt, reasoning, probe, keep, chunk, oar.get("span_tokens", 1),
                                   oar.get("window_tokens", 0)), scored)
    elif method in ("oar_g", "grad_norm"):
        score = _scale(oar_g_work(shape, prompt, probe, keep, chunk, clean=method == "oar_g",
                                        group=trainer["num_generations"]), scored)
    elif method == "entropy":
        seq = prompt + reasoning
        score = _scale(Work(forward_flops(shape, seq, keep=reasoning + 1), 1 / max(1, int(chunk // seq))), scored)
    elif method in SCORERS_WITHOUT_MODEL:
        score = Work()
    else:
        raise PlanError(f"runs: method {method!r} has no cost model")

    extra = int(bool(trainer.get("use_vllm")) and trainer.get("vllm_importance_sampling_correction", True))
    extra += int(float(trainer.get("beta", 0.0)) != 0.0)
    upd = _scale(update_work(shape, prompt, completion, trainer["per_device_train_batch_size"],
                             bool(trainer.get("gradient_checkpointing")), extra), sequences)
    return StepPlan(gen.seconds(hw, shape.layers), score.seconds(hw, shape.layers),
                    upd.seconds(hw, shape.layers), processes)


# ------------------------------------------------------------------------------- calibration


def calibrate(path: str | Path, base: Hardware) -> Hardware:
    """Sustained figures from ``bench/gpu_check.py``'s ``calibration.json``: the FLOP rate of the update
    (the plan's update FLOPs of the check's settings over its measured update time), the decode bandwidth
    (the plan's decode bytes over its generation time) and the fixed cost of a forward; peaks are
    replaced by these (utilisation 1)."""
    from transformers import Qwen2Config

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise PlanError(f"--calibration {path}: {error}") from error
    for key in ("shape", "prompt_tokens", "response_tokens", "batch", "methods"):
        if key not in data:
            raise PlanError(f"--calibration {path}: no key {key!r} (written by bench/gpu_check.py)")
    shape = shape_of(Qwen2Config(**data["shape"]))
    grpo = data["methods"].get("grpo") or next(iter(data["methods"].values()))
    completion = grpo.get("completion_length") or data["response_tokens"]
    prompt, batch = data["prompt_tokens"], data["batch"]
    upd = _scale(update_work(shape, prompt, completion, batch, bool(data.get("gradient_checkpointing")), 0), batch)
    flops = upd.flops / grpo["update_s"]
    gen = generation_work(shape, batch, prompt, int(round(completion)), batch)
    (_, step_bytes, count), = gen.decode
    # the decode steps take what the prefill (at the calibrated FLOP rate) leaves of the generation time
    decode_s = max(1e-9, grpo["generate_s"] - gen.flops / flops) / count
    device = data.get("device", "unknown device")
    return dataclasses.replace(base, name=f"{device} (calibrated)", peak_flops=flops, mfu=1.0,
                               bandwidth=step_bytes / decode_s, bandwidth_util=1.0,
                               memory_gb=data.get("memory_gb") or base.memory_gb, measured=f"{path} ({device})")


# ---------------------------------------------------------------------------------- the config


EVAL_PROBLEMS = {"gsm8k_test": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40}
TARGETS = {"main_table": "main", "ablation_gating": "gating", "ablation_grid": "grid", "ablation_probe": "probes",
           "controls table": "controls"}


def _processes(spec: Mapping) -> int:
    from oar.experiment.memory_plan import layout_of

    return layout_of(spec.get("launcher", "python"), "bfloat16", "auto", "models").gpus


def run_type(settings: Mapping) -> str:
    from oar.experiment.runs import USES_PROBE

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

    def check(self) -> None:
        """Stop at the first run that its job's time limits cannot hold."""
        if self.over_budget:
            raise PlanError(self.over_budget[0] + (f" ({len(self.over_budget) - 1} more runs over)"
                                                   if len(self.over_budget) > 1 else ""))


def plan_config(config: Mapping, hw: Hardware, assume: Assumptions, results_dir: str | None = None) -> Plan:
    from oar.data.datasets import DATASETS
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
        step = step_plan(shapes[model], settings, hw, assume, gpus)
        steps = settings["trainer"]["max_steps"]
        hours = step.step * steps / 3600
        res = registry.resource_set("train", model)
        allowed = res["runtime"] / 60 * (res.get("retries", 0) + 1)
        if hours > allowed:
            key = registry.resource_key("train", model, "runtime")
            over.append(f"{key}: run {run} is planned at {hours:,.1f} h ({steps} steps of {step.step:,.0f} s on "
                        f"{hw.name}), more than runtime {res['runtime']} min x (retries {res.get('retries', 0)} "
                        f"+ 1) = {allowed:,.1f} h allow; raise runtime or retries, or shorten the run"
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
                concurrent = max(1, int(kv_budget // (context * shapes[model].kv_bytes_per_token)))
                work = generation_work(shapes[model], problems * n, assume.prompt_tokens, ev["max_new_tokens"],
                                       concurrent)
                evals[key] = work.seconds(hw, shapes[model].layers) / 3600
    per_run: dict[str, float] = {}
    for (run, _bench), hours in evals.items():
        per_run[run] = per_run.get(run, 0.0) + hours
    return Plan(hw, assume, runs, per_run, dict(registry.groups), eval_groups, over)


def _eval_hours(plan: Plan, groups) -> float:
    ids = {r for g in groups for r in plan.eval_groups.get(g, [])}
    return sum(plan.evals.get(r, 0.0) for r in ids)


def table(plan: Plan) -> str:
    hw, a = plan.hw, plan.assume
    rates = (f"sustained {hw.flops / 1e12:.3g} TFLOP/s and {hw.bytes_per_s / 1e12:.3g} TB/s measured by "
             f"{hw.measured}" if hw.measured else
             f"{hw.peak_flops / 1e12:,.0f} TFLOP/s bf16 dense x MFU {hw.mfu} (assumed) = "
             f"{hw.flops / 1e12:,.0f} TFLOP/s; {hw.bandwidth / 1e12:.2f} TB/s x {hw.bandwidth_util} (assumed) = "
             f"{hw.bytes_per_s / 1e12:.2f} TB/s for decode")
    lines = [
        f"Cost plan (planned, not measured) on {hw.name}, {hw.memory_gb:.0f} GB: {rates}; "
        f"{hw.layer_overhead_s * 1e6:.0f} us per layer per forward call (assumed).",
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
    parser.add_argument("--calibration", help="calibration.json written by bench/gpu_check.py")
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
        plan = plan_config(config, hw, assume)
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
