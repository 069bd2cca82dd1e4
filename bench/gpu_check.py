"""GPU preflight: where every second of a GRPO, OAR-G and OAR-P step goes, on a model of real shape.

Made for a CUDA machine with no network and no room for weights: the model is built from a shape below
with random weights (nothing to download or carry), the tokenizer is the tiny test tokenizer padded with
placeholder tokens up to the shape's vocabulary, and responses are forced to the row's length
(``min_new_tokens``: random weights would stop at a random eos). Rewards are a hash parity of the text,
so groups have non-zero advantages, and every response is scored (``score_all``): the timings are those
of a full step, whatever the model says. Each row trains in its own process, so its peak memory is its own.

    python bench/gpu_check.py --budget-s 480     # the 1.5B check within 8 minutes: GRPO and OAR-G at 1,024
                                                 # tokens, exact OAR-P at 256 and 1,024 (planned at 342 s,
                                                 # measured 377 on an H200)
    python bench/gpu_check.py --plan-only        # print the plan and stop
    python bench/gpu_check.py --shape qwen2.5-7b --response-tokens 3072   # 7B layer shapes
    python bench/gpu_check.py --shape tiny --response-tokens 16 --batch 4 --num-generations 2   # CPU smoke run

What each row measures:

- the scorer settings of the paper run: ``chunk_tokens``, ``probe``, ``span_tokens``, ``window_tokens``
  and ``noise_sigma`` from ``--config`` (config/paper.yaml) for the shape's model (``training.oar`` with
  the model's ``oar`` overrides); an option that contradicts the config stops with an error naming the key;
- per step, with the device synchronised at every boundary: generation (transformers' ``generate``,
  recorded as the row's backend), scoring, and the update timed to completion (loss, backward, clipping,
  AdamW's step and ``zero_grad``: from the end of scoring to transformers' ``on_step_end``, which TRL's own
  step timer stops before); the first step (the process's warm-up, and the profiled scoring call) is kept
  out of the steady figures, which are the median of the later steps;
- the peak memory of a steady step (AdamW's state resident), beside ``oar.experiment.memory_plan``'s;
- per scorer, a profile of the first step's scoring call (``torch.profiler``): the operators with the
  most device time (CPU time on a CPU), the device's busy seconds, host synchronisations (``aten::item``,
  ``aten::_local_scalar_dense``, ``aten::nonzero``), model calls and kernel launches per call;
  ``--profile-steady`` also profiles a scorer's last scoring call, repeated warm on the same batch;
- whether vLLM was importable (the evaluation rows, ``--eval``, time it when it is).

No checkpoint is written (``save_strategy: no``: transformers otherwise saves at ``max_steps``, 9 GB a
method at 1.5B). The table (``--out``, and ``gpu_check.md`` in ``--work``) and ``calibration.json`` are
rewritten after every row, atomically, marked partial until the last row: a run cut off keeps its finished
rows and leaves no complete-looking file. ``python -m oar.experiment.cost_plan --calibration`` reads it.

``--budget-s`` plans every row with ``oar.experiment.cost_plan`` calibrated by ``--calibration`` (the H200
rows in bench/calibration by default): a row that does not fit what is left runs with fewer steps (at least
2) or shorter responses (down to 256 tokens), or is skipped, and the plan says which. The real shapes run on
CUDA only: without a CUDA device the check stops with an error rather than running on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import signal
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import torch

from harness import add_out, add_threads, sync_counts
from oar.files import atomic_write_text

REPO = Path(__file__).resolve().parents[1]
# Shapes from the models' published config.json files (Qwen2.5-Math-1.5B has Qwen2.5-1.5B's shape).
SHAPES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # head_dim 32: the smallest vLLM's CPU attention takes, so the same shape runs every backend on CPU.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=None, tie_word_embeddings=True),
}
METHODS = ("grpo", "oar_g", "oar_p")
PAPER_RATIO = {"grpo": 1.0, "oar_g": 1.4, "oar_p": 4.2}  # step time over GRPO's, as the paper reports
PARTS = ("time_generate_s", "time_score_s", "time_update_s", "step_time_s")


def build_model_folder(shape: str, out: Path, max_positions: int) -> Path:
    """A Qwen2 model folder of ``shape`` with random weights (bf16 on disk) and a padded tiny tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oar.models.tiny import build_tiny_tokenizer

    if (out / "config.json").exists():
        return out
    tokenizer = build_tiny_tokenizer()
    tokenizer.clean_up_tokenization_spaces = False
    spec = dict(SHAPES[shape])
    vocab = spec.pop("vocab_size") or len(tokenizer)
    # Placeholder tokens fill the vocabulary, so every id the random model samples decodes to something.
    tokenizer.add_tokens([f"<filler_{i}>" for i in range(vocab - len(tokenizer))])
    config = Qwen2Config(vocab_size=vocab, max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **spec)
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (on the GPU when there is one): seconds, not minutes
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def parameter_count(model_dir: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def write_problems(path: Path, count: int) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            a, b = 3 * i + 7, 5 * i + 11
            problem = f"Tom has {a} apples and buys {b} more each day for {i + 2} days. How many apples does he have?"
            handle.write(json.dumps({"id": f"check/{i}", "problem": problem, "answer": str(a + b * (i + 2))}) + "\n")
    return path


def hash_parity_reward(completions, **kwargs) -> list[float]:
    """Varied, deterministic rewards for a random model (it never answers), so advantages are non-zero."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(zlib.crc32(t.encode()) % 2) for t in texts]


# ------------------------------------------------------------------------------- scorer settings

OAR_KEYS = ("chunk_tokens", "grad_chunk_tokens", "probe", "span_tokens", "window_tokens", "noise_sigma",
            "scoring_attention", "grad_prompt")
# which model of a workflow config each shape stands for (its source's layer shapes)
SHAPE_OF_SOURCE = {"qwen2.5-1.5b": "qwen2.5-1.5b", "qwen2.5-7b": "qwen2.5-7b"}


class CheckError(ValueError):
    """A setting the check cannot run with; the message names the option, key or field."""


def scorer_settings(config_path: Path, shape: str, options: dict) -> tuple[dict, dict]:
    """(the scorer settings, where each came from): ``training.oar`` of the config (config/schema.yaml's
    defaults where it is silent) with the ``oar`` of its model whose source has ``shape``'s layer shapes;
    an option given on the command line must agree. Read with PyYAML alone: the preflight's machine may
    have no jsonschema."""
    import yaml

    from oar.experiment.memory_plan import HUB_SHAPES

    try:
        config = yaml.safe_load(Path(config_path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CheckError(f"--config {config_path}: {error}") from error
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    defaults = {k: v.get("default") for k, v in schema["$defs"]["oar"]["properties"].items()}
    training = ((config or {}).get("training") or {}).get("oar") or {}
    oar = {**defaults, **training}
    where = {k: f"training.oar.{k}" if k in training else f"config/schema.yaml's default of training.oar.{k}"
             for k in oar}
    for name, spec in ((config or {}).get("models") or {}).items():
        if spec.get("source") == shape or HUB_SHAPES.get(spec.get("source")) == shape:
            for key, value in (spec.get("oar") or {}).items():
                oar[key], where[key] = value, f"models.{name}.oar.{key}"
            break
    for key, value in options.items():
        if value is None:
            continue
        if oar.get(key) != value:
            raise CheckError(f"--{key.replace('_', '-')} {value} contradicts {where.get(key, key)} = {oar.get(key)} "
                             f"in {config_path} (the check measures the config's settings: change the config, or "
                             "leave the option out)")
    return {k: oar[k] for k in OAR_KEYS}, {k: where[k] for k in OAR_KEYS}


# ---------------------------------------------------------------------------------- the rows


@dataclasses.dataclass
class Row:
    """One process: a method trained for ``len(run_lengths)`` steps, step i forced to ``run_lengths[i]``
    tokens. Every length it runs is a result row; step 1 (warm-up, profiled) is in none of them."""

    method: str
    lengths: list  # the planned steps
    window: int = 0
    planned_s: float = 0.0
    note: str = ""
    attention: str = ""  # the scorers' attention kernels when not the config's (--attention-ab's twins)
    wanted: list = dataclasses.field(default_factory=list)  # the steps asked for, before the budget sized them
    tried: list = dataclasses.field(default_factory=list)  # steps after the planned ones, in whatever time is left

    @property
    def run_lengths(self) -> list:
        return self.lengths + self.tried

    @property
    def tag(self) -> str:
        return (self.method + (f"-w{self.window}" if self.window else "")
                + (f"-{self.attention}" if self.attention else ""))

    @property
    def name(self) -> str:
        return f"{self.tag}-" + "-".join(str(t) for t in dict.fromkeys(self.run_lengths))

    def label(self, tokens: int | None = None) -> str:
        kind = {"oar_p": "exact OAR-P" if not self.window else f"OAR-P (window {self.window})",
                "oar_g": "OAR-G", "grpo": "GRPO"}[self.method]
        kernels = f" ({self.attention} attention)" if self.attention else ""
        return f"{kind}{kernels} at {tokens or self.lengths[-1]:,} tokens"

    def parts(self) -> list[tuple[str, int]]:
        """(result name, tokens) of every length this row measures, the tried ones included."""
        return [(f"{self.tag}-{t}", t) for t in dict.fromkeys(self.run_lengths)]

    def planned_parts(self) -> list[tuple[str, int]]:
        """(result name, tokens) of the lengths the plan holds: the check is complete when these finished."""
        return [(f"{self.tag}-{t}", t) for t in dict.fromkeys(self.lengths)]

    def try_dropped_lengths(self) -> None:
        """Give back, as tried steps, the longer lengths the budget dropped from the end of the row."""
        kept = len(self.lengths)
        if self.wanted[:kept] == self.lengths:
            self.tried = [t for t in self.wanted[kept:] if t not in self.lengths]


PROMPT_TOKENS = 93  # the check's one-line problems with the padded tiny tokenizer (TRL's num_tokens on the H200)
ROW_OVERHEAD_S = 23.0  # a 1.5B row's process beyond its steps on the H200: start, imports, weights, trainer
BUILD_S = 8.0  # the 1.5B model folder, built once (H200)
# The profiled first scoring call, measured on the H200 (1.5B shape, the paper config's 8,192-token
# forwards, bench/calibration/h200-2026-11-generate-no-cudnn): the call itself ran 2.7x its unprofiled
# steady time for exact OAR-P (256 tokens, 6.97 s against 2.59) and 2.5x for OAR-G (1,024 tokens, 1.40 s
# against 0.565); the profiler then spent about 38 s (exact OAR-P, 39 model calls) and 9 s (OAR-G, 5 calls)
# reading the trace: per layer a model call, 35 and 63 ms (OAR-G's calls carry their backward).
PROFILE_FACTOR = {"oar_p": 2.7, "oar_g": 2.5}
PROFILE_S_PER_LAYER_CALL = {"oar_p": 0.035, "oar_g": 0.063}
# the H200's rows at 2,048- and 8,192-token scoring forwards (two forward sizes fit the scorers' FLOP rate),
# and OAR-G's over an inline prompt (the paper config's grad_prompt), whose calls cost less
CALIBRATION = tuple(REPO / "bench" / "calibration" / name / "calibration.json"
                    for name in ("h200-2026-11-no-cudnn", "h200-2026-11-generate-no-cudnn", "h200-2026-11-inline"))
MIN_STEPS, MIN_TOKENS = 2, 256


def check_shape(shape: str):
    from oar.experiment.shapes import shape_of
    from transformers import Qwen2Config

    spec = dict(SHAPES[shape])
    if spec["vocab_size"] is None:
        from oar.models.tiny import build_tiny_tokenizer

        spec["vocab_size"] = len(build_tiny_tokenizer())
    return shape_of(Qwen2Config(**spec))


def row_seconds(row: Row, shape, hw, oar: dict, args) -> float:
    """The row's process planned by oar.experiment.cost_plan for its settings: start-up, then each step; a
    step at a length the process has not generated yet is planned at the first step's decode rate."""
    from oar.experiment.cost_model import Assumptions
    from oar.experiment.cost_plan import step_plan

    assume = Assumptions(prompt_tokens=PROMPT_TOKENS, completion_fill=1.0, scored_share=1.0)
    total, seen = ROW_OVERHEAD_S, set()
    for i, tokens in enumerate(row.lengths):
        settings = {"run_id": "check", "method": row.method,
                    "oar": {**oar, "window_tokens": row.window, "score_all": True,
                            "scoring_attention": row.attention or oar["scoring_attention"]},
                    "trainer": {"max_completion_length": tokens, "per_device_train_batch_size": args.batch,
                                "gradient_accumulation_steps": 1, "num_generations": args.num_generations,
                                "gradient_checkpointing": args.gradient_checkpointing, "use_vllm": False,
                                "beta": 0.0}}
        step = step_plan(shape, settings, hw, assume, first_step=tokens not in seen)
        profiled = row.method != "grpo" and not row.attention
        if profiled and i == 0:  # the profiled scoring call, and its trace
            total += ((PROFILE_FACTOR[row.method] - 1) * step.scoring
                      + PROFILE_S_PER_LAYER_CALL[row.method] * shape.layers * step.scoring_calls)
        if profiled and row.method in args.profile_steady and i == len(row.lengths) - 1:  # the repeat, profiled
            total += (PROFILE_FACTOR[row.method] * step.scoring
                      + PROFILE_S_PER_LAYER_CALL[row.method] * shape.layers * step.scoring_calls)
        total += step.step
        seen.add(tokens)
    return total


def plan_rows(rows: list[Row], shape, hw, oar: dict, args, budget: float | None) -> tuple[list[Row], list[str]]:
    """Each row's planned seconds; with a budget, the rows that fit what is left, a row that does not
    losing steps (down to two), then its last length, then halving its lengths (down to 256 tokens) until
    it fits, else skipped.
    Lines saying what was changed or skipped come back with the rows."""
    kept, said = [], []
    left = None if budget is None else budget - BUILD_S
    for row in rows:
        row.planned_s = row_seconds(row, shape, hw, oar, args)
        wanted = row.wanted = list(row.lengths)
        while left is not None and row.planned_s > left:
            distinct = list(dict.fromkeys(row.lengths))
            if row.lengths.count(row.lengths[0]) > MIN_STEPS:  # fewer steps first
                row.lengths.remove(row.lengths[0])
            elif len(distinct) > 1:  # then drop the last length
                row.lengths = [t for t in row.lengths if t != distinct[-1]]
            elif row.lengths[0] // 2 >= MIN_TOKENS:
                row.lengths = [t // 2 for t in row.lengths]
            else:
                break
            row.planned_s = row_seconds(row, shape, hw, oar, args)
        if left is None or row.planned_s <= left:
            if row.lengths != wanted:
                row.note = f"sized from steps of {wanted} tokens to {row.lengths} to fit the budget"
                said.append(f"{row.label(wanted[-1])}: {row.note}")
            kept.append(row)
            left = None if left is None else left - row.planned_s
        else:
            said.append(f"{row.label(wanted[-1])}: skipped, planned {row.planned_s:,.0f} s even at "
                        f"{row.lengths} tokens with {max(left, 0):,.0f} s of the budget left")
    if budget is not None and not kept:
        raise CheckError(f"--budget-s {budget:g}: too small for one row ({said[0]}); the smallest plan is "
                         f"{BUILD_S + rows[0].planned_s:,.0f} s")
    return kept, said


# ------------------------------------------------------------------------------ one row's process


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


LAUNCH_OPS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def profile_summary(prof, calls: int, seconds: float) -> dict:
    """Top operators by device time (CPU time without a GPU), host synchronisations, model calls and
    kernel launches of one profiled scoring call."""
    on_gpu = torch.cuda.is_available()
    events = prof.key_averages()
    attr = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    # operators, not annotations (record_function ranges), runtime calls or the kernels themselves (a
    # kernel's own entry repeats its operator's device time: counted twice, shares and sums go wrong)
    ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and "::" in e.key
           and not e.key.startswith(("cuda", "cu"))]
    top = sorted((e for e in ops if getattr(e, attr, 0) > 0), key=lambda e: -getattr(e, attr))[:10]
    total = sum(getattr(e, attr, 0) for e in ops) or 1
    syncs = sync_counts(events)
    launches = sum(e.count for e in events if e.key in LAUNCH_OPS)
    # device time within the call (its kernels, summed): the rest of ``seconds`` the device sat idle
    device_s = total / 1e6 if on_gpu and total > 1 else None
    return {"seconds": seconds, "device_s": device_s, "model_calls": calls,
            "synchronisations": sum(syncs.values()), "by_op": syncs,
            "kernel_launches": launches if on_gpu else None,
            "launches_per_call": launches / calls if on_gpu and calls else None,
            "time_kind": "device" if on_gpu else "cpu",
            "top": [{"op": e.key, "ms": getattr(e, attr) / 1e3, "share": getattr(e, attr) / total, "count": e.count}
                    for e in top]}


def train_one(settings: dict, out_dir: Path, lengths: list[int], profile_scoring: bool = True,
              profile_steady: bool = False) -> None:
    """``oar.training.run``'s trainer and metrics file, step i's responses forced to ``lengths[i]`` tokens,
    the parity reward, no checkpoint, synchronised step timing, per-step peaks and a profile of the first
    step's scoring call; with ``profile_steady``, also of the last step's scoring call run once more on the
    same batch (out of the step's timing: its update starts after the repeat, its step time leaves it out)."""
    from oar.training.grpo_trainer import OARTrainer
    from oar.training.memory import _reset_rss_high_water
    from oar.training.run import MetricsFile, build_config, load_problems, training_dataset
    from oar.training.settings import resolve_settings
    from transformers import TrainerCallback
    from transformers.trainer_utils import SaveStrategy

    from oar.models.loading import load_model

    settings = resolve_settings(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model(settings["model"], dtype=settings["model_dtype"], eval_mode=False)
    config = build_config(settings, out_dir / "checkpoints")
    config.generation_kwargs = {"min_new_tokens": lengths[0]}
    # transformers' DefaultFlowCallback saves at max_steps whenever save_strategy is "steps"
    config.save_strategy = SaveStrategy.NO
    steps_file = out_dir / "steps.jsonl"
    steps_file.unlink(missing_ok=True)

    class CheckTrainer(OARTrainer):
        def _counted_scoring(self, output, profile_to: Path | None):
            """The scoring call (``OARTrainer._token_weights``), its model calls counted; profiled into
            ``profile_to`` when given."""
            calls = [0]
            handle = self.accelerator.unwrap_model(self.model).register_forward_pre_hook(
                lambda *_: calls.__setitem__(0, calls[0] + 1))
            activities = [torch.profiler.ProfilerActivity.CPU] + (
                [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            context = torch.profiler.profile(activities=activities) if profile_to else contextlib.nullcontext()
            started = time.perf_counter()
            try:
                with context as prof:
                    result = super()._token_weights(output)
                    _sync()
            finally:
                handle.remove()
            if profile_to:
                summary = profile_summary(prof, calls[0], time.perf_counter() - started)
                profile_to.write_text(json.dumps(summary, indent=1) + "\n")
            return result, calls[0]

        def _token_weights(self, output):
            scorer = self.args.oar_method != "grpo"
            profile = profile_scoring and self.state.global_step == 0 and scorer
            result, calls = self._counted_scoring(output, out_dir / "profile.json" if profile else None)
            self._check["score_forwards"] = calls
            self._check["prompt_tokens"] = float(output["prompt_mask"].sum(dim=1).float().mean())
            if profile_steady and scorer and self.state.global_step == len(lengths) - 1:
                self._check["repeat"] = output
            return result

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            _sync()
            repeat = self._check.pop("repeat", None)
            if repeat is not None:  # the last step's scoring once more, warm, under the profiler
                started = time.perf_counter()
                self._counted_scoring(repeat, out_dir / "profile_steady.json")
                self._check["repeat_s"] = time.perf_counter() - started
            self._check["scored_at"] = time.perf_counter()
            return output

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            tokens = lengths[min(state.global_step, len(lengths) - 1)]  # this step's forced length
            trainer.max_completion_length = tokens
            trainer.generation_config.max_new_tokens = trainer.generation_config.min_new_tokens = tokens
            trainer.generation_kwargs.update(max_new_tokens=tokens, min_new_tokens=tokens)
            _sync()
            trainer._memory._process_peak_mb = 0.0  # this step's own peak
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            else:
                _reset_rss_high_water()
            trainer._check = {"began": time.perf_counter()}

        def on_step_end(self, args, state, control, **kwargs):
            _sync()  # the backward and AdamW's step have finished
            ended = time.perf_counter()
            c = trainer._check
            line = {"step": state.global_step, "tokens": trainer.max_completion_length,
                    "step_s": ended - c["began"] - c.get("repeat_s", 0.0),
                    "update_s": ended - c.get("scored_at", c["began"]), "peak_mb": trainer._memory.process_peak_mb(),
                    "score_forwards": c.get("score_forwards", 0), "prompt_tokens": c.get("prompt_tokens")}
            if "repeat_s" in c:
                line["profiled_repeat_s"] = c["repeat_s"]  # left out of step_s
            with open(steps_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

    trainer = CheckTrainer(model=model, reward_funcs=hash_parity_reward, args=config, processing_class=tokenizer,
                           train_dataset=training_dataset(load_problems(settings["train_file"], None), tokenizer),
                           callbacks=[MetricsFile(out_dir / "metrics.jsonl"), StepClock()])
    trainer._check = {}
    trainer.train()


def time_row(args, row: Row, model: Path, problems: Path, dtype: str, oar: dict, timeout: float | None) -> dict:
    """Run one row's process; its results by length (steady: the steps at that length after step 1)."""
    out = args.work / row.name
    for name in ("metrics.jsonl", "steps.jsonl", "profile.json", "profile_steady.json"):
        (out / name).unlink(missing_ok=True)
    settings = {
        "run_id": f"gpu-check-{row.name}", "method": row.method, "seed": 0, "model": str(model),
        "train_file": str(problems), "model_dtype": dtype,
        "oar": {**oar, "score_all": True, "window_tokens": row.window,
                "scoring_attention": row.attention or oar["scoring_attention"]},
        "trainer": {"max_steps": len(row.run_lengths), "num_generations": args.num_generations,
                    "per_device_train_batch_size": args.batch, "max_completion_length": max(row.run_lengths),
                    "gradient_checkpointing": args.gradient_checkpointing},
    }
    started = time.perf_counter()
    # an --attention-ab twin is timed, not profiled: its scorer's profile is its first row's
    spec = json.dumps({"settings": settings, "lengths": row.run_lengths, "profile": not row.attention,
                       "profile_steady": row.method in args.profile_steady and not row.attention})
    try:
        subprocess.run([sys.executable, __file__, "--one-method", spec, str(out), "--threads", str(args.threads)],
                       check=True, timeout=timeout)
    except (subprocess.TimeoutExpired, Terminated) as stop:  # subprocess.run has killed the process
        # the lengths whose steps all finished before the cut are results; the rest are lost
        partial = row_results(row, out, time.perf_counter() - started, complete=False)
        raise RowCutOff(partial, terminated=isinstance(stop, Terminated)) from None
    return row_results(row, out, time.perf_counter() - started)


class RowCutOff(Exception):
    """A row's process cut off at the end of the budget, or by an outer time limit (``terminated``);
    ``results`` holds its lengths that finished."""

    def __init__(self, results: dict, terminated: bool = False):
        super().__init__(f"cut off with {len(results)} finished lengths")
        self.results, self.terminated = results, terminated


class Terminated(Exception):
    """SIGTERM reached the check: an outer time limit (SLURM's at the end of a job's time, `timeout`'s)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def row_results(row: Row, out: Path, seconds: float, complete: bool = True) -> dict:
    """A row's results by length, from the files its process wrote in ``out`` (steady: the steps at that
    length after step 1). ``complete=False``: the process was cut off, and a length is kept only when all
    its steps were logged and timed."""
    def read(name: str) -> list[dict]:
        path = out / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    lines, steps = read("metrics.jsonl"), read("steps.jsonl")
    done = min(len(lines), len(steps))
    lengths = row.run_lengths
    if complete and (len(lines) != len(lengths) or len(steps) != len(lengths)):
        raise RuntimeError(f"{out}: {len(lines)} steps logged and {len(steps)} timed, expected {len(lengths)}")
    profile = json.loads((out / "profile.json").read_text()) if (out / "profile.json").exists() else None
    steady = json.loads((out / "profile_steady.json").read_text()) if (out / "profile_steady.json").exists() else None
    results = {}
    for name, tokens in row.parts():
        at = [i for i, t in enumerate(lengths) if t == tokens and i > 0]  # step 1 carries one-off warm-up
        if not at or at[-1] >= done:
            continue
        logged, clocked = [lines[i] for i in at], [steps[i] for i in at]
        first_here = lengths.index(tokens) == at[0]  # no earlier step generated this length
        r = {"method": row.method, "window_tokens": row.window, "scoring_attention": row.attention or None,
             "process": row.name, "steps": len(lengths),
             "steady_steps": len(at), "process_s": seconds,
             "generate_s": statistics.median(x["time_generate_s"] or 0.0 for x in logged),
             "generate_first_at_length": first_here and len(at) == 1,
             "score_s": statistics.median(x["time_score_s"] or 0.0 for x in logged),
             "update_s": statistics.median(x["update_s"] for x in clocked),
             "step_s": statistics.median(x["step_s"] for x in clocked),
             "first_step_s": steps[0]["step_s"],
             "completion_length": statistics.mean(x["completion_length"] for x in logged),
             "frac_scored": statistics.mean(x["frac_scored"] for x in logged),
             "prompt_tokens": statistics.mean(x["prompt_tokens"] for x in steps if x["prompt_tokens"] is not None),
             "score_forwards": statistics.median(x["score_forwards"] for x in clocked),
             "peak_memory_mb": max(x["peak_mb"] for x in clocked),
             "score_peak_mb": max((x["score_peak_memory_mb"] or 0.0) for x in logged),
             "update_timing": "synchronised, optimizer step included"}
        if lengths[0] == tokens:
            r["first_generate_s"] = lines[0]["time_generate_s"]
        repeat = sum(x.get("profiled_repeat_s", 0.0) for x in steps[:done])
        if repeat:
            r["profiled_repeat_s"] = repeat  # in process_s, in no step: --profile-steady's repeated call
        if tokens in row.tried:
            r["beyond_plan"] = True  # run in the time the planned rows left
        if profile is not None:
            r["profile"] = profile
            r["profiled_tokens"] = row.lengths[0]
        if steady is not None and tokens == lengths[-1]:
            r["steady_profile"] = steady
        if not complete:
            r["cut_off"] = True  # the process did not finish: its later lengths are missing
        results[name] = r
        print(f"{name}: {json.dumps({k: v for k, v in r.items() if k != 'profile'})}", file=sys.stderr, flush=True)
    print(f"{row.name}: {seconds:.0f} s" + ("" if complete else ", cut off"), file=sys.stderr, flush=True)
    return results


def time_evaluation(backend: str, model: Path, args, dtype: str) -> dict:
    from oar.evaluation.generation import make_generator
    from oar.prompting import build_prompt

    problems = [json.loads(line)["problem"] for line in (args.work / "problems.jsonl").read_text().splitlines()]
    extra = {"max_model_len": 256 + args.response_tokens} if backend == "vllm" else {}
    if backend == "vllm" and torch.cuda.is_available():
        extra["gpu_memory_utilization"] = 0.5
    started = time.perf_counter()
    generator = make_generator(backend, model, batch_size=args.eval_batch, dtype=dtype, **extra)
    load_s = time.perf_counter() - started
    prompts = [build_prompt(p, generator.tokenizer) for p in problems[: args.eval_batch]]
    generator.generate(prompts[:1], max_new_tokens=4)  # warm-up (kernels, graphs)
    started = time.perf_counter()
    outputs = generator.generate(prompts, temperature=0.6, top_p=0.95, max_new_tokens=args.response_tokens, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(o.num_tokens for per_prompt in outputs for o in per_prompt)
    return {"load_s": load_s, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def predicted_peak_mib(args, model: Path, dtype: str, oar: dict, method: str, tokens: int, window: int) -> float:
    """oar.experiment.memory_plan's peak (the largest of the phases) for one result row's settings."""
    from transformers import AutoConfig

    from oar.experiment import memory_plan
    from oar.experiment.shapes import shape_of

    shape = shape_of(AutoConfig.from_pretrained(model))
    settings = {"model_dtype": dtype, "oar": {"chunk_tokens": oar["chunk_tokens"], "window_tokens": window,
                                             "grad_chunk_tokens": oar["grad_chunk_tokens"],
                                             "span_tokens": oar["span_tokens"]},
                "trainer": {"per_device_train_batch_size": args.batch, "max_completion_length": tokens,
                            "gradient_checkpointing": args.gradient_checkpointing, "use_vllm": False,
                            "gradient_accumulation_steps": 1, "bf16": "auto" if dtype != "float32" else False}}
    phases = memory_plan.plan_model("check", {"launcher": "python"}, settings, shape, PROMPT_TOKENS,
                                    methods=[method] if method != "grpo" else [], scored=args.batch)
    reserve = memory_plan.RESERVE_GB * memory_plan.GB
    return max((sum(p.parts.values()) - reserve) / 2**20 for p in phases)


def phase_flops(r: dict, shape, oar: dict, args) -> tuple[float, float]:
    """(scoring FLOPs, update FLOPs) of one steady step of result row ``r`` by the cost plan's counters, at
    the row's measured prompt and completion lengths (the calibration's own reading of a row): what its
    achieved TFLOP/s are computed from."""
    from oar.experiment.calibration import check_scoring_work
    from oar.experiment.cost_model import SCHEDULE, scaled, update_work

    update = scaled(update_work(shape, r["prompt_tokens"], r["completion_length"], args.batch,
                                args.gradient_checkpointing, 0), args.batch)
    if r["method"] == "grpo":
        return 0.0, update.flops
    row = {**r, **{k: oar[k] for k in ("chunk_tokens", "span_tokens", "probe")}, "batch": args.batch,
           "num_generations": args.num_generations}
    return check_scoring_work(shape, row, SCHEDULE).flops, update.flops


def phase_rates(r: dict, args) -> dict:
    """Achieved TFLOP/s of scoring and of the update (the cost plan's FLOPs over the measured seconds)."""
    score, update = phase_flops(r, args.flop_shape, args.oar, args)
    return {"score_tflops": score / r["score_s"] / 1e12 if score and r["score_s"] > 0 else None,
            "update_tflops": update / r["update_s"] / 1e12 if r["update_s"] > 0 else None,
            "score_flops": score, "update_flops": update}


def calibration_record(args, model: Path, device: str, dtype: str, oar: dict, results: dict, evaluations: dict,
                       planned: list[Row], complete: bool) -> dict:
    """What ``oar.experiment.cost_plan --calibration`` reads: every finished row with the settings it ran
    with; ``complete`` is false until the last planned row has finished."""
    from transformers import AutoConfig

    from oar.experiment.cost_model import SCHEDULE

    config = AutoConfig.from_pretrained(model)
    shape = {k: getattr(config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads", "vocab_size",
                                             "tie_word_embeddings")}
    rows = []
    for name, r in results.items():
        rows.append({**{k: v for k, v in r.items() if k not in ("profile", "profiled_tokens", "steady_profile")},
                     "batch": args.batch,
                     "num_generations": args.num_generations, "chunk_tokens": oar["chunk_tokens"],
                     "grad_chunk_tokens": oar["grad_chunk_tokens"], "grad_prompt": oar["grad_prompt"],
                     "span_tokens": oar["span_tokens"], "probe": oar["probe"], "scorer_schedule": SCHEDULE,
                     "generation_backend": "transformers", "generation_attention": "no_cudnn",
                     "gradient_checkpointing": args.gradient_checkpointing,
                     **phase_rates(r, args), "scoring_attention": r.get("scoring_attention") or oar["scoring_attention"],
                     "row": name})
    return {
        "complete": complete,
        "rows_planned": [name for r in planned for name, _ in r.planned_parts()],
        "rows_tried_beyond_plan": [name for r in planned for name, t in r.parts() if t in r.tried],
        "device": device,
        "memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9 if device != "CPU" else None,
        "dtype": dtype,
        "autocast": "bf16" if device != "CPU" else None,
        "shape_name": args.shape,
        "shape": shape,
        "parameters": parameter_count(model),
        "batch": args.batch,
        "num_generations": args.num_generations,
        "steps": args.steps,
        "vllm_importable": importlib.util.find_spec("vllm") is not None,
        "torch": torch.__version__,
        "rows": rows,
        "profiles": {r["process"]: {**r["profile"], "tokens": r["profiled_tokens"]}
                     for r in results.values() if "profile" in r},
        "steady_profiles": {name: r["steady_profile"] for name, r in results.items() if "steady_profile" in r},
        "evaluation": {b: {"tokens_per_s": e["tokens_per_s"], "prompts": args.eval_batch,
                           "max_new_tokens": args.response_tokens}
                       for b, e in evaluations.items() if e is not None},  # None: vLLM not importable
    }


def report(args, device: str, dtype: str, oar: dict, where: dict, results: dict, planned: list[Row],
           predicted: dict, build_s: float, said: list[str], evaluations: dict, complete: bool) -> str:
    vllm = importlib.util.find_spec("vllm") is not None
    head = (f"GPU check: {args.shape} shape (random weights) on {device}, {dtype} weights"
            f"{' + bf16 autocast' if device != 'CPU' else ''}; {args.batch} completions per step (forced "
            f"lengths), G = {args.num_generations}, every response scored; scorer settings "
            + ", ".join(f"{k} {oar[k]} ({where[k]})" for k in OAR_KEYS)
            + f"; generation: transformers generate (vLLM {'importable' if vllm else 'not importable'}); "
            f"model folder built in {build_s:.0f} s")
    wanted = sum(len(r.planned_parts()) for r in planned)
    state = "" if complete else (f"\n\n**Partial: {len(results)} of {wanted} planned rows finished** "
                                 "(the rest did not run or were cut off).")
    lines = [head + state, "",
             "| row | steady steps | generate s | score s | update s | step s | first step s | step / GRPO | paper "
             "| scored | score calls | peak MiB | predicted MiB | planned s | process s | score TFLOP/s "
             "| update TFLOP/s |",
             "|" + "---|" * 17]
    goals = []
    for row in planned:
        for name, tokens in row.parts():
            r = results.get(name)
            label = row.label(tokens)
            if r is None:
                state = "not finished in the time left (tried beyond the plan)" if tokens in row.tried else "not run"
                lines.append(f"| {label} | | | | | | | | {PAPER_RATIO[row.method]:.1f} | | | | "
                             f"{predicted.get(name, float('nan')):.0f} | {row.planned_s:.0f} | {state} | | |")
                continue
            if tokens in row.tried:
                label += " (beyond the plan)"
            rates = phase_rates(r, args)
            base = next((b for b in results.values() if b["method"] == "grpo"
                         and b["completion_length"] == r["completion_length"]), None)
            ratio = r["step_s"] / base["step_s"] if base else float("nan")
            generate = f"{r['generate_s']:.3g}" + (" (first at this length)" if r["generate_first_at_length"] else "")
            lines.append(f"| {label} | {r['steady_steps']} of {r['steps']} | {generate} | {r['score_s']:.3g} | "
                         f"{r['update_s']:.3g} | {r['step_s']:.3g} | {r['first_step_s']:.3g} | {ratio:.2f} | "
                         f"{PAPER_RATIO[row.method]:.1f} | {r['frac_scored']:.2f} | {r['score_forwards']:.0f} | "
                         f"{r['peak_memory_mb']:.0f} | {predicted.get(name, float('nan')):.0f} | {row.planned_s:.0f} | "
                         f"{r['process_s']:.0f} | {_tflops(rates['score_tflops'])} | {_tflops(rates['update_tflops'])} |")
            if r["method"] != "grpo" and rates["score_tflops"] and rates["update_tflops"]:
                goals.append(f"{label}: scoring at {rates['score_tflops'] / rates['update_tflops']:.2f} of the "
                             f"update's rate, {r['score_s'] / r['update_s']:.2f}x its time")
    lines.append("\nSteady figures: the median over the steps after the first. update: from the end of scoring to "
                 "the end of the optimizer step, device synchronised. peak: the largest steady step's (AdamW's state "
                 "resident); predicted: oar.experiment.memory_plan's (one process, no vLLM, without its CUDA-context "
                 "reserve); on CPU the peak is the process's resident memory, libraries included, and not comparable. "
                 "paper: the paper's step time over GRPO's. planned: oar.experiment.cost_plan with "
                 f"{args.calibration_label}. TFLOP/s: the cost plan's FLOPs of the phase (oar.experiment.cost_model, "
                 "at the row's prompt and completion lengths) over its measured seconds.")
    if goals:
        lines += ["", "Scoring against the update (the same responses): " + "; ".join(goals) + "."]
    if said:
        lines += ["", "Budget: " + "; ".join(said) + "."]
    profiles = {f"{r['process']} ({r['profiled_tokens']:,} tokens)": r["profile"] for r in results.values()
                if "profile" in r}
    profiles |= {f"{name}, steady (the last step's call repeated)": r["steady_profile"] for name, r in results.items()
                 if "steady_profile" in r}
    if profiles:
        lines += ["", "| scoring call profiled (first step) | s | device busy s | model calls | synchronisations "
                  "| kernel launches | launches / call | top operators (share of "
                  + ("device" if device != "CPU" else "CPU") + " time) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, p in profiles.items():
            top = ", ".join(f"{t['op']} {t['share']:.0%}" for t in p["top"][:5])
            launches = "n/a" if p["kernel_launches"] is None else f"{p['kernel_launches']}"
            per = "n/a" if p["launches_per_call"] is None else f"{p['launches_per_call']:.0f}"
            busy = "n/a" if p.get("device_s") is None else f"{p['device_s']:.3g}"
            lines.append(f"| {name} | {p['seconds']:.3g} | {busy} | {p['model_calls']} | {p['synchronisations']} "
                         f"({', '.join(f'{k.split(chr(58))[-1]} {v}' for k, v in p['by_op'].items())}) | {launches} | "
                         f"{per} | {top} |")
        lines.append("\nSynchronisations: the operators that can make the host wait for the device (aten::item, "
                     "aten::_local_scalar_dense, aten::nonzero), on host and device tensors alike: an upper bound "
                     "(the trainer's probe building reads host copies of the batch's ids).")
    if evaluations:
        lines += ["", "| evaluation backend | load s | generate s | tokens | tokens / s |", "|---|---|---|---|---|"]
        for backend, e in evaluations.items():
            if e is None:
                lines.append(f"| {backend} | not installed | | | |")
            else:
                lines.append(f"| {backend} | {e['load_s']:.0f} | {e['seconds']:.1f} | {e['tokens']} | "
                             f"{e['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def _tflops(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def default_rows(args, oar: dict) -> list[Row]:
    """One row per method at ``--response-tokens``. With an exact OAR-P row asked at another length, exact
    OAR-P runs both in one process: its first steps at the shorter length (step 1 the warm-up), then one
    step at the longer, whose scoring, update and peak are steady and whose generation is marked as the
    first at that length (GRPO's and OAR-G's rows time that generation)."""
    rows = []
    for method in args.methods:
        window = oar["window_tokens"] if method == "oar_p" else 0
        lengths = [args.response_tokens] * args.steps
        short = args.exact_oar_p_tokens
        if method == "oar_p" and short and short != args.response_tokens:
            if window:
                rows.append(Row("oar_p", [short] * args.steps, 0))
            else:
                lengths = [short] * args.steps + [args.response_tokens]
        rows.append(Row(method, lengths, window))
        if args.attention_ab and method != "grpo":
            # the same scorer with the other attention kernels, at its first length only (its warm-up
            # and steady steps): scoring time against scoring time on one machine
            other = next(c for c in ("no_cudnn", "torch_default") if c != oar["scoring_attention"])
            rows.append(Row(method, [lengths[0]] * args.steps, window, attention=other))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "paper.yaml",
                        help="workflow config whose scorer settings the check runs (its model of this shape)")
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--exact-oar-p-tokens", type=int, default=256,
                        help="also an exact OAR-P row at this length (0: none)")
    parser.add_argument("--batch", type=int, default=8, help="completions per step (per process)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="steps per row; step 1 is left out of the steady figures")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="weights: auto = bfloat16 on CUDA (with bf16 autocast), float32 on CPU")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    for key, kind in (("chunk_tokens", int), ("grad_chunk_tokens", int), ("probe", str), ("span_tokens", int),
                      ("window_tokens", int), ("noise_sigma", float), ("scoring_attention", str),
                      ("grad_prompt", str)):
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind,
                            help=f"must agree with the config's oar.{key} (default: the config's)")
    parser.add_argument("--budget-s", type=float,
                        help="seconds the whole check may take: rows are planned, sized and skipped to fit")
    parser.add_argument("--calibration", nargs="+", type=Path,
                        help="calibration.json files the plan's rates come from "
                             "(default: bench/calibration/h200-2026-11-no-cudnn, h200-2026-11-generate-no-cudnn and "
                             "h200-2026-11-inline)")
    parser.add_argument("--attention-ab", action="store_true",
                        help="also each scorer with the other attention kernels of oar.scoring_attention "
                             "(no_cudnn / torch_default), at its first length")
    parser.add_argument("--try-beyond-plan", action="store_true",
                        help="the last row then also runs the longer lengths the budget dropped from it, in "
                             "whatever time is left (the plan's rates can be too slow for a changed scorer); "
                             "one cut off at the end of the budget is reported as not finished, not an error")
    parser.add_argument("--profile-steady", nargs="+", default=[], choices=METHODS[1:], metavar="SCORER",
                        help="also profile these scorers' last scoring call, repeated warm on the same batch after "
                             "its timed call (left out of the step's timing): oar_g, oar_p")
    parser.add_argument("--plan-only", action="store_true", help="print the plan and stop")
    parser.add_argument("--eval", action="store_true", help="also time the evaluation backends")
    parser.add_argument("--eval-batch", type=int, default=32, help="prompts in the evaluation timing")
    add_threads(parser, 1)
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        help="default: cuda, cpu for --shape tiny; cuda without a CUDA device is an error")
    parser.add_argument("--work", type=Path, default=Path("results/bench/gpu_check"))
    add_out(parser, "Markdown table to write (also gpu_check.md in --work)", type=Path)
    parser.add_argument("--one-method", nargs=2, metavar=("SETTINGS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_method:
        spec = json.loads(args.one_method[0])
        train_one(spec["settings"], Path(args.one_method[1]), spec["lengths"], spec.get("profile", True),
                  spec.get("profile_steady", False))
        return
    if args.batch % args.num_generations:
        parser.error("--batch must be a multiple of --num-generations")
    if args.steps < MIN_STEPS:
        parser.error(f"--steps must be >= {MIN_STEPS}: the first step is warm-up, left out of the steady figures")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error("--budget-s must be > 0")
    try:
        oar, where = scorer_settings(args.config, args.shape, {k: getattr(args, k) for k in OAR_KEYS})
    except CheckError as error:
        parser.error(str(error))
    from oar.experiment.calibration import calibrate
    from oar.experiment.hardware import hardware
    from oar.experiment.memory_plan import PlanError

    calibration = args.calibration or list(CALIBRATION)
    try:
        hw = calibrate(calibration, hardware("h200"))
    except PlanError as error:
        parser.error(str(error))
    folders = [str(p.parent.relative_to(REPO)) for p in CALIBRATION]
    args.calibration_label = (f"the rates of {hw.measured}" if args.calibration else
                              f"the rates of {', '.join(folders[:-1])} and {folders[-1]} ({hw.name})")
    shape = check_shape(args.shape)
    args.flop_shape, args.oar = shape, oar
    try:
        planned, said = plan_rows(default_rows(args, oar), shape, hw, oar, args, args.budget_s)
    except CheckError as error:
        parser.error(str(error))
    total = BUILD_S + sum(r.planned_s for r in planned)
    print(f"Plan ({args.calibration_label}; {ROW_OVERHEAD_S:.0f} s a row to start, load and set up; first step "
          "at the first step's measured decode rate):", file=sys.stderr)
    for r in planned:
        print(f"  {r.method}" + (f" (window {r.window})" if r.window else "")
              + (f" ({r.attention} attention)" if r.attention else "") + f": steps of {r.lengths} tokens, "
              f"{r.planned_s:,.0f} s" + (f" ({r.note})" if r.note else ""), file=sys.stderr)
    for line in said:
        if "skipped" in line:
            print(f"  {line}", file=sys.stderr)
    if args.try_beyond_plan and planned and planned[-1].wanted:
        last = planned[-1]
        last.try_dropped_lengths()
        if last.tried:
            said.append(f"{last.label(last.tried[-1])}: then run beyond the plan, in the time the budget has left")
            print(f"  {last.method}: then steps of {last.tried} tokens beyond the plan, in the time the budget "
                  "has left (a step cut off at its end is reported as not finished)", file=sys.stderr)
    print(f"  total {total:,.0f} s" + (f" of a {args.budget_s:,.0f} s budget" if args.budget_s else ""),
          file=sys.stderr, flush=True)
    if args.plan_only:
        return

    device_kind = args.device or ("cpu" if args.shape == "tiny" else "cuda")
    if device_kind == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda (the default for --shape {args.shape}): no CUDA device is visible "
                     "(torch.cuda.is_available() is False); run it on a GPU node, or --shape tiny --device cpu")
    if device_kind == "cpu" and torch.cuda.is_available():
        parser.error("--device cpu on a machine with CUDA: the trainer would use the GPU; hide it with "
                     "CUDA_VISIBLE_DEVICES=''")
    on_gpu = device_kind == "cuda"
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    started = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    for stale in ("calibration.json", "gpu_check.md"):  # a new run's files replace an old run's, never mix
        (args.work / stale).unlink(missing_ok=True)
    if args.out:
        args.out.unlink(missing_ok=True)
    model = build_model_folder(args.shape, args.work / f"model-{args.shape}",
                               256 + max(max(r.run_lengths) for r in planned))
    build_s = time.perf_counter() - started
    problems = write_problems(args.work / "problems.jsonl",
                              max(args.batch * max(len(r.run_lengths) for r in planned), args.eval_batch))
    device = torch.cuda.get_device_name() if on_gpu else "CPU"
    predicted = {name: predicted_peak_mib(args, model, dtype, oar, r.method, tokens, r.window)
                 for r in planned for name, tokens in r.parts()}
    results: dict[str, dict] = {}
    evaluations: dict[str, dict | None] = {}

    def write(complete: bool) -> str:
        text = report(args, device, dtype, oar, where, results, planned, predicted, build_s, said, evaluations,
                      complete)
        record = calibration_record(args, model, device, dtype, oar, results, evaluations, planned, complete)
        atomic_write_text(args.work / "gpu_check.md", text)
        if args.out:
            atomic_write_text(args.out, text)
        # last: a calibration.json on disk means the tables of the same rows are there too
        atomic_write_text(args.work / "calibration.json", json.dumps(record, indent=1) + "\n")
        return text

    def row_finished(row: Row) -> bool:  # every planned length has its result (a tried one may be missing)
        return all(name in results for name, _ in row.planned_parts())

    def finished() -> bool:
        return all(row_finished(r) for r in planned)

    # an outer time limit ends the check as its own budget would: the running row's finished lengths kept,
    # the files written (partial), then exit 143 (128 + SIGTERM)
    signal.signal(signal.SIGTERM, _raise_terminated)
    for row in planned:
        left = None if args.budget_s is None else args.budget_s - (time.perf_counter() - started)
        try:
            results.update(time_row(args, row, model, problems, dtype, oar, None if left is None else max(left, 1.0)))
        except RowCutOff as cut:
            results.update(cut.results)
            if cut.terminated:
                said.append(f"stopped by SIGTERM (an outer time limit) in {row.name}, {len(cut.results)} of its "
                            "lengths finished; the rows after it did not run")
                print(f"{row.name}: {said[-1]}", file=sys.stderr)
                write(complete=False)
                sys.exit(128 + signal.SIGTERM)
            print(f"{row.name}: cut off at the end of the budget, {len(cut.results)} of its lengths finished",
                  file=sys.stderr)
            if row.tried and row_finished(row):
                said.append(f"{row.label(row.tried[-1])}: tried beyond the plan, not finished in the "
                            f"{max(left, 0):,.0f} s left for its process")
            write(complete=False)
            break
        write(complete=False)
    if args.eval:
        for backend in ("transformers", "vllm"):
            evaluations[backend] = (None if backend == "vllm" and importlib.util.find_spec("vllm") is None
                                    else time_evaluation(backend, model, args, dtype))
    text = write(complete=finished())
    print(text)
    print(f"outputs: {args.work / 'gpu_check.md'}" + (f", {args.out}" if args.out else "")
          + f"; calibration for python -m oar.experiment.cost_plan --calibration: {args.work / 'calibration.json'}; "
          f"each row's metrics, steps and profile under {args.work}/<row>/; {time.perf_counter() - started:.0f} s")
    if not finished():
        sys.exit(1)


if __name__ == "__main__":
    main()
