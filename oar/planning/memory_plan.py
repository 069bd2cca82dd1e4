"""Per-GPU memory plan of a config's training runs: each model, its process layout and each phase.

What a GPU holds at the peak of each phase of one training step, per process (one process per GPU):

- **engine**: the colocated vLLM engine (TRL's ``vllm_mode: colocate``) reserves
  ``vllm_gpu_memory_utilization`` of the GPU for the whole run. Inside that share it holds the bf16
  weights (tensor-parallel size 1: every process its own full copy), a profiling forward of
  ``max_num_batched_tokens`` (4,096, set by TRL) and the sampler's logits of ``max_num_seqs``
  sequences; the rest is KV cache, which must hold at least one ``vllm_max_model_length`` sequence or
  vLLM refuses to start. The trainer's resident state sits beside it.
- **scoring** (OAR-P, OAR-G): the trainer's resident state (weights, AdamW state; gradients are freed by
  ``zero_grad``), under FSDP the full unsharded compute-dtype weights (scoring gathers them once per
  call on every rank), and the scorer's activations. Scoring runs inside the training forward's autocast
  (accelerate wraps the model's forward): with bf16 mixed precision its activations and KV caches are
  bf16 even over float32 weights. OAR-P keeps the clean probe's KV cache of every response of the
  scoring call (its copies from all responses packed into forwards of up to ``chunk_tokens`` tokens,
  several copies of one response to a row), and the largest forward's cache: each row holds its
  response's prefix for every layer (transformers' cache concatenates per row), so a forward's rows x
  prefix positions are bounded by ``oar.method.copy_packing.CACHED_PER_CHUNK_TOKEN`` x ``chunk_tokens``.
  OAR-G runs a forward with grad on the input embeddings (eval mode: no gradient checkpointing) of a
  micro-batch of probes (``grad_chunk_tokens``, else ``chunk_tokens``; at least one probe) and its backward;
  over float32 weights autocast's bf16 copies of the weights are held for that backward.
- **update**: weights, gradients, AdamW state (sharded over the GPUs under FSDP full shard), the
  compute copies (autocast's bf16 weight cache on one GPU; under FSDP two gathered layers and the
  unsharded LM head, weights and gradients), and the activations of one micro-batch of
  ``per_device_train_batch_size`` sequences, with gradient checkpointing as configured.

Sizes come from the model's shapes: parameter counts from the model built on the meta device, KV
cache from the attention shapes, and per-token activation bytes *measured* on CPU on small models
with the target's layer widths (1 and 2 layers, two small vocabularies, two token counts): the peak of
live activation memory (torch's ``MemTracker``) and the tensors saved for backward
(``saved_tensors_hooks``), scaled per token, per layer and per vocabulary entry. Accelerate's
``fsdp2_prepare_model`` upcasts trainable parameters to float32 whenever mixed precision is on, so
under FSDP the master weights are float32 whatever ``model_dtype`` says.

    python -m oar.planning.memory_plan --config config/paper.yaml     # Markdown table, one row per phase
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from oar.experiment.config_schema import load_config as load_workflow_config, trainer_keys
from oar.method.copy_packing import CACHED_PER_CHUNK_TOKEN, PackedForward, pack_copies
from oar.planning.shapes import HUB_SHAPES, QWEN_SHAPES, Shape, shape_of
from oar.training.settings import OARSettings, grad_budget

GB = 1e9
GPU_GB = 80.0  # the budget: an 80 GB GPU (H100/A100 80GB report ~85 GB total; 80 keeps a margin)
RESERVE_GB = 2.0  # assumed, not measured here: CUDA context, NCCL buffers, allocator fragmentation
VLLM_MAX_NUM_BATCHED_TOKENS = 4096  # trl/generation/vllm_generation.py passes this to vllm.LLM
CONCLUDE_AND_ANSWER_TOKENS = 24  # probe = prompt | reasoning | "Therefore, the final answer is \boxed{" | answer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class PlanError(ValueError):
    """A config the plan cannot read; the message names the key."""


# ------------------------------------------------------------------------------------ model configs


def model_config(source: str, results_dir: str | None = None):
    """The transformers config of a model source: a folder, a known hub id, or the prepared folder."""
    from transformers import AutoConfig, Qwen2Config

    if source in HUB_SHAPES:
        return Qwen2Config(**QWEN_SHAPES[HUB_SHAPES[source]])
    if source in QWEN_SHAPES:
        return Qwen2Config(**QWEN_SHAPES[source])
    for folder in (Path(source), Path(results_dir or "")):
        if (folder / "config.json").is_file():
            return AutoConfig.from_pretrained(folder)
    raise PlanError(f"model source {source!r}: no config.json and not one of {sorted(HUB_SHAPES)}")


# ------------------------------------------------------------------------ activation measurement


@dataclass(frozen=True)
class Measured:
    saved: int  # bytes of tensors autograd saved for backward (deduplicated by storage; no parameters)
    peak: int  # peak live activation and temporary bytes (MemTracker total minus parameters, buffers, grads)


def _small_model(widths: tuple, layers: int, vocab: int, dtype: torch.dtype, init: bool = True):
    """A Qwen2 model with the given layer widths; built under a FakeTensorMode it holds shapes only."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, intermediate, heads, kv_heads = widths
    config = Qwen2Config(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=vocab,
                         tie_word_embeddings=False, max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)


