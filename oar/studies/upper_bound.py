"""The upper-bound and ceiling tests (``analysis.upper_bound``; config/studies/upper-bound.yaml and
ceiling.yaml): the graded truth gate against GRPO, group-sequential over fresh seeds read at declared looks.
An interim run (``through_look``) plans only the seeds up to that look, with the full run's run ids.
"""

from __future__ import annotations

from oar.config_error import ConfigError
from oar.studies.registry import Study, Table


def check(reg) -> None:
    """The upper-bound test (analysis.upper_bound), declared before its runs: margin, level and looks in
    range, fresh seeds, two arms, an exclusion rule that reads only what precedes the first update."""
    design = reg.config["analysis"].get("upper_bound")
    if not design:
        return
    from oar.analysis.upper_bound import check_design

    main = dict(reg.config["runs"]["main"])
    main["models"] = reg.group_models(main)
    main["seeds"] = reg.group_seeds(main)
    problems = check_design(design, main)
    if problems:
        raise ConfigError(*problems[0])
    if reg.config["analysis"].get("primary"):
        raise ConfigError("analysis.primary", "the upper-bound test is this config's one decision; set "
                          "analysis.primary to null (a second family would need its own correction)")


def _declared_seeds(reg) -> list[int]:
    return [int(x) for x in reg.group_seeds(reg.declared_config["runs"]["main"])]


def plan(reg) -> dict | None:
    """An interim run: only the seeds up to the given look (the same run ids as the full run's)."""
    design = reg.config["analysis"].get("upper_bound")
    if not (design and design.get("through_look")):
        return None
    k = int(design["through_look"])
    if not 1 <= k <= len(design["looks"]):
        raise ConfigError("analysis.upper_bound.through_look",
                          f"{k} is not a look of analysis.upper_bound.looks {design['looks']}")
    return {"main": {"seeds": _declared_seeds(reg)[: design["looks"][k - 1]]}}


def design(reg) -> dict | None:
    """analysis.upper_bound with the declared seeds, in their order (all of them, also in an interim run)."""
    declared = reg.config["analysis"].get("upper_bound")
    return {**dict(declared), "seeds": _declared_seeds(reg)} if declared else None


def decision_rules(config) -> dict:
    """The design as in effect, the interim look aside."""
    design = config["analysis"].get("upper_bound")
    if design:
        design = {k: v for k, v in design.items() if k != "through_look"}
    return {"analysis.upper_bound": design}


def _reads(reg, rules) -> dict:
    return {"outcomes": rules.paired_analysis.output.outcomes,
            "accuracy": rules.paired_analysis.input.accuracy,
            "curves": rules.paired_analysis.input.curves}


def build_table(smk):
    import pandas as pd

    from oar.analysis import upper_bound
    from oar.analysis.outcomes import base_accuracy

    p = smk.params
    acc = pd.read_csv(smk.input.accuracy)
    base = base_accuracy(acc, p.paired_benchmark)
    design = p.designs["upper_bound"]
    if design["model"] not in base:
        raise ValueError(f"no {p.paired_benchmark} accuracy of the untrained {design['model']} (the derailment "
                         "outcome's reference)")
    reading = upper_bound.read_upper_bound(pd.read_csv(smk.input.outcomes), design, design["seeds"],
                                           base[design["model"]], pd.read_csv(smk.input.curves))
    return upper_bound.upper_bound_table(reading, design, upper_bound.plan(design))


STUDY = Study(
    name="upper_bound", key="analysis.upper_bound", check=check, plan=plan, design=design,
    decision_rules=decision_rules,
    tables=(Table("upper_bound", made=lambda reg: reg.has_paired() and bool(reg.upper_bound), reads=_reads,
                  build=build_table, decided=True),),
)
