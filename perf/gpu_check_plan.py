"""The GPU preflight's plan (``perf/gpu_check.py``): what it measures, read from the workflow config, and
how long each row's process takes, by ``oar.planning.cost_plan`` calibrated by the H200's rows, so that
the rows fit a time budget.

It measures the paper config's settings where they fit one GPU: the scorer settings of the shape's model,
gradient checkpointing as the config sets it, and the model's per-device micro-batch (the largest that
the memory plan fits on the GPU where it does not, said so). Rows run shape by shape, what the paper plan
extrapolates most first: the 7B rows, exact OAR-P first (no row has measured it, and it is most of the
paper run's GPU-hours), then, in the time the budget leaves, the 1.5B rows.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

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

# ------------------------------------------------------------------------------- scorer settings

OAR_KEYS = ("chunk_tokens", "grad_chunk_tokens", "probe", "span_tokens", "window_tokens", "noise_sigma",
            "scoring_attention", "grad_prompt")
TRAINER_KEYS = ("per_device_train_batch_size", "gradient_checkpointing", "num_generations")


class CheckError(ValueError):
    """A setting the check cannot run with; the message names the option, key or field."""


def config_settings(config_path: Path, shape: str, options: dict) -> tuple[dict, dict, dict]:
    """(the scorer settings, the trainer's, where each came from) of the config's model whose source has
    ``shape``'s layer shapes: ``training.oar`` and ``training.trainer`` with that model's ``oar`` and
    ``trainer`` over them, config/schema.yaml's defaults where the config is silent. A scorer option given on
    the command line must agree. Read with PyYAML alone: the preflight's machine may have no jsonschema.
    The one place the check reads the config."""
    import yaml

    from oar.planning.shapes import HUB_SHAPES

    try:
        config = yaml.safe_load(Path(config_path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise CheckError(f"--config {config_path}: {error}") from error
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())["$defs"]
    found, where = {}, {}
    for section, keys in (("oar", OAR_KEYS), ("trainer", TRAINER_KEYS)):
        given = (config.get("training") or {}).get(section) or {}
        values = {k: v.get("default") for k, v in schema[section]["properties"].items()} | given
        from_ = {k: f"training.{section}.{k}" if k in given
                 else f"config/schema.yaml's default of training.{section}.{k}"
                 for k in values}
        for name, spec in (config.get("models") or {}).items():
            if spec.get("source") == shape or HUB_SHAPES.get(spec.get("source")) == shape:
                for key, value in (spec.get(section) or {}).items():
                    values[key], from_[key] = value, f"models.{name}.{section}.{key}"
                break
        found[section] = {k: values.get(k) for k in keys}
        where |= {k: from_.get(k, k) for k in keys}
    for key, value in options.items():
        if value is not None and found["oar"].get(key) != value:
            raise CheckError(f"--{key.replace('_', '-')} {value} contradicts {where.get(key, key)} = "
                             f"{found['oar'].get(key)} in {config_path} (the check measures the config's settings: "
                             "change the config, or leave the option out)")
    return found["oar"], found["trainer"], where


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
# a row's process beyond its steps on the H200 (start, imports, weights, trainer): 23 s at 1.5B, 21 s at 7B
ROW_OVERHEAD_S = 23.0
# a shape's model folder, built once: 8 s at 1.5B on the H200; 7B's 5x the parameters to write, scaled (not
# measured)
BUILD_S = {"qwen2.5-1.5b": 8.0, "qwen2.5-7b": 40.0, "tiny": 1.0}
# The profiled first scoring call, measured on the H200 (1.5B shape, the paper config's 8,192-token
# forwards, perf/calibration/h200-2026-11-generate-no-cudnn): the call itself ran 2.7x its unprofiled
# steady time for exact OAR-P (256 tokens, 6.97 s against 2.59) and 2.5x for OAR-G (1,024 tokens, 1.40 s
# against 0.565); the profiler then spent about 38 s (exact OAR-P, 39 model calls) and 9 s (OAR-G, 5 calls)
# reading the trace: per layer a model call, 35 and 63 ms (OAR-G's calls carry their backward).
PROFILE_FACTOR = {"oar_p": 2.7, "oar_g": 2.5}
PROFILE_S_PER_LAYER_CALL = {"oar_p": 0.035, "oar_g": 0.063}
# the H200's rows of the scorers as they run now: at 2,048- and 8,192-token scoring forwards (two forward
# sizes fit the scorers' FLOP rate), OAR-G's over an inline prompt in evened micro-batches (the paper
# config's), and the 7B shape's GRPO and OAR-G (the cost plan's calibration, docs/cost.md)
CALIBRATION = tuple(REPO / "perf" / "calibration" / name / "calibration.json"
                    for name in ("h200-2026-11-no-cudnn", "h200-2026-11-generate-no-cudnn", "h200-2026-11-inline-even",
                                 "h200-2026-11-generate-no-cudnn/qwen2.5-7b", "h200-2026-11-8192/qwen2.5-7b"))
MIN_STEPS, MIN_TOKENS = 2, 256
# The check's order, most of the paper plan's extrapolated GPU-hours first: the 7B shape's rows before the
# 1.5B shape's (gpu_check.py's default --shape), and at 7B exact OAR-P's row first. Exact OAR-P's 7B scoring
# is most of the central plan's GPU-hours and no row has measured it; none of the rows has run at the paper
# config's micro-batches and gradient checkpointing. Each row's results are written as soon as it finishes, so
# a check cut short keeps the rows that matter most.
SHAPE_ORDER = ("qwen2.5-7b", "qwen2.5-1.5b")
OAR_P_FIRST = ("qwen2.5-7b",)


def check_shape(shape: str):
    from transformers import Qwen2Config

    from oar.planning.shapes import shape_of

    spec = dict(SHAPES[shape])
    if spec["vocab_size"] is None:
        from oar.models.tiny import build_tiny_tokenizer

        spec["vocab_size"] = len(build_tiny_tokenizer())
    return shape_of(Qwen2Config(**spec))


def row_seconds(row: Row, args) -> float:
    """The row's process planned by oar.planning.cost_band for its settings (``args`` of its shape: see
    ``shape_args``): start-up, then each step; a step at a length the process has not generated yet is
    planned at the first step's decode rate. No phase faster than any row ran."""
    from oar.planning.cost_band import Knobs, rated_step
    from oar.planning.workload import Band, Workload

    every = Workload(Band(1.0, 1.0, 1.0), Band(1.0, 1.0, 1.0), ())  # every response scored, at its length
    total, seen = ROW_OVERHEAD_S, set()
    for i, tokens in enumerate(row.lengths):
        settings = {"run_id": "check", "method": row.method,
                    "oar": {**args.oar, "window_tokens": row.window, "score_all": True,
                            "scoring_attention": row.attention or args.oar["scoring_attention"]},
                    "trainer": {"max_completion_length": tokens, "per_device_train_batch_size": args.batch,
                                "gradient_accumulation_steps": 1, "num_generations": args.num_generations,
                                "gradient_checkpointing": args.gradient_checkpointing, "use_vllm": False,
                                "beta": 0.0}}
        step = rated_step(args.rates, {"check": every}, Knobs(rank_wait=False), PROMPT_TOKENS, "check", args.flop_shape,
                          settings, 1, first_step=tokens not in seen)
        profiled = row.method != "grpo" and not row.attention
        layers = args.flop_shape.layers
        if profiled and i == 0:  # the profiled scoring call, and its trace
            total += ((PROFILE_FACTOR[row.method] - 1) * step.scoring
                      + PROFILE_S_PER_LAYER_CALL[row.method] * layers * step.scoring_calls)
        if profiled and row.method in args.profile_steady and i == len(row.lengths) - 1:  # the repeat, profiled
            total += (PROFILE_FACTOR[row.method] * step.scoring
                      + PROFILE_S_PER_LAYER_CALL[row.method] * layers * step.scoring_calls)
        total += step.step
        seen.add(tokens)
    return total