def _storage_key(t) -> int:
    return t.untyped_storage()._cdata


def measure(model, phase: str, tokens: int, autocast: bool, checkpointing: bool = False) -> Measured:
    """Run one phase's computation on ``tokens`` tokens (batch of one) and measure its memory.

    phase: ``forward`` (no-grad, as OAR-P and vLLM's profiling run), ``oar_g`` (eval mode, gradient of
    an outcome with respect to the input embeddings, as ``oar.method.gradient_scorers._embedding_gradients``) or
    ``update`` (train mode, TRL's fused-LM-head log-probabilities and their backward). Works on real
    tensors and under a ``FakeTensorMode`` (shapes only: the same sizes, no compute).
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    params = {_storage_key(p) for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        key = _storage_key(t)
        if key not in params:
            saved[key] = t.untyped_storage().nbytes()
        return t

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    model.train(phase == "update")
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    tracker = MemTracker()
    tracker.track_external(model)
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with tracker, amp:
        if phase == "forward":
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
        elif phase == "oar_g":
            embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            with hooks:
                logits = model(inputs_embeds=embeds, logits_to_keep=8).logits
                objective = torch.log_softmax(logits.float().mean(dim=1), dim=-1).sum()
            objective.backward(inputs=[embeds])  # as autograd.grad (MemTracker cannot follow autograd.grad)
        elif phase == "update":
            with hooks:
                out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids.clone(), fused_lm_head=True)
            (-out.log_probs.sum()).backward()
        else:
            raise ValueError(f"unknown phase {phase!r}")
    snap = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    kinds = {str(k).rsplit(".", 1)[-1]: v for k, v in snap.items()}
    model.zero_grad(set_to_none=True)
    # Parameters, buffers and gradients are counted from the shapes by the plan, not here.
    peak = kinds["Total"] - kinds["PARAM"] - kinds["BUFFER"] - kinds["GRAD"]
    return Measured(saved=sum(saved.values()), peak=peak)


@dataclass(frozen=True)
class PerToken:
    """Activation bytes per token = base + per_layer * layers + per_vocab * vocab."""

    base: float
    per_layer: float
    per_vocab: float

    def bytes(self, tokens: float, layers: int, vocab: int) -> float:
        return tokens * max(0.0, self.base + self.per_layer * layers + self.per_vocab * vocab)


# Sizes of the measurement: small enough for a CPU test, large enough that per-token slopes are clean.
TOKENS = (32, 64)
LAYERS = (1, 2)
VOCABS = (512, 1024)


@functools.lru_cache(maxsize=None)
def per_token(widths: tuple, dtype_name: str, phase: str, autocast: bool, checkpointing: bool) -> dict[str, PerToken]:
    """Fits of base, per-layer and per-vocab bytes per token, for ``saved`` and ``peak`` bytes, from
    three small models with the target's layer widths (slopes in tokens, so fixed costs cancel),
    measured under a FakeTensorMode (shapes only: a 7B-wide layer costs no memory and no compute)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from trl.trainer.utils import add_fused_lm_head

    slopes = {}
    for layers, vocab in ((LAYERS[0], VOCABS[0]), (LAYERS[1], VOCABS[0]), (LAYERS[0], VOCABS[1])):
        with FakeTensorMode():
            model = _small_model(widths, layers, vocab, DTYPES[dtype_name])
            add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
            low, high = (measure(model, phase, t, autocast, checkpointing) for t in TOKENS)
        slopes[layers, vocab] = {what: (getattr(high, what) - getattr(low, what)) / (TOKENS[1] - TOKENS[0])
                                 for what in ("saved", "peak")}
    fits = {}
    for what in ("saved", "peak"):
        s = {key: value[what] for key, value in slopes.items()}
        per_layer = s[LAYERS[1], VOCABS[0]] - s[LAYERS[0], VOCABS[0]]
        per_vocab = (s[LAYERS[0], VOCABS[1]] - s[LAYERS[0], VOCABS[0]]) / (VOCABS[1] - VOCABS[0])
        base = s[LAYERS[0], VOCABS[0]] - per_layer * LAYERS[0] - per_vocab * VOCABS[0]
        if phase == "forward":
            # No-grad: nothing accumulates over layers and only the kept logits see the vocabulary; the
            # peak is one layer's transients, which move a little with where the peak lands: the largest.
            per_layer, per_vocab, base = 0.0, 0.0, max(s.values())
        fits[what] = PerToken(base=base, per_layer=per_layer, per_vocab=per_vocab)
    return fits


