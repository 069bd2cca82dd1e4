"""The registry of studies and tables: what a study declares, and the one declaration of each table.

A study is a design a config declares under one key (``analysis.mechanism``, ``analysis.upper_bound``, ...):
:class:`Study` holds its checks, the runs it plans and the design the run registry keeps for its tables. A
table is declared once, as a :class:`Table`: when it is made, what it reads and how it is built; the run
registry's enabled tables (``oar.experiment.runs``), the table rule's inputs (``rules/common.smk``) and the
table script (``workflow_scripts/tables.py``) all read that declaration.

Everything here takes the run registry being built as an argument (``reg``, an
``oar.experiment.runs.Registry``) and never imports it: the studies sit beneath the run registry in the
layers, so the registry iterates the studies registered here and names none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# reg: the run registry being built (oar.experiment.runs.Registry), passed in, never imported
Check = Callable[[Any], None]
Plan = Callable[[Any], "Mapping | None"]
Design = Callable[[Any], "dict | None"]


def _nothing(reg: Any) -> None:
    return None


@dataclass(frozen=True)
class Table:
    """One table's declaration.

    ``made(reg)``: whether the config makes it (it is then one of ``reg.tables``). ``reads(reg, rules)``: the
    table job's inputs, input name -> file or files (``rules`` is Snakemake's ``rules`` object, read for the
    outputs of the analysis rules). ``build(job)``: (frame, markdown) from the job (Snakemake's ``snakemake``
    object of workflow_scripts/tables.py: ``job.input``, ``job.params``). ``group``: the registry group whose
    runs it compares, whose benchmarks it shows (None: every benchmark). ``decided``: it applies declared
    decision rules, so where each rule was declared is written beneath it. ``category``: the report's
    category it is listed under (categories are listed by name).
    """

    name: str
    made: Callable[[Any], bool]
    reads: Callable[[Any, Any], dict]
    build: Callable[[Any], tuple]
    group: str | None = None
    decided: bool = False
    category: str = "Tables"


@dataclass(frozen=True)
class Study:
    """A study's design, declared under one config key.

    ``name``: the study's name, also the run registry's attribute that holds its design. ``key``: the config
    key it is declared under (what its errors name). ``check(reg)``: raises
    :class:`oar.config_error.ConfigError` naming the key when the design cannot be run (called while the
    config is checked, before any run is planned). ``plan(reg)``: an override of the config's ``runs`` that
    the study plans instead of the declared ones (an interim look's seeds), or None. ``design(reg)``: the
    design its tables read, once the runs are planned, kept as ``reg.<name>`` (None when the config does not
    declare it); a study with no ``design`` sets no attribute. ``decision_rules(config)``: the config keys
    of the decision rules it declares -> their values as in effect (the tables say where each was
    declared). ``tables``: the tables it makes.
    """

    name: str
    key: str
    check: Check = _nothing
    plan: Plan = _nothing
    design: Design | None = None
    decision_rules: Callable[[Mapping], dict] = lambda config: {}
    tables: tuple[Table, ...] = ()


STUDIES: dict[str, Study] = {}
# the workflow's own tables (every config's), before and after the studies' (oar.experiment.tables)
_LEADING: dict[str, Table] = {}
_TRAILING: dict[str, Table] = {}


def register_study(study: Study) -> Study:
    """Register a study (its checks run, its runs planned and its tables made by every run registry built
    after); a name registered twice is an error, so two studies cannot silently share an attribute."""
    if study.name in STUDIES:
        raise ValueError(f"a study named {study.name!r} is already registered ({STUDIES[study.name].key})")
    taken = set(tables())
    for table in study.tables:
        if table.name in taken:
            raise ValueError(f"study {study.name!r} declares table {table.name!r}, which is already declared")
    STUDIES[study.name] = study
    return study


def unregister_study(name: str) -> None:
    """Remove a registered study (a test's own study, once it has been shown)."""
    del STUDIES[name]


def register_table(table: Table, leading: bool = True) -> Table:
    """Register one of the workflow's own tables: ``leading`` ones are listed before the studies' tables,
    the others after (the order of ``reg.tables``, the report's)."""
    if table.name in tables():
        raise ValueError(f"table {table.name!r} is already declared")
    (_LEADING if leading else _TRAILING)[table.name] = table
    return table


def tables() -> dict[str, Table]:
    """Every declared table by name, in the order they are listed: the workflow's leading tables, each
    study's in the order the studies were registered, the workflow's trailing ones."""
    out = dict(_LEADING)
    for study in STUDIES.values():
        out.update((t.name, t) for t in study.tables)
    out.update(_TRAILING)
    return out


def table(name: str) -> Table:
    """The declaration of one table, or a ValueError listing the declared ones."""
    declared = tables()
    if name not in declared:
        raise ValueError(f"unknown table {name!r}; declared: {sorted(declared)}")
    return declared[name]