def plan_rows(rows: list[Row], args, budget: float | None, first: bool = True) -> tuple[list[Row], list[str]]:
    """Each row's planned seconds; with a budget, the rows that fit what is left (after the shape's model
    is built), a row that does not losing steps (down to two), then its last length, then halving its
    lengths (down to 256 tokens) until it fits, else skipped. The ``first`` shape must fit one row.
    Lines saying what was changed or skipped come back with the rows."""
    kept, said = [], []
    build = BUILD_S.get(args.shape, BUILD_S["qwen2.5-7b"])
    left = None if budget is None else budget - build
    for row in rows:
        row.planned_s = row_seconds(row, args)
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
            row.planned_s = row_seconds(row, args)
        if left is None or row.planned_s <= left:
            if row.lengths != wanted:
                row.note = f"sized from steps of {wanted} tokens to {row.lengths} to fit the budget"
                said.append(f"{row.label(wanted[-1])}: {row.note}")
            kept.append(row)
            left = None if left is None else left - row.planned_s
        else:
            said.append(f"{row.label(wanted[-1])}: skipped, planned {row.planned_s:,.0f} s even at "
                        f"{row.lengths} tokens with {max(left, 0):,.0f} s of the budget left")
    if budget is not None and not kept and first:
        raise CheckError(f"--budget-s {budget:g}: too small for one row ({said[0]}); the smallest plan is "
                         f"{build + rows[0].planned_s:,.0f} s")
    return kept, said