# ------------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    gpus: int
    fsdp: bool  # FSDP full shard: weights, gradients and AdamW state divided over the GPUs
    mixed_precision: bool  # bf16 autocast (on a GPU, bf16: auto is on)
    master_dtype: str  # dtype of the trained weights (fp32 under FSDP + mixed precision: accelerate upcasts)
    note: str = ""

    def describe(self) -> str:
        kind = "FSDP2 full shard" if self.fsdp else "one process"
        return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}, {kind}, {self.master_dtype} weights" + (
            " + bf16 autocast" if self.mixed_precision else "")


def layout_of(launcher: str, model_dtype: str, bf16, where: str) -> Layout:
    """The process layout a model's launcher gives (reads the accelerate config file it names)."""
    words = shlex.split(launcher)
    mixed = bf16 in ("auto", True)  # the plan is for a GPU, where auto means on
    if words[:1] == ["python"]:
        return Layout(1, False, mixed, model_dtype)
    if words[:2] != ["accelerate", "launch"]:
        raise PlanError(f"{where}.launcher: {launcher!r} is neither 'python' nor 'accelerate launch ...'")
    options = {}
    for i, w in enumerate(words):
        if w.startswith("--") and "=" in w:
            options[w[2:].split("=")[0]] = w.split("=", 1)[1]
        elif w.startswith("--") and i + 1 < len(words):
            options[w[2:]] = words[i + 1]
    file = {}
    if "config_file" in options:
        path = Path(options["config_file"])
        if not path.is_file():
            raise PlanError(f"{where}.launcher: accelerate config {path} does not exist")
        file = yaml.safe_load(path.read_text()) or {}
    gpus = int(options.get("num_processes", file.get("num_processes", 1)))
    fsdp = file.get("distributed_type") == "FSDP" or "use_fsdp" in options
    if fsdp and not file.get("fsdp_config", {}).get("fsdp_reshard_after_forward", True):
        raise PlanError(f"{where}.launcher: the plan models FSDP full shard (fsdp_reshard_after_forward: true)")
    mixed = mixed and file.get("mixed_precision", "bf16") != "no"
    if fsdp and mixed:
        # accelerate/utils/fsdp_utils.py fsdp2_prepare_model: trainable params upcast to float32
        return Layout(gpus, True, True, "float32",
                      note=f"model_dtype {model_dtype} has no effect: accelerate upcasts to float32 under FSDP")
    return Layout(gpus, fsdp, mixed, model_dtype)


# --------------------------------------------------------------------------------------- plan


