"""The mechanism run and the rescue (``analysis.mechanism``; config/studies/mechanism.yaml and rescue.yaml):
declared contrasts between arms of runs.main (Holm over them), the mediator, the derailment outcome and the
step-error tests; its ``mechanism`` table also holds the dose-response's section when one is declared.
"""

from __future__ import annotations

from oar.config_error import ConfigError
from oar.studies.registry import Study, Table


def check(reg) -> None:
    """The declared contrasts (analysis.mechanism): arms run in runs.main, balanced, tests and margins in
    range, and its step-error tests read on a chain task; one family per config (analysis.primary null)."""
    design = reg.config["analysis"].get("mechanism")
    if not design:
        return
    from oar.analysis import step_errors
    from oar.analysis.mechanism import check_design
    from oar.data.catalogue import chain_steps

    main = reg.config["runs"]["main"]
    problems = check_design(design, list(main["methods"]), reg.group_models(main))
    # the step errors are read where the contrasts' accuracies are: the paired benchmark
    benchmark = (reg.config["analysis"]["paired"]["benchmark"]
                 or (main.get("benchmarks") or reg.config["evaluation"]["benchmarks"])[0])
    problems += step_errors.check_design(design.get("step_errors"), list(main["methods"]), chain_steps(benchmark),
                                         benchmark)
    if problems:
        raise ConfigError(*problems[0])
    if reg.config["analysis"].get("primary") or reg.config["analysis"].get("upper_bound"):
        raise ConfigError("analysis.mechanism", "the contrasts are this config's decision family; set "
                          "analysis.primary and analysis.upper_bound to null")


def design(reg) -> dict | None:
    """analysis.mechanism with the declared main seeds."""
    declared = reg.config["analysis"].get("mechanism")
    if not declared:
        return None
    return {**dict(declared), "seeds": [int(x) for x in reg.group_seeds(reg.declared_config["runs"]["main"])]}


def step_error_summaries(reg) -> list[str]:
    """The evaluation summaries whose samples the mechanism's step-error tests read: its policy's main runs
    on the paired benchmark. samples.jsonl is no declared output, but an evaluation that reruns rewrites
    its summary last, so the table reruns with it."""
    design = reg.mechanism
    if not design or not design.get("step_errors"):
        return []
    runs = [r for r in reg.groups["main"] if r.split("/", 1)[0] == design["model"]]  # run id <model>/<run>
    return reg.summaries(runs, [reg.paired["benchmark"]])


def _reads(reg, rules) -> dict:
    return {
        "outcomes": rules.paired_analysis.output.outcomes,
        "accuracy": rules.paired_analysis.input.accuracy,
        "summaries": step_error_summaries(reg),
        # the declared dose-response, a section of the mechanism table: its runs' accuracy and curves
        **(
            {
                "dose_accuracy": f"{reg.results}/analysis/accuracy/dose.csv",
                "dose_curves": f"{reg.results}/analysis/credit/dose.csv",
            }
            if reg.dose_response
            else {}
        ),
    }


def _with_step_errors(frame, md, outcomes, design, smk):
    """The mechanism table with its step-error tests: their rows (kind "step error" after the contrasts'
    "contrast") and their section."""
    import pandas as pd

    from oar.analysis import step_errors
    from oar.data.catalogue import chain_steps

    steps = chain_steps(smk.params.paired_benchmark)
    meta = outcomes.set_index("run")[["model", "method", "seed"]].to_dict("index")
    errors = step_errors.step_error_frame(step_errors.samples_by_run(smk.input.summaries), meta, steps)
    tests, section = step_errors.step_error_report(errors, design, design["seeds"], steps)
    return (pd.concat([frame.assign(kind="contrast"), tests.assign(kind="step error")], ignore_index=True),
            md + "\n" + section)


def build_table(smk):
    import pandas as pd

    from oar.analysis import mechanism
    from oar.analysis.outcomes import base_accuracy
    from oar.studies.dose_response import with_dose_response

    p = smk.params
    design = p.designs["mechanism"]
    outcomes = pd.read_csv(smk.input.outcomes)
    derailed = None
    if design.get("derailment"):
        base = base_accuracy(pd.read_csv(smk.input.accuracy), p.paired_benchmark)
        if design["model"] not in base:
            raise ValueError(f"no {p.paired_benchmark} accuracy of the untrained {design['model']} (the derailment "
                             "outcome's reference)")
        derailed = mechanism.derailment(outcomes, design, design["seeds"], base[design["model"]])
    weights = mechanism.mediator(outcomes, design, design["seeds"])
    frame, md = mechanism.mechanism_table(mechanism.read_contrasts(outcomes, design, design["seeds"]), design,
                                          weights=weights, derailed=derailed)
    if len(weights):  # the mediator was logged: the exploratory regression on it
        from oar.analysis.step_credit import ratio_regression, ratio_regression_text
        of_model = outcomes[(outcomes["model"] == design["model"]) & outcomes["seed"].isin(design["seeds"])]
        md += ratio_regression_text(ratio_regression(of_model, list(weights["method"])))
    if design.get("step_errors"):
        frame, md = _with_step_errors(frame, md, outcomes, design, smk)
    return with_dose_response(smk, frame, md, outcomes) if p.designs.get("dose_response") else (frame, md)


STUDY = Study(
    name="mechanism", key="analysis.mechanism", check=check, design=design,
    decision_rules=lambda config: {"analysis.mechanism": config["analysis"].get("mechanism")},
    tables=(Table("mechanism", made=lambda reg: reg.has_paired() and bool(reg.mechanism), reads=_reads,
                  build=build_table, decided=True),),
)
