"""The cost plan as a band: GPU-hours low, central and high for every run, target and the whole DAG, the
table of what moves them, and the phases whose rates no row measured.

A plan rests on three things no shape tells (``oar.planning.gpu_hours`` times the work):

- the **workload** of each model's runs, the scored share and the completions' fill, each a band from
  measured sources (``oar.planning.workload``);
- the **rates**: assumed, or calibrated by ``perf/gpu_check.py`` rows, per model shape, carried to
  another Qwen2 shape by rule and never faster than any row ran (``oar.planning.rate_limits``);
- the **slowest rank**: a step of several processes waits for the one that scored most
  (``oar.planning.rank_wait``).

``low`` takes each workload's low end, ``central`` its central figure, ``high`` its high end and, for the
phases no row measured, the rate of the row most like them. The table of what moves it swings one of them
at a time from the central plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from oar.method.names import ADVANTAGE_RULES, BASELINE, MODEL_FREE_SCORERS, scorer_of
from oar.planning.cost_model import SCHEDULE, Assumptions, calibrated_scorer
from oar.planning.gpu_hours import Plan, StepPlan, hardware_line, plan_config, step_plan, table, target_hours
from oar.planning.hardware import Hardware
from oar.planning.rank_wait import slowest_rank_factor
from oar.planning.rate_limits import capped_seconds, carries, check_carry, measurements, verdict
from oar.planning.shapes import shape_name
from oar.planning.workload import Workload, model_workload

SCENARIOS = ("low", "central", "high")


@dataclass
class Rates:
    """The hardware a plan times each model's phases on: one assumed ``base``, or fits per model shape
    (``by_shape``) from calibration files, with every row's achieved rates (``found``)."""

    base: Hardware
    by_shape: dict = field(default_factory=dict)  # shape name -> fitted Hardware
    files: dict = field(default_factory=dict)  # shape name -> its files, joined
    found: list = field(default_factory=list)  # [Measurement]

    @classmethod
    def calibrated(cls, paths, base: Hardware) -> "Rates":
        from oar.planning.calibration import calibrate, calibrate_by_shape

        fits = calibrate_by_shape(paths, base, require_fit=False)
        if not any(hw for hw, _ in fits.values()):
            first = next(iter(fits.values()))[1]
            calibrate(first, base)  # stops naming the files without a GRPO row
        return cls(base, {name: hw for name, (hw, _) in fits.items() if hw is not None},
                   {name: ", ".join(str(p) for p in files) for name, (hw, files) in fits.items() if hw is not None},
                   measurements([p for _, files in fits.values() for p in files]))

    def primary(self) -> str:
        """The calibrated shape with the most rows: what another shape's phases carry from."""
        counts = {name: sum(m.shape == name for m in self.found) for name in self.by_shape}
        return max(counts, key=lambda name: (counts[name], name))

    def for_shape(self, shape: str) -> Hardware:
        if not self.by_shape:
            return self.base
        if shape in self.by_shape:
            return self.by_shape[shape]
        return self.by_shape[self.primary()]  # carried (check_carry has stopped a shape no rule carries to)

    def for_scorer(self, shape: str, scorer: str) -> Hardware:
        """The fit whose rows include ``scorer``'s: its own shape's, else another's (carried)."""
        own = self.for_shape(shape)
        if not self.by_shape or own.scorer_call(scorer, SCHEDULE) is not None:
            return own
        timed = [name for name, hw in self.by_shape.items() if hw.scorer_call(scorer, SCHEDULE) is not None
                 and carries(name, shape)]
        return self.by_shape[timed[0]] if timed else own


@dataclass(frozen=True)
class Knobs:
    """Which end of each band a plan takes: the workload's (``share``, ``fill``), the rates' (``rate``:
    ``central`` caps at the fastest row, ``high`` at the row most like the phase, ``uncapped`` the fit as
    it is) and whether multi-rank steps wait for the slowest rank."""

    share: str = "central"
    fill: str = "central"
    rate: str = "central"
    rank_wait: bool = True


def band_knobs(scenario: str) -> Knobs:
    return Knobs(scenario, scenario, "high" if scenario == "high" else "central")


