"""The dose-response (``runs.dose`` and ``analysis.dose_response``; config/studies/mechanism.yaml): a dose
method trained at several ratios of the last step's weight, and its declared trend test, read as the last
section of the mechanism table.
"""

from __future__ import annotations

import math

from oar.config_error import ConfigError
from oar.method.weight_transforms import reading
from oar.studies.registry import Study


def check(reg) -> None:
    """The dose runs (runs.dose: every dose method at every ratio, methods and ratios given together)
    and their declared trend test (analysis.dose_response: its runs planned, a mechanism table to be
    written into)."""
    spec = reg.config["runs"].get("dose") or {}
    if spec:
        for key in ("methods", "ratios"):
            if not spec.get(key):
                raise ConfigError(f"runs.dose.{key}", f"{spec.get(key)!r}: runs.dose needs its {key}, at least "
                                  "one (or leave runs.dose out)")
        doses = reading("final_step_ratio")  # the interventions that take a ratio (a user's registered one too)
        for m in spec["methods"]:
            if m not in doses:
                raise ConfigError("runs.dose.methods", f"{m!r} is not a dose method {list(doses)}")
        for r in spec["ratios"]:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
                raise ConfigError("runs.dose.ratios", f"{r!r} is not a ratio: a finite number above 0")
        if len({float(r) for r in spec["ratios"]}) != len(spec["ratios"]):
            raise ConfigError("runs.dose.ratios", f"{spec['ratios']} repeats a ratio")
    design = reg.config["analysis"].get("dose_response")
    if not design:
        return
    from oar.analysis.dose_response import check_design

    dose = {**spec, "models": reg.group_models(spec), "seeds": reg.group_seeds(spec)} if spec else {}
    problems = check_design(design, dose)
    if problems:
        raise ConfigError(*problems[0])
    if not reg.config["analysis"].get("mechanism"):
        raise ConfigError("analysis.dose_response", "its reading is a section of the mechanism table: "
                          "declare analysis.mechanism beside it")


def design(reg) -> dict | None:
    """analysis.dose_response with what its reading needs from runs.dose: the ratios, the seeds and
    each (ratio, seed)'s run id (ratio 1 of a dose of the truth gate is the truth gate's run). Its runs
    must be evaluated on the benchmark the reading reads (analysis.paired.benchmark)."""
    declared = reg.config["analysis"].get("dose_response")
    if not declared:
        return None
    spec = reg.config["runs"]["dose"]
    seeds = [int(s) for s in reg.group_seeds(spec)]
    ratios = [float(r) for r in spec["ratios"]]
    runs = [{"ratio": r, "seed": s, "run": reg.run_id(declared["model"], declared["method"], s, ratio=r)}
            for r in ratios for s in seeds]
    if reg.paired["benchmark"] not in reg.group_benchmarks("dose"):
        raise ConfigError("runs.dose.benchmarks", f"the dose-response reads final accuracy on "
                          f"{reg.paired['benchmark']!r} (analysis.paired.benchmark), which the dose runs are "
                          f"not evaluated on ({reg.group_benchmarks('dose')})")
    return {"alpha": 0.05, **declared, "ratios": ratios, "seeds": seeds, "runs": runs}


def with_dose_response(smk, frame, md, outcomes):
    """The mechanism table with the declared dose-response as its last section (rows of kind level,
    slope and page after the contrasts'), GRPO on the same seeds shown for scale."""
    import pandas as pd

    from oar.analysis import dose_response

    p = smk.params
    design = p.designs["dose_response"]
    reading = dose_response.read_dose_response(pd.read_csv(smk.input.dose_accuracy), design, p.paired_benchmark,
                                               pd.read_csv(smk.input.dose_curves))
    reference = dose_response.reference_arm(outcomes, design, p.baseline)
    rows, section = dose_response.dose_response_section(reading, design, reference)
    frame = frame if "kind" in frame else frame.assign(kind="contrast")
    return pd.concat([frame, rows], ignore_index=True), md + "\n" + section


STUDY = Study(
    name="dose_response", key="analysis.dose_response", check=check, design=design,
    decision_rules=lambda config: {"runs.dose": config["runs"].get("dose") or None,
                                   "analysis.dose_response": config["analysis"].get("dose_response")},
)
