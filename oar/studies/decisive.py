"""The decisive run's declared primary comparisons (``analysis.primary``; config/studies/decisive.yaml and
decisive-part.yaml): each arm against the baseline on every main seed, Holm over the family; and its
decisive reading (the ``decisive`` table: the scorers read against the truth gates at each distractor level).
"""

from __future__ import annotations

from oar.config_error import ConfigError
from oar.studies.registry import Study, Table


def check(reg) -> None:
    """The declared primary comparisons (analysis.primary) are run: the baseline is the paired
    analysis's, and each arm and the baseline run in runs.main on at least min_seeds seeds."""
    primary = reg.config["analysis"].get("primary")
    if not primary:
        return
    main = reg.config["runs"]["main"]
    baseline = primary.get("baseline", "grpo")
    if baseline != reg.config["analysis"]["paired"]["baseline"]:
        raise ConfigError("analysis.primary.baseline",
                          f"{baseline!r} is not analysis.paired.baseline "
                          f"({reg.config['analysis']['paired']['baseline']!r})")
    for method in [baseline, *primary["arms"]]:
        if method not in main["methods"]:
            key = "analysis.primary.baseline" if method == baseline else "analysis.primary.arms"
            raise ConfigError(key, f"{method!r} is not run in runs.main.methods {list(main['methods'])}")
    seeds = reg.group_seeds(main)
    need = primary.get("min_seeds", 10)
    if len(set(seeds)) < need:
        raise ConfigError("analysis.primary.min_seeds",
                          f"the primary comparisons need {need} paired seeds, runs.main runs {len(set(seeds))} "
                          f"({list(seeds)}); add seeds to runs.main.seeds or declare fewer with the design's reason")


def design(reg) -> dict | None:
    """analysis.primary with its defaults, Holm's family as declared (every primary arm on every main policy
    that runs it) and every main seed."""
    primary = reg.config["analysis"].get("primary")
    if not primary:
        return None
    primary = {"baseline": "grpo", "metric": "final_accuracy", "min_seeds": 10, **dict(primary)}
    main = reg.config["runs"]["main"]
    primary["family"] = [[m, a] for m in reg.group_models(main) for a in primary["arms"]
                         if not reg.graded_equals_truth(m, a)]
    primary["seeds"] = [int(s) for s in reg.group_seeds(main)]
    return primary


def _made(reg) -> bool:
    # the upper bound the scorers are read against, where no other study is this config's decision
    return reg.has_paired() and reg.has_truth_gate() and not reg.upper_bound and not reg.mechanism


def _reads(reg, rules) -> dict:
    return {"differences": rules.paired_analysis.output.differences,
            "outcomes": rules.paired_analysis.output.outcomes}


def build_table(smk):
    import pandas as pd

    from oar.analysis import decisive

    p = smk.params
    metric = (p.primary or {}).get("metric", "final_accuracy")
    return decisive.decisive_table(
        decisive.level_readings(pd.read_csv(smk.input.differences), p.levels, metric),
        decisive.level_trends(pd.read_csv(smk.input.outcomes), p.levels, p.baseline, metric), p.baseline)


STUDY = Study(
    name="primary", key="analysis.primary", check=check, design=design,
    decision_rules=lambda config: {"analysis.primary": config["analysis"].get("primary")},
    tables=(Table("decisive", made=_made, reads=_reads, build=build_table, decided=True),),
)