def rated_step(rates: Rates, workloads: Mapping[str, Workload], knobs: Knobs, prompt_tokens: int, model: str, shape,
               settings: Mapping, gpus: int, schedule: str = SCHEDULE, first_step: bool = False) -> StepPlan:
    """One step of a run at ``knobs``' ends of its model's workload and its phases' rates (``first_step``:
    a process's first generation at its length, ``step_plan``'s)."""
    workload = workloads[model]
    assume = Assumptions(prompt_tokens=prompt_tokens, completion_fill=workload.completion_fill.scenario(knobs.fill),
                         scored_share=workload.scored_share.scenario(knobs.share))
    name = shape_name(shape)
    plan = step_plan(shape, settings, rates.for_shape(name), assume, gpus, schedule, first_step)
    trainer, oar = settings["trainer"], settings["oar"]
    scorer = scorer_of(settings["method"]) or settings["method"]
    scores = scorer != BASELINE and scorer not in MODEL_FREE_SCORERS and scorer not in ADVANTAGE_RULES
    key = calibrated_scorer(scorer, oar.get("grad_prompt")) if scores else ""
    scoring, update = plan.scoring, plan.update
    if scores and rates.for_scorer(name, key) is not rates.for_shape(name):  # the scorer timed at another shape
        scoring = step_plan(shape, settings, rates.for_scorer(name, key), assume, gpus, schedule).scoring
    notes = []
    if trainer.get("use_vllm"):
        notes.append(("generation", "vLLM's engine: assumed rates (no row timed it)", "", ""))
    if rates.found and knobs.rate != "uncapped":
        micro = trainer["per_device_train_batch_size"]
        batches = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"] / micro
        checkpointing = bool(trainer.get("gradient_checkpointing"))
        phases = [("update", "", plan.update_flops / batches, "grpo")]
        if scores and plan.scoring_calls:
            phases.append(("scoring", key, plan.scoring_flops / plan.scoring_calls, scorer))
        for kind, phase_scorer, work, method in phases:
            found = verdict(rates.found, kind, phase_scorer, name, work, checkpointing, gpus, method)
            if kind == "update":
                update = capped_seconds(update, plan.update_flops, found.cap(knobs.rate))
            else:
                scoring = capped_seconds(scoring, plan.scoring_flops, found.cap(knobs.rate))
            if found.extrapolated:
                phase = kind if kind == "update" else f"scoring ({phase_scorer})"
                rate = found.cap(knobs.rate)
                notes.append((phase, "; ".join(found.extrapolated),
                              f"at most {rate / 1e12:.0f} TFLOP/s" if rate else "", found.to_measure))
    if knobs.rank_wait and gpus > 1 and scoring and not oar.get("score_all"):
        groups = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"] // trainer[
            "num_generations"]
        scoring *= slowest_rank_factor(max(1, groups), assume.scored_share, gpus)
    return dataclasses.replace(plan, scoring=scoring, update=update, notes=tuple(notes))


def workloads_of(config: Mapping, overrides: Mapping | None = None) -> dict[str, Workload]:
    """Each planned model's workload: ``overrides`` (model -> Workload, e.g. measured) where given, else its
    sources' (``oar.planning.workload.model_workload``) at its settings."""
    from oar.experiment.runs import Registry, model_of
    from oar.planning.memory_plan import _trainer_keys

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    found = {}
    for run, settings in registry.runs.items():
        model = model_of(run)
        if model in found:
            continue
        if overrides and model in overrides:
            found[model] = overrides[model]
            continue
        trainer = settings["trainer"]
        found[model] = model_workload(config["models"][model]["source"], trainer["max_completion_length"],
                                      trainer["max_steps"], trainer["num_generations"])
    return found


def planned_shapes(config: Mapping, results_dir: str | None = None) -> dict[str, str]:
    """model -> shape name of every model the config trains."""
    from oar.experiment.runs import Registry, model_of
    from oar.planning.memory_plan import _trainer_keys, model_config
    from oar.planning.shapes import shape_of

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    trained = {model_of(r) for r in registry.runs}
    return {name: shape_name(shape_of(model_config(spec["source"], results_dir or registry.model_dir(name))))
            for name, spec in config["models"].items() if name in trained}


@dataclass
class BandPlans:
    """The plans of a band and of its swings (one knob at a time from the central plan)."""

    plans: dict  # label -> Plan: "low", "central", "high", and the swings
    workloads: dict
    rates: Rates


SWINGS = {  # the table of what moves it: (label, knobs at one end, knobs at the other)
    "scored share": (Knobs(share="low"), Knobs(share="high")),
    "completion fill": (Knobs(fill="low"), Knobs(fill="high")),
    "rate of the phases no row measured": (Knobs(), Knobs(rate="high")),
    "the slowest rank's wait": (Knobs(rank_wait=False), Knobs()),
}


def plan_band(config: Mapping, rates: Rates, workloads: Mapping[str, Workload], prompt_tokens: int = 256,
              schedule: str = SCHEDULE, results_dir: str | None = None, swings: bool = True) -> BandPlans:
    if rates.by_shape:
        check_carry(rates.files, planned_shapes(config, results_dir))
    assume = Assumptions(prompt_tokens=prompt_tokens)

    def plan(knobs: Knobs) -> Plan:
        def stepper(model, shape, settings, gpus):
            return rated_step(rates, workloads, knobs, prompt_tokens, model, shape, settings, gpus, schedule)

        return plan_config(config, rates.base, assume, results_dir, schedule, stepper=stepper)

    plans = {scenario: plan(band_knobs(scenario)) for scenario in SCENARIOS}
    if swings:
        for label, (low, high) in SWINGS.items():
            for end, knobs in (("low", low), ("high", high)):
                plans[f"{label}: {end}"] = plans["central"] if knobs == Knobs() else plan(knobs)
        plans["ceiling"] = plan(Knobs(share="ceiling", fill="ceiling"))
    return BandPlans(plans, dict(workloads), rates)


