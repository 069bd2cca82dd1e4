"""The report's landing page and captions, rendered as `snakemake --report` renders them (Jinja with
trim_blocks and lstrip_blocks, then docutils), say what the configuration they were made with says."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

jinja2 = pytest.importorskip("jinja2")
docutils_core = pytest.importorskip("docutils.core")
snakemake_utils = pytest.importorskip("snakemake.utils")

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ROOT / "rules" / "captions"


def resolved(path: Path, **changes) -> dict:
    config = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        node = config
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    snakemake_utils.validate(config, str(ROOT / "config" / "schema.yaml"))  # fills in the defaults
    return config


def render(template: str, config: dict, name: str | None = None) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    smk = SimpleNamespace(config=copy.deepcopy(config), wildcards=SimpleNamespace(name=name))
    text = env.from_string((CAPTIONS / template).read_text()).render(snakemake=smk)
    html = docutils_core.publish_parts(text, writer_name="html",
                                       settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    return " ".join(re.sub(r"<[^>]+>", "", html).split())  # the rendered text, tags dropped


def test_causal_recall_caption_names_the_configured_intervention():
    default = render("table.rst", resolved(ROOT / "config" / "config.yaml"), "causal_recall")
    assert "substitution by the space token" in default and "pad" not in default
    pad = render("table.rst", resolved(ROOT / "config" / "config.yaml", **{"analysis.oracle.intervention": "pad"}),
                 "causal_recall")
    assert "substitution by the pad token" in pad
    deleted = render("table.rst", resolved(ROOT / "config" / "config.yaml",
                                           **{"analysis.oracle.intervention": "delete",
                                              "analysis.recall.fraction": 0.2}),
                     "causal_recall")
    assert "whose deletion" in deleted and "ceil(20% of the reasoning tokens)" in deleted


def test_figure_captions_follow_the_config():
    config = resolved(ROOT / "config" / "config.yaml", **{"analysis.heatmap.scorers": ["oar_g", "entropy"]})
    heatmap = render("figure.rst", config, "token_heatmap")
    assert "gate's weights under OAR-G (tau 0.4, beta 2.0)" in heatmap
    assert "(oracle intervention: space)" in render("figure.rst", config, "recall_bars")


@pytest.mark.parametrize("name", ["main_table", "ablation_gating", "ablation_grid", "ablation_probe", "controls",
                                  "causal_recall", "fidelity", "cost", "paired_differences",
                                  "length_sweep", "decisive"])
def test_every_table_caption_renders_without_docutils_warnings(name):
    html = render("table.rst", resolved(ROOT / "config" / "paper.yaml"), name)
    assert f"Table {name}." not in html and len(html) > 100


def test_landing_page_describes_the_run():
    config = resolved(ROOT / "config" / "config.yaml")
    html = render("workflow.rst", config)
    assert "OAR reproduction: what this run was" in html
    steps = config["training"]["trainer"]["max_steps"]
    assert f"{steps} steps on chain_train;" in html and "pretrained in the workflow on the chain task" in html
    trainer = config["training"]["trainer"]
    assert f"group size G = {trainer['num_generations']}" in html
    assert f"learning rate {trainer['learning_rate']:g}" in html
    assert "main table: GRPO, truth gate, OAR-P, OAR-G, seeds 0, 1, 2, 3, 4." in html
    assert "gating ablation: not run." in html
    assert "How to read this report" in html
    paper = render("workflow.rst", resolved(ROOT / "config" / "paper.yaml"))
    assert "gating ablation: not run" not in paper
    tiny = render("workflow.rst", resolved(ROOT / "tests" / "data" / "workflow_tiny.yaml"))
    assert "2 steps on" in tiny and "tau 0.4 x beta 1.0, 2.0" in tiny


def test_paired_caption_names_the_primary_family_and_its_power():
    small = render("table.rst", resolved(ROOT / "config" / "config.yaml"), "paired_differences")
    assert "truth gate, OAR-P, OAR-G" in small and "Holm-adjusted p" in small
    assert "underpowered" in small and "Kaplan-Meier median" in small
    paper = render("table.rst", resolved(ROOT / "config" / "paper.yaml"), "paired_differences")
    assert "OAR-P, OAR-G" in paper and "underpowered" not in paper
    none = render("table.rst", resolved(ROOT / "config" / "config.yaml", **{"analysis.primary": None}),
                  "paired_differences")
    assert "No primary comparisons are declared" in none
    assert "MDE 80%" in render("table.rst", resolved(ROOT / "config" / "config.yaml"), "main_table")