@dataclass
class Phase:
    model: str
    layout: str
    phase: str
    parts: dict[str, float] = field(default_factory=dict)  # name -> bytes
    note: str = ""

    @property
    def total_gb(self) -> float:
        return sum(self.parts.values()) / GB


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def oar_p_copies(prompt: float, reasoning: int, probe: float, span: int = 1,
                 window: int = 0) -> list[tuple[float, float]]:
    """OAR-P's substituted copies of one response as (tokens run, tokens of its clean prefix), longest
    run first: a copy of span [a, a + w) runs reasoning position a to the probe's end over the clean prefix
    of prompt + a tokens; with a window K, min(max(w, K), R - a) reasoning tokens and the tail over the
    cache of the whole prompt and reasoning."""
    tail = probe - prompt - reasoning
    copies = []
    for a in range(0, int(reasoning), max(1, int(span))):
        if window:
            copies.append((min(max(span, window), reasoning - a) + tail, prompt + reasoning))
        else:
            copies.append((probe - prompt - a, prompt + a))
    return sorted(copies, key=lambda c: -c[0])


def stacked_forwards(copies: list[tuple[float, float]], responses: int, chunk_tokens: int) -> list[PackedForward]:
    """The scorer's own packing (``oar.method.copy_packing.pack_copies``) of the copies of ``responses``
    alike responses, each given as (tokens run, cached prefix) by :func:`oar_p_copies` (rounded to whole
    tokens): rows of copies of one response over its prefix, rows x width <= ``chunk_tokens``."""
    return list(_packed(tuple((int(round(run)), int(round(cached))) for run, cached in copies),
                        max(1, int(responses)), int(chunk_tokens)))


@functools.lru_cache(maxsize=256)
def _packed(copies: tuple[tuple[int, int], ...], responses: int, chunk_tokens: int) -> tuple[PackedForward, ...]:
    probes = [i for i in range(responses) for _ in copies]
    lengths = [max(1, run) for _ in range(responses) for run, _ in copies]
    cached = [c for _ in range(responses) for _, c in copies]
    return tuple(pack_copies(probes, lengths, cached, chunk_tokens)[1])


def oar_p_peak_tokens(probe_tokens: int, prompt_tokens: int, chunk_tokens: int, window: int = 0,
                      responses: int = 1, span: int = 1) -> tuple[int, int]:
    """(cache tokens materialised, tokens run) of OAR-P's largest forward of substituted copies: each row's
    cache is its response's prefix (the forward's longest) and its run, materialised at full length by
    ``DynamicCache.update`` (``torch.cat``); the forward with the most cached tokens."""
    reasoning = probe_tokens - prompt_tokens - CONCLUDE_AND_ANSWER_TOKENS
    copies = oar_p_copies(prompt_tokens, reasoning, probe_tokens, span, window)
    forwards = stacked_forwards(copies, responses, chunk_tokens)
    return max(((f.rows * (f.cache_len + f.width), f.tokens) for f in forwards), default=(0, 0))