# ------------------------------------------------------------------------------------------- report


def _total(plan: Plan) -> float:
    _, train, ev = target_hours(plan)["all"]
    return train + ev


def _ends(band: BandPlans, knobs: Knobs, workloads: Mapping[str, Workload]) -> str:
    """The figures a swing's end takes, per model."""
    if knobs.share != "central":
        return ", ".join(f"{m} {w.scored_share.scenario(knobs.share):.2f}" for m, w in workloads.items())
    if knobs.fill != "central":
        return ", ".join(f"{m} {w.completion_fill.scenario(knobs.fill):.2f}" for m, w in workloads.items())
    if knobs.rate == "high":
        return "each at the rate of the row most like it"
    if not knobs.rank_wait:
        return "none (the mean rank)"
    return "the central plan's"


def extrapolated_phases(plan: Plan) -> list[tuple]:
    """(model, phase, why, rate used, the row that would measure it, runs, GPU-hours of the phase), the most
    GPU-hours first, of every phase the plan's steps note."""
    found: dict[tuple, list] = {}
    for run, (kind, hours, step, steps) in plan.runs.items():
        model = run.split("/", 1)[0]
        for phase, why, rate, to_measure in step.notes:
            seconds = {"update": step.update, "generation": step.generation}.get(phase, step.scoring)
            entry = found.setdefault((model, phase, why, rate, to_measure), [0, 0.0])
            entry[0] += 1
            entry[1] += seconds * steps * step.processes / 3600
    return sorted(((*key, runs, hours) for key, (runs, hours) in found.items()), key=lambda row: -row[-1])


def report(band: BandPlans, config_path: str) -> str:
    """The band per target, what moves it, the workloads and their sources, the phases no row measured, and
    the central plan in detail."""
    from oar.planning.workload import describe

    plans, rates = band.plans, band.rates
    if rates.by_shape:
        rate_text = "; ".join(f"{shape}: {hardware_line(hw)}" for shape, hw in rates.by_shape.items())
        rate_text += (f". Other Qwen2 shapes carry the rates of {rates.primary()} (rule: rate_limits.CARRY); no phase "
                      "faster than any row ran")
    else:
        rate_text = hardware_line(rates.base)
    lines = [f"Cost plan of {config_path}: GPU-hours planned, not measured, as a band. Rates: {rate_text}.", "",
             "Workload, per model (low / central / high):"]
    lines += describe(band.workloads)
    lines += ["", "| target | training runs | low | central | high |", "|---|---:|---:|---:|---:|"]
    ends = {scenario: target_hours(plans[scenario]) for scenario in SCENARIOS}
    for target, (runs, _, _) in ends["central"].items():
        figures = [sum(ends[s][target][1:]) for s in SCENARIOS]
        cells = [f"**{f:,.0f}**" if target == "all" else f"{f:,.0f}" for f in figures]
        lines.append(f"| {'**all (total)**' if target == 'all' else target} | {runs} | " + " | ".join(cells) + " |")
    if "ceiling" in plans:
        central = _total(plans["central"])
        lines += ["", "What moves it (the whole DAG, GPU-hours; each line moves one thing from the central plan's "
                  f"{central:,.0f}):", "",
                  "| what | at one end | GPU-h | at the other | GPU-h |", "|---|---|---:|---|---:|"]
        for label, (low, high) in SWINGS.items():
            lines.append(f"| {label} | {_ends(band, low, band.workloads)} | {_total(plans[label + ': low']):,.0f} | "
                         f"{_ends(band, high, band.workloads)} | {_total(plans[label + ': high']):,.0f} |")
        lines.append(f"| the ceiling: every completion at its limit, every row scored | | | fill 1, share 1 | "
                     f"{_total(plans['ceiling']):,.0f} |")
        lines.append("\nNot in the band: the spread of lengths within a step (exact OAR-P's work grows as the mean "
                     "of R^2, the plan prices the square of the mean R: 1 + CV^2 more, +25% at a CV of 0.5; the "
                     "ceiling bounds it), and FSDP's collectives in the 7B updates (no row timed them).")
    phases = extrapolated_phases(plans["central"])
    if phases:
        lines += ["", "Phases no row measured (the central plan), the most GPU-hours first:", "",
                  "| model | phase | why | rate | runs | GPU-h | the row that would measure it |",
                  "|---|---|---|---|---:|---:|---|"]
        lines += [f"| {m} | {phase} | {why} | {rate} | {runs} | {hours:,.0f} | {to_measure} |"
                  for m, phase, why, rate, to_measure, runs, hours in phases]
    per_model = "; ".join(f"{m}: {w.completion_fill.central:.0%} of max_completion_length, "
                          f"{w.scored_share.central:.0%} of rows scored" for m, w in band.workloads.items())
    lines += ["", "The central plan:", "",
              table(plans["central"], rates=rate_text,
                    assumed=f"Central workload: {per_model}; mean prompt {plans['central'].assume.prompt_tokens} "
                            "tokens; multi-rank steps wait for the slowest rank.")]
    return "\n".join(lines)
