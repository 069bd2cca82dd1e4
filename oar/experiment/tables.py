"""The workflow's own tables, each declared once (:class:`oar.studies.registry.Table`: when it is made,
what it reads, how it is built): the comparisons of the run registry's groups, the paired analysis and the
length sweep first, then (after every study's tables, ``oar.studies``) the cost, the causal recall, the
gradient share and the fidelity. The run registry lists the tables a config makes from these declarations,
rules/common.smk takes each table job's inputs from them and workflow_scripts/tables.py builds each with them.
"""

from __future__ import annotations

import json
from pathlib import Path

import oar.studies.catalogue  # noqa: F401  (registers the studies and their tables, listed between these)
from oar.studies.registry import Table, register_table, table, tables

__all__ = ["GROUP_TABLES", "table", "tables"]


def _credit(smk):
    import pandas as pd

    return pd.read_csv(smk.input.credit) if "credit" in smk.input.keys() else None


def _group_reads(group: str):
    def reads(reg, rules) -> dict:
        return {"accuracy": f"{reg.results}/analysis/accuracy/{group}.csv",
                "credit": f"{reg.results}/analysis/credit/{group}.summary.csv"}

    return reads


def _accuracy_table(title: str, **options):
    """A group's accuracy table (oar.analysis.accuracy) with its title and options."""

    def build(smk):
        import pandas as pd

        from oar.analysis.accuracy import accuracy_table

        return accuracy_table(pd.read_csv(smk.input.accuracy), smk.params.benchmarks, title, credit=_credit(smk),
                              **options)

    return build


def _main_table(smk):
    import pandas as pd

    from oar.analysis.accuracy import accuracy_table

    p = smk.params
    return accuracy_table(pd.read_csv(smk.input.accuracy), p.benchmarks, "Main table",
                          methods=p.main_methods, credit=_credit(smk))


def _grid_table(smk):
    import pandas as pd

    from oar.analysis.grid import grid_table

    return grid_table(pd.read_csv(smk.input.accuracy), smk.params.benchmarks)


def _paired_table(smk):
    import pandas as pd

    from oar.analysis.outcomes import threshold_rule
    from oar.analysis.paired import paired_table

    p = smk.params
    return paired_table(pd.read_csv(smk.input.differences),
                        threshold_rule(p.reward_threshold, p.reward_gain),
                        primary=p.primary, not_run=p.not_run)


def _length_sweep_table(smk):
    import pandas as pd

    from oar.analysis.length_sweep import length_sweep_table
    from oar.analysis.outcomes import base_accuracy, threshold_rule

    p = smk.params
    acc = pd.read_csv(smk.input.accuracy)
    base = acc[(acc["method"] == "base") & (acc["benchmark"] == p.paired_benchmark)]
    return length_sweep_table(pd.read_csv(smk.input.outcomes),
                              threshold_rule(p.reward_threshold, p.reward_gain),
                              base=base_accuracy(acc, p.paired_benchmark),
                              lengths=dict(zip(base["model"], base["mean_response_tokens"])))


def _cost_table(smk):
    import pandas as pd

    from oar.analysis.cost import cost_table

    return cost_table(pd.read_csv(smk.input.cost), smk.params.train_threads)


def _recall_table(smk):
    from oar.analysis.causal_recall import recall_table

    return recall_table(json.loads(Path(smk.input.recall).read_text()))


def _gradient_share_table(smk):
    from oar.analysis.gradient_share import gradient_share_table

    summaries = {Path(f).name.removesuffix(".summary.json"): json.loads(Path(f).read_text())
                 for f in smk.input.summaries}
    return gradient_share_table(summaries)


def _fidelity_table(smk):
    from oar.analysis.fidelity import fidelity_table

    return fidelity_table(json.loads(Path(smk.input.fidelity).read_text()))


def _group_table(name: str, group: str, build) -> Table:
    """A table of one registry group's runs: made when the config runs the group."""
    return Table(name, made=lambda reg: bool(reg.groups[group]), reads=_group_reads(group), build=build,
                 group=group)


# the comparisons, listed before the studies' tables
for _table in (
    _group_table("main_table", "main", _main_table),
    _group_table("ablation_gating", "gating", _accuracy_table(
        "Gating ablation (bi-level vs boost-only vs suppress-only)", show=("tau",), gate_tests=True)),
    _group_table("ablation_grid", "grid", _grid_table),
    _group_table("ablation_probe", "probes", _accuracy_table("Outcome-probe ablation", show=("probe",))),
    _group_table("controls", "controls", _accuracy_table("Controls")),
    Table("paired_differences", made=lambda reg: reg.has_paired(),
          reads=lambda reg, rules: {"differences": rules.paired_analysis.output.differences},
          build=_paired_table, decided=True),
    Table("length_sweep", made=lambda reg: reg.has_paired() and reg.is_length_sweep(),
          reads=lambda reg, rules: {"outcomes": rules.paired_analysis.output.outcomes,
                                    "accuracy": rules.paired_analysis.input.accuracy},
          build=_length_sweep_table),
):
    register_table(_table)

# the measurements, listed after the studies' tables
for _table in (
    Table("cost", made=lambda reg: True, reads=lambda reg, rules: {"cost": rules.cost_summary.output.csv},
          build=_cost_table),
    Table("causal_recall", made=lambda reg: bool(reg.recall["scorers"]),
          reads=lambda reg, rules: {"recall": rules.recall_analysis.output.json}, build=_recall_table),
    Table("gradient_share", made=lambda reg: bool(reg.chain_models()),
          reads=lambda reg, rules: {"summaries": [f"{reg.results}/models/{m}.summary.json"
                                                  for m in reg.chain_models()]},
          build=_gradient_share_table),
    Table("fidelity", made=lambda reg: bool(reg.fidelity["scorers"] and reg.fidelity["probes"]),
          reads=lambda reg, rules: {"fidelity": rules.fidelity_analysis.output.json}, build=_fidelity_table),
):
    register_table(_table, leading=False)

# table name -> the registry group whose runs it compares
GROUP_TABLES = {name: t.group for name, t in tables().items() if t.group}
