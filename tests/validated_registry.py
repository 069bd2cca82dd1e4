"""A run registry from a config validated against the schema, as the Snakefile builds it (for tests)."""

from __future__ import annotations

import copy


def validated_registry(cfg):
    """``Registry`` of a deep copy of ``cfg`` after the schema's validation (defaults filled in), as the
    Snakefile validates it (``oar.experiment.config_schema``)."""
    from oar.experiment.config_schema import trainer_keys, validate
    from oar.experiment.runs import Registry

    return Registry(validate(copy.deepcopy(cfg)), trainer_keys())
