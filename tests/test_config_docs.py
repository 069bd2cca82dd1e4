"""docs/configuration.md is generated from config/schema.yaml and must not go stale."""

from __future__ import annotations

import copy

import pytest
import yaml

from oar.experiment import config_docs

pytestmark = pytest.mark.quick


def schema() -> dict:
    return yaml.safe_load(config_docs.SCHEMA.read_text(encoding="utf-8"))


def test_committed_page_matches_the_schema():
    expected = config_docs.render(schema())
    actual = config_docs.PAGE.read_text(encoding="utf-8")
    assert actual == expected, "docs/configuration.md is stale: run `make docs` and commit the page"


def test_every_leaf_key_of_the_schema_has_a_row():
    page = config_docs.render(schema())
    for key in ("training.oar.tau", "training.trainer.num_generations", "analysis.oracle.intervention",
                "evaluation.per_benchmark.<name>.n", "models.<name>.source", "resources.train.mem_mb", "results"):
        assert f"| `{key}` |" in page, key


def test_a_new_key_its_default_range_and_description_reach_the_page():
    changed = copy.deepcopy(schema())
    changed["properties"]["evaluation"]["properties"]["new_knob"] = {
        "type": "integer", "minimum": 3, "default": 7, "description": "a knob added to the schema"}
    row = next(line for line in config_docs.render(changed).splitlines() if "`evaluation.new_knob`" in line)
    assert row == "| `evaluation.new_knob` | integer | ≥ 3 | `7` | a knob added to the schema |"
    assert config_docs.render(changed) != config_docs.render(schema())


def test_precedence_comes_before_the_tables():
    page = config_docs.render(schema())
    assert page.index("replaces the default whole") < page.index("## `models`")
    assert page.index("merged left to right") < page.index("`--config key=value` goes on top")


def test_main_writes_the_page(tmp_path):
    out = tmp_path / "configuration.md"
    config_docs.main(["--out", str(out)])
    assert out.read_text(encoding="utf-8") == config_docs.render(schema())
