"""GPU-hours of a config's training runs, its targets and the whole DAG at one point: one hardware figure and
one workload. The band (``oar.planning.cost_band``) plans a config at several such points; ``python -m
oar.planning.cost_plan`` prints it.

One training step has three phases, generation, scoring and update; ``oar.planning.cost_model``
counts each one's work from the model's shape and turns it into time by a hardware figure
(``oar.planning.hardware``): peak x utilisation and an assumed per-layer call cost, or the rates and
fixed costs measured on a GPU by ``perf/gpu_check.py`` (its ``calibration.json``;
``oar.planning.calibration``), each applied to what it measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from oar.experiment.runs import GROUP_TABLES
from oar.method.names import scorer_of
from oar.planning.cost_model import (
    SCHEDULE,
    Assumptions,
    calibrated_scorer,
    generation_work,
    reasoning_probe,
    scaled,
    scoring_work,
    update_work,
)
from oar.planning.hardware import Hardware
from oar.planning.memory_plan import PlanError, model_config
from oar.planning.shapes import Shape, shape_of

GB = 1e9


# --------------------------------------------------------------------------------------- plan


@dataclass
class StepPlan:
    """Seconds of one training step per phase, on one process (all processes run in parallel)."""

    generation: float
    scoring: float
    update: float
    processes: int  # GPUs a run holds
    scoring_calls: float = 0.0  # the scoring phase's model calls (forwards and OAR-G's backwards)
    scoring_flops: float = 0.0
    update_flops: float = 0.0
    notes: tuple = ()  # what a rated plan says of its phases (oar.planning.cost_band)

    @property
    def step(self) -> float:
        return self.generation + self.scoring + self.update


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
    scorer = scorer_of(method) or method  # a rescue or a dose costs its scorer's scoring; GRPO none
    score = scoring_work(shape, scorer, oar, prompt, reasoning, probe, keep, scored, trainer["num_generations"],
                         schedule)
    call_s = hw.scorer_call(calibrated_scorer(scorer, oar.get("grad_prompt")), schedule)
    if call_s is None:  # OAR-G over an inline prompt, calibrated by cached-prompt rows only: their call cost
        call_s = hw.scorer_call(calibrated_scorer(scorer), schedule)
    scoring = score.seconds(hw, shape.layers, call_s=call_s, flops=hw.scoring_flops)

    extra = int(bool(trainer.get("use_vllm")) and trainer.get("vllm_importance_sampling_correction", True))
    extra += int(float(trainer.get("beta", 0.0)) != 0.0)
    micro = trainer["per_device_train_batch_size"]
    upd = scaled(update_work(shape, prompt, completion, micro, bool(trainer.get("gradient_checkpointing")), extra),
                 sequences)
    if hw.update_fixed_s is not None:  # measured: a fixed time per micro-batch stands for its calls' cost
        upd.calls, upd.fixed_s = 0.0, hw.update_fixed_s * sequences / micro
    return StepPlan(generation, scoring, upd.seconds(hw, shape.layers), processes, score.calls, score.flops, upd.flops)


# ---------------------------------------------------------------------------------- the config


EVAL_PROBLEMS = {"gsm8k_test": 1319, "math500": 500, "aime24": 30, "aime25": 30, "amc23": 40}
# the registry's targets and their run groups, in its order; the controls' row reads "controls table"
TARGETS = {("controls table" if target == "controls" else target): group for target, group in GROUP_TABLES.items()}


def _processes(spec: Mapping) -> int:
    from oar.planning.memory_plan import layout_of

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
                schedule: str = SCHEDULE, stepper=None) -> Plan:
    """Every run's step and GPU-hours and every evaluation's GPU-hours. ``stepper(model, shape, settings,
    gpus)``, when given, plans a run's step instead of ``step_plan`` on ``hw`` and ``assume`` (a rated
    plan: per-model workloads, calibrations by shape, capped rates; ``oar.planning.cost_band``)."""
    from oar.data.catalogue import DATASETS
    from oar.experiment.runs import Registry, model_of
    from oar.planning.memory_plan import _trainer_keys

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    shapes = {name: shape_of(model_config(spec["source"], results_dir or registry.model_dir(name)))
              for name, spec in config["models"].items()
              if any(model_of(r) == name for r in registry.runs)}
    runs, over = {}, []
    for run, settings in registry.runs.items():
        model = model_of(run)
        gpus = _processes(config["models"][model])
        step = (stepper(model, shapes[model], settings, gpus) if stepper else
                step_plan(shapes[model], settings, hw, assume, gpus, schedule))
        steps = settings["trainer"]["max_steps"]
        hours = step.step * steps / 3600
        res = registry.resources.resource_set("train", model)
        allowed = res["runtime"] / 60 * (res.get("retries", 0) + 1)
        if hours > allowed:
            key = registry.resources.resource_key("train", model, "runtime")
            retries_key = registry.resources.resource_key("train", model, "retries").replace("resources.default.",
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
                ev = registry.jobs.eval_settings(model, bench)
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


def hardware_line(hw: Hardware) -> str:
    """The rates a hardware times work at, and where they come from."""
    if hw.measured:
        return (f"measured by {hw.measured}: sustained {hw.flops / 1e12:.3g} TFLOP/s (the update's, fitted with "
                f"{(hw.update_fixed_s or 0) * 1e3:.0f} ms fixed per update micro-batch), an eager forward call "
                + (f"{hw.call_s * 1e3:.1f} ms fixed" if hw.call_s is not None else
                   f"{hw.layer_overhead_s * 1e6:.0f} us per layer (assumed)")
                + f", a {hw.decode_backend} decode step {hw.decode_step_s * 1e3:.1f} ms fixed (applied to "
                f"{hw.decode_backend} generation only); "
                + "".join(f"{m} {sched} scoring {sec * 1e3:.1f} ms a model call; "
                          for m, sched, sec in hw.scorer_call_s)
                + (f"scoring's FLOPs at {hw.scoring_flops / 1e12:.3g} TFLOP/s (fitted beside those costs); "
                   if hw.scoring_flops else "scoring's FLOPs at the update's rate; ")
                + f"decode {hw.bandwidth / 1e12:.2f} TB/s x {hw.bandwidth_util} (assumed) = "
                f"{hw.bytes_per_s / 1e12:.2f} TB/s; vLLM's calls {hw.layer_overhead_s * 1e6:.0f} us per layer "
                "(assumed)")
    return (f"{hw.peak_flops / 1e12:,.0f} TFLOP/s bf16 dense x MFU {hw.mfu} (assumed) = "
            f"{hw.flops / 1e12:,.0f} TFLOP/s; {hw.bandwidth / 1e12:.2f} TB/s x {hw.bandwidth_util} (assumed) = "
            f"{hw.bytes_per_s / 1e12:.2f} TB/s for decode; {hw.layer_overhead_s * 1e6:.0f} us per layer per "
            "forward call (assumed)")


def target_hours(plan: Plan) -> dict[str, tuple[int, float, float]]:
    """Per target, and ``all``: (training runs, training GPU-hours, evaluation GPU-hours)."""
    found = {}
    for target, group in TARGETS.items():
        if plan.groups.get(group):
            found[target] = (len(plan.groups[group]), sum(plan.runs[r][1] for r in plan.groups[group]),
                             _eval_hours(plan, [group]))
    found["all"] = (len(plan.runs), sum(v[1] for v in plan.runs.values()), _eval_hours(plan, plan.eval_groups))
    return found


def table(plan: Plan, rates: str | None = None, assumed: str | None = None) -> str:
    """The plan's tables: per run type, then per target. ``rates`` and ``assumed`` replace the sentences
    on the hardware's rates and the workload (a rated plan's, per model)."""
    hw, a = plan.hw, plan.assume
    assumed = assumed or (f"Assumed: mean prompt {a.prompt_tokens} tokens; completions at {a.completion_fill:.0%} of "
                          f"max_completion_length; {a.scored_share:.0%} of rows have advantage != 0 and are scored; "
                          f"{a.answer_tokens}-token answers.")
    lines = [
        f"Cost plan (planned, not measured) on {hw.name}, {hw.memory_gb:.0f} GB: {rates or hardware_line(hw)}. Scorers "
        f"on the {plan.schedule} schedule" + (" (oar.method.substitution's)" if plan.schedule == SCHEDULE else
                                              " (the scorers' earlier one)") + ".",
        f"{assumed} Evaluation: vLLM decode of problems x samples x max_new_tokens. "
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
    for target, (runs, train, ev) in target_hours(plan).items():
        name = "**all (total)**" if target == "all" else target
        total = f"**{train + ev:,.0f}**" if target == "all" else f"{train + ev:,.0f}"
        lines.append(f"| {name} | {runs} | {train:,.0f} | {ev:,.0f} | {total} |")
    return "\n".join(lines) + "\n"
