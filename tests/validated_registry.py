"""A run registry from a config validated against the schema, as the Snakefile builds it (for tests)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "config" / "schema.yaml"


def validated_registry(cfg):
    """``Registry`` of a deep copy of ``cfg`` after the schema's validation (defaults filled in); skips the
    test where Snakemake, which validates, is not installed."""
    from oar.experiment.runs import Registry

    validate = pytest.importorskip("snakemake.utils").validate
    cfg = copy.deepcopy(cfg)
    validate(cfg, str(SCHEMA))
    return Registry(cfg, tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"]))