def plan_model(name: str, spec: Mapping, settings: Mapping, shape: Shape, prompt_tokens: int,
               gpu_gb: float = GPU_GB, methods=("oar_p", "oar_g"), scored: int | None = None) -> list[Phase]:
    """Every phase of one model's training runs (``settings`` as ``Registry.run_settings`` resolves them).
    ``scored``: responses of one scoring call (default: the generation batch, every row scored)."""
    trainer, oar = settings["trainer"], settings["oar"]
    layout = layout_of(spec.get("launcher", "python"), settings["model_dtype"], trainer.get("bf16", "auto"),
                       f"models.{name}")
    n = layout.gpus if layout.fsdp else 1
    master = _bytes(layout.master_dtype)
    # Scoring runs inside the training forward's autocast (accelerate wraps the model's forward): with
    # mixed precision its matmuls, activations and KV cache are bf16 whatever the master weights are; it
    # computes from the master weights on one GPU (cast per op) and from the bf16 FSDP gather.
    scoring_dtype = "bfloat16" if layout.fsdp else layout.master_dtype
    scoring_kv = 2 if layout.mixed_precision else _bytes(scoring_dtype)
    describe = layout.describe()
    P = shape.params
    resident = {"weights": P * master / n, "AdamW state": 2 * P * master / n, "reserve": RESERVE_GB * GB}
    sequence = prompt_tokens + trainer["max_completion_length"]
    probe = sequence + CONCLUDE_AND_ANSWER_TOKENS
    phases = []

    engine = 0.0
    if trainer.get("use_vllm") and trainer.get("vllm_mode", "colocate") == "colocate":
        share = trainer["vllm_gpu_memory_utilization"] * gpu_gb * GB
        max_len = trainer.get("vllm_max_model_length") or shape.max_positions
        seqs = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]  # TRL's max_num_seqs
        fwd = per_token(shape.widths, "bfloat16", "forward", False, False)["peak"]
        weights = P * 2
        profile = fwd.bytes(VLLM_MAX_NUM_BATCHED_TOKENS, shape.layers, shape.vocab)
        sampler = seqs * shape.vocab * 4
        kv = share - weights - profile - sampler
        need = max_len * shape.kv_bytes_per_token_bf16
        concurrent = int(kv // (sequence * shape.kv_bytes_per_token_bf16)) if kv > 0 else 0
        note = (f"KV cache {kv / GB:.1f} GB: {'holds' if kv >= need else 'CANNOT hold'} one "
                f"{max_len:,}-token sequence ({need / GB:.1f} GB); {min(concurrent, seqs)} of {seqs} "
                f"sequences at once")
        phases.append(Phase(name, describe, "engine (vLLM colocate)", {
            **resident, "engine share": share,
            "weight sync (largest tensor, full)": shape.head_params * master if layout.fsdp else 0.0,
        }, note))
        if kv < need:
            phases[-1].parts["engine shortfall"] = need - kv
        # TRL puts a sleep-mode engine to sleep at level 2 after generating: weights and KV cache freed.
        engine = 0.0 if trainer.get("vllm_enable_sleep_mode") else share

    chunk = oar["chunk_tokens"]
    full_compute = {"full bf16 weights (scoring gather)": P * 2} if layout.fsdp else {}
    scored = scored or trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
    if "oar_p" in methods:
        window = oar.get("window_tokens", OARSettings.window_tokens)
        span = oar.get("span_tokens", OARSettings.span_tokens)
        cached, run = oar_p_peak_tokens(probe, prompt_tokens, chunk, window, scored, span)
        fwd = per_token(shape.widths, scoring_dtype, "forward", layout.mixed_precision, False)["peak"]
        kv_tok = shape.kv_bytes_per_token_bf16 * scoring_kv / 2
        phases.append(Phase(name, describe, "scoring OAR-P", {
            **resident, "engine share": engine, **full_compute,
            "clean KV caches (every scored response)": scored * probe * kv_tok,
            # every row holds its own copy of its forward's prefix and its new keys and values, for every
            # layer (transformers' cache concatenates per row); the copy being made for one layer on top
            "largest forward's cache (a copy per row, every layer)": cached * kv_tok,
            "one layer's cache being concatenated": cached * kv_tok / shape.layers,
            "forward activations": fwd.bytes(max(run, min(chunk, probe)), shape.layers, shape.vocab),
        }, f"{scored} responses a call, {probe:,}-token probes, chunk_tokens {chunk:,}: largest forward runs {run:,} "
           f"tokens, its rows holding {cached:,} cached and new positions (at most "
           f"{CACHED_PER_CHUNK_TOKEN} x chunk_tokens of prefix)"))
    if "oar_g" in methods:
        grad_chunk = grad_budget(oar)
        rows = max(1, grad_chunk // probe)
        grad = per_token(shape.widths, scoring_dtype, "oar_g", layout.mixed_precision, False)["peak"]
        # autocast keeps a bf16 copy of every weight used with grad on; the backward holds them
        casts = {"autocast bf16 weight copies (kept for the backward)": P * 2} if (
            layout.mixed_precision and not layout.fsdp and layout.master_dtype == "float32") else {}
        phases.append(Phase(name, describe, "scoring OAR-G", {
            **resident, "engine share": engine, **full_compute, **casts,
            "activations with grad": grad.bytes(rows * probe, shape.layers, shape.vocab),
        }, f"{rows} probe(s) of {probe:,} tokens per forward ("
           + (f"grad_chunk_tokens {grad_chunk:,})" if oar.get("grad_chunk_tokens") else f"chunk_tokens {chunk:,})")))

    checkpointing = bool(trainer.get("gradient_checkpointing"))
    # FSDP computes with gathered bf16 weights; one process with its own weights (autocast on top).
    # Checkpointing keeps each layer's input (saved); the backward recomputes one layer at a time, which
    # then holds that layer's saved activations (the per-layer saved bytes without checkpointing).
    update_dtype = "bfloat16" if layout.fsdp else layout.master_dtype
    kept = per_token(shape.widths, update_dtype, "update", layout.mixed_precision, checkpointing)["saved"]
    full = per_token(shape.widths, update_dtype, "update", layout.mixed_precision, False)["saved"]
    recompute = PerToken(0.0, full.per_layer, 0.0) if checkpointing else PerToken(0.0, 0.0, 0.0)
    micro = trainer["per_device_train_batch_size"]
    if layout.fsdp:  # two gathered layers (current + prefetch) and the unresharded LM head, weights and grads
        compute_copies = {"gathered layers + LM head (bf16, weights and grads)":
                          2 * (2 * shape.params_per_layer + shape.head_params) * 2}
    elif layout.mixed_precision and layout.master_dtype == "float32":
        compute_copies = {"autocast bf16 weight cache": P * 2}
    else:
        compute_copies = {}
    phases.append(Phase(name, describe, "update", {
        **resident, "engine share": engine, "gradients": P * master / n, **compute_copies,
        "activations kept": kept.bytes(micro * sequence, shape.layers, shape.vocab),
        "one layer recomputed": recompute.bytes(micro * sequence, 1, shape.vocab),
    }, f"micro-batch {micro} x {sequence:,} tokens, gradient checkpointing {'on' if checkpointing else 'off'}"))
    if layout.note:
        for p in phases:
            p.note = f"{p.note}; {layout.note}" if p.note else layout.note
    return phases


def plan_config(config: Mapping, prompt_tokens: int = 512, gpu_gb: float = GPU_GB) -> list[Phase]:
    """Every phase of every model of a validated workflow config (its schema defaults filled in)."""
    from oar.experiment.runs import Registry

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    out = []
    for name, spec in config["models"].items():
        runs = [r for r in registry.runs.values() if r["run_id"].startswith(f"{name}/")]
        if not runs:
            continue
        settings = registry.run_settings(name, "oar_g", 0)
        shape = shape_of(model_config(spec["source"], registry.model_dir(name)))
        out += plan_model(name, spec, settings, shape, prompt_tokens, gpu_gb,
                          methods=[m for m in ("oar_p", "oar_g") if any(r["method"] == m for r in runs)])
    return out


def _trainer_keys() -> set[str]:
    """The keys a ``trainer`` section may hold (``oar.experiment.config_schema``)."""
    return set(trainer_keys())


def load_config(path: str | Path) -> dict:
    """A workflow config validated against config/schema.yaml with the schema's defaults filled in, as the
    Snakefile validates it (``oar.experiment.config_schema``); a bad config raises ``ConfigError`` naming
    the key."""
    return load_workflow_config(path)


def table(phases: list[Phase], gpu_gb: float = GPU_GB) -> str:
    lines = ["| model | layout | phase | GB per GPU | budget | fits | largest parts | note |",
             "|---|---|---|---|---|---|---|---|"]
    for p in phases:
        largest = sorted(((v, k) for k, v in p.parts.items() if v > 0), reverse=True)[:3]
        parts = ", ".join(f"{k} {v / GB:.1f}" for v, k in largest)
        lines.append(f"| {p.model} | {p.layout} | {p.phase} | {p.total_gb:.1f} | {gpu_gb:.0f} | "
                     f"{'yes' if p.total_gb <= gpu_gb else 'NO'} | {parts} | {p.note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/paper.yaml")
    parser.add_argument("--gpu-gb", type=float, default=GPU_GB, help="memory of one GPU, GB (1e9 bytes)")
    parser.add_argument("--prompt-tokens", type=int, default=512,
                        help="longest prompt in tokens (chat template + problem; assumed, the data is not read)")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    phases = plan_config(load_config(args.config), args.prompt_tokens, args.gpu_gb)
    print(f"Memory plan of {args.config}: per GPU, {args.gpu_gb:.0f} GB budget, prompts up to "
          f"{args.prompt_tokens} tokens, {RESERVE_GB:.0f} GB reserve for CUDA context and NCCL in every row\n")
    print(table(phases, args.gpu_gb))
    return 0 if all(p.total_gb <= args.gpu_gb for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
