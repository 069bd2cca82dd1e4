"""A new study, registered in a few lines, as a worked example: its config key, a check, the runs it plans
and a table. The run registry plans its runs, checks its design and makes its table without a line of the
registry, the config checks, rules/common.smk or workflow_scripts/tables.py naming it.

A study of the project is one module of oar/studies/ with such a ``STUDY``, added to the list of
oar/studies/catalogue.py, its key declared in config/schema.yaml (the schema rejects unknown keys; here the
key is added after validation, as the test touches no other file), its overlay in config/studies/ and its
make target in the Makefile's "Studies" section.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import yaml
from test_registry import FIXTURE, ROOT, resolved

from oar.config_error import ConfigError
from oar.experiment.runs import Registry
from oar.studies.registry import STUDIES, Study, Table, register_study, table, unregister_study

pytestmark = pytest.mark.quick


# ------------------------------------------------------------ the new study, in a few lines

def check(reg) -> None:
    design = reg.config["analysis"].get("replication")
    if design and len(design["seeds"]) < 2:
        raise ConfigError("analysis.replication.seeds", f"{design['seeds']}: a replication needs 2 seeds or more")


def plan(reg) -> dict | None:
    design = reg.config["analysis"].get("replication")
    return {"main": {"seeds": design["seeds"]}} if design else None  # runs.main on the replication's seeds


REPLICATION = Study(
    name="replication", key="analysis.replication", check=check, plan=plan,
    design=lambda reg: reg.config["analysis"].get("replication"),
    tables=(Table("replication", made=lambda reg: bool(reg.replication),
                  reads=lambda reg, rules: {"differences": rules.paired_analysis.output.differences},
                  build=lambda job: ("frame", f"replicated on {job.params.designs['replication']['seeds']}")),),
)

# ------------------------------------------------------------------------------- the test


@pytest.fixture
def replication():
    register_study(REPLICATION)
    yield REPLICATION
    unregister_study(REPLICATION.name)


def config_with(design: dict | None) -> dict:
    """The registry fixture's config, validated, with analysis.replication (set after the schema's check)."""
    cfg = resolved(yaml.safe_load((ROOT / "config" / FIXTURE).read_text()))
    cfg = copy.deepcopy(cfg)
    cfg["analysis"]["replication"] = design
    return cfg


def test_the_registry_plans_checks_and_tables_a_registered_study(replication):
    reg = Registry(config_with({"seeds": [7, 8, 9]}))
    # its runs: runs.main on its seeds, every main method on each
    assert {reg.runs[r]["seed"] for r in reg.groups["main"]} == {7, 8, 9}
    assert {reg.runs[r]["method"] for r in reg.groups["main"]} == set(reg.config["runs"]["main"]["methods"])
    assert reg.replication == {"seeds": [7, 8, 9]}  # its design, kept as the registry's attribute
    # its table: made, read and built from its one declaration (as the table rule and script use it)
    assert "replication" in reg.tables
    rules = SimpleNamespace(paired_analysis=SimpleNamespace(output=SimpleNamespace(differences="d.csv")))
    assert table("replication").reads(reg, rules) == {"differences": "d.csv"}
    job = SimpleNamespace(params=SimpleNamespace(designs={"replication": reg.replication}))  # the table rule's
    assert table("replication").build(job)[1] == "replicated on [7, 8, 9]"
    # its check fires, naming its key
    with pytest.raises(ConfigError, match=r"^config error at analysis\.replication\.seeds: \[7\]"):
        Registry(config_with({"seeds": [7]}))


def test_a_config_without_the_study_plans_as_before(replication):
    plain = Registry(config_with(None))
    assert plain.replication is None and "replication" not in plain.tables
    unregister_study(REPLICATION.name)
    try:
        without = Registry(config_with(None))
    finally:
        register_study(REPLICATION)
    assert plain.runs == without.runs and plain.tables == without.tables


def test_a_study_or_table_name_is_registered_once(replication):
    with pytest.raises(ValueError, match="already registered"):
        register_study(REPLICATION)
    with pytest.raises(ValueError, match="already declared"):
        register_study(Study(name="another", key="analysis.another", tables=(table("replication"),)))
    assert "another" not in STUDIES