def default_rows(args) -> list[Row]:
    """One row per method at ``--response-tokens``. With an exact OAR-P row asked at another length, exact
    OAR-P runs both in one process: its first steps at the shorter length (step 1 the warm-up), then one
    step at the longer, whose scoring, update and peak are steady and whose generation is marked as the
    first at that length (GRPO's and OAR-G's rows time that generation). The 7B shape runs exact OAR-P first
    (``OAR_P_FIRST``); the others GRPO first, so that a check ending on the 1.5B shape ends on exact OAR-P,
    whose dropped length ``--try-beyond-plan`` gives back."""
    rows = []
    methods = sorted(args.methods, key=lambda m: m != "oar_p") if args.shape in OAR_P_FIRST else args.methods
    for method in methods:
        window = args.oar["window_tokens"] if method == "oar_p" else 0
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
            other = next(c for c in ("no_cudnn", "torch_default") if c != args.oar["scoring_attention"])
            rows.append(Row(method, [lengths[0]] * args.steps, window, attention=other))
    return rows


def predicted_peak_mib(shape, batch: int, checkpointing: bool, dtype: str, oar: dict, method: str, tokens: int,
                       window: int) -> float:
    """oar.planning.memory_plan's peak (the largest of the phases) for one row's settings, one process."""
    from oar.planning import memory_plan

    settings = {"model_dtype": dtype, "oar": {"chunk_tokens": oar["chunk_tokens"], "window_tokens": window,
                                             "grad_chunk_tokens": oar["grad_chunk_tokens"],
                                             "span_tokens": oar["span_tokens"]},
                "trainer": {"per_device_train_batch_size": batch, "max_completion_length": tokens,
                            "gradient_checkpointing": checkpointing, "use_vllm": False,
                            "gradient_accumulation_steps": 1, "bf16": "auto" if dtype != "float32" else False}}
    phases = memory_plan.plan_model("check", {"launcher": "python"}, settings, shape, PROMPT_TOKENS,
                                    methods=[method] if method != "grpo" else [], scored=batch)
    reserve = memory_plan.RESERVE_GB * memory_plan.GB
    return max((sum(p.parts.values()) - reserve) / 2**20 for p in phases)


def fitting_batch(args, gpu_gib: float, dtype: str) -> tuple[int, str]:
    """The config's per-device micro-batch where the memory plan fits every row of ``args.methods`` at
    ``--response-tokens`` on ``gpu_gib`` GiB, else the largest multiple of G that does (halving), and a
    line saying so ("" when the config's fits)."""
    def peak(batch: int) -> float:
        return max(predicted_peak_mib(args.flop_shape, batch, args.gradient_checkpointing, dtype, args.oar, method,
                                      args.response_tokens, args.oar["window_tokens"] if method == "oar_p" else 0)
                   for method in args.methods)

    wanted = batch = args.batch
    while batch > args.num_generations and peak(batch) > gpu_gib * 1024:
        batch = max(args.num_generations, batch // 2 // args.num_generations * args.num_generations)
    if batch == wanted:
        return batch, ""
    fits = "" if peak(batch) <= gpu_gib * 1024 else f" (nor does {batch}, one group: it may not run)"
    return batch, (f"{batch} completions a step, not the config's per-device micro-batch of {wanted} "
                   f"({args.where['per_device_train_batch_size']}): the memory plan puts {wanted} at "
                   f"{peak(wanted) / 1024:,.1f} GiB, more than the GPU's {gpu_gib:,.0f}{fits}")


def shape_args(args, shape: str, first: bool):
    """A copy of the check's options for one shape: the config's settings for its model (scorer settings,
    gradient checkpointing and per-device micro-batch unless given), its FLOP shape and rates, its folder."""
    from oar.planning.cost_band import Rates
    from oar.planning.hardware import hardware

    options = {k: getattr(args, k) for k in OAR_KEYS}
    oar, trainer, where = config_settings(args.config, shape, options)
    sized = argparse.Namespace(**vars(args))
    sized.shape, sized.first_shape, sized.oar, sized.where, sized.flop_shape = (shape, first, oar, where,
                                                                                check_shape(shape))
    sized.work = args.work if first else args.work / shape
    sized.num_generations = args.num_generations or trainer["num_generations"]
    sized.batch = args.batch or trainer["per_device_train_batch_size"]
    sized.gradient_checkpointing = (trainer["gradient_checkpointing"] if args.gradient_checkpointing is None
                                    else args.gradient_checkpointing)
    sized.settings_said = [f"{what} {value} ({where[key]})" if given is None else f"{what} {value} (--{option})"
                           for what, key, value, given, option in
                           (("completions a step", "per_device_train_batch_size", sized.batch, args.batch, "batch"),
                            ("gradient checkpointing", "gradient_checkpointing", sized.gradient_checkpointing,
                             args.gradient_checkpointing, "gradient-checkpointing"),
                            ("G", "num_generations", sized.num_generations, args.num_generations, "num-generations"))]
    if sized.batch % sized.num_generations:
        raise CheckError(f"{shape}: {sized.batch} completions a step is not a multiple of G = {sized.num_generations}")
    if not hasattr(args, "rates_cache"):
        args.rates_cache = Rates.calibrated(args.calibration or list(CALIBRATION), hardware("h200"))
    sized.rates = args.rates_cache
    return sized
