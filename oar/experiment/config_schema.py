"""The workflow config and its schema, loaded and checked in one place: the Snakefile, the memory and
cost plans and the configuration page read them here.

``config/schema.yaml`` documents, types, bounds and defaults every key. Where a key names a method or a
scorer, the schema says which list of names it takes (``x-oar-names: <list>``) instead of repeating the
names: the lists are read off the scorer registry and the methods (:data:`NAME_LISTS`), so a scorer
registered once is a valid name everywhere, and a list that admits a user's scorer also takes an import
path ``package.module:function``, imported at validation (one that does not resolve stops there, naming
the key). :func:`validate` fills in the schema's defaults as Snakemake's ``snakemake.utils.validate`` does
(oar never imports Snakemake) and raises :class:`~oar.experiment.config_error.ConfigError` naming the key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

import yaml

from oar.experiment.config_error import ConfigError
from oar.method import names, scorer_registry

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "config" / "schema.yaml"

def _scorers(builtin_only: bool, where=lambda spec: True) -> tuple[str, ...]:
    listed = scorer_registry.BUILTIN_SCORERS if builtin_only else scorer_registry.registered_names()
    return tuple(n for n in listed if where(scorer_registry.scorer_spec(n)))


# name list -> (the names it takes, from the registered scorers or the built-in ones alone; whether it also
# takes an import path of a user's scorer)
NAME_LISTS: dict[str, tuple[Callable[[bool], tuple[str, ...]], bool]] = {
    # training methods: the scorers OAR's trainer can gate (unsigned, needing nothing training lacks) and the
    # advantage rules, which take no gate
    "methods": (lambda b: (names.BASELINE, *_scorers(b, lambda spec: spec.trainable), *names.INTERVENED,
                           *names.ADVANTAGE_RULES), True),
    "gated_methods": (lambda b: (*_scorers(b, lambda spec: spec.trainable), *names.INTERVENED), True),
    "dose_methods": (lambda b: tuple(names.DOSES), False),
    # scorers of a held-out response set (one response per problem, no reward, no parsed positions)
    "heldout_scorers": (lambda b: _scorers(b, lambda spec: spec.heldout), False),
    "probe_scorers": (lambda b: _scorers(b, lambda spec: "probe" in spec.needs), False),
}


def allowed_names(kind: str, builtin_only: bool = False) -> tuple[tuple[str, ...], bool]:
    """(the names a list takes, whether it also takes an import path); with ``builtin_only``, the project's
    own scorers alone (the configuration page), not those a user's module registered in this process."""
    if kind not in NAME_LISTS:
        raise KeyError(f"config/schema.yaml names an unknown list {kind!r}; known: {sorted(NAME_LISTS)}")
    listed, paths = NAME_LISTS[kind]
    return listed(builtin_only), paths


def schema_path() -> Path:
    if not SCHEMA.is_file():
        raise FileNotFoundError(f"{SCHEMA} is missing: the workflow runs from the project's source tree (a "
                                "clone), not from an installed package")
    return SCHEMA


@lru_cache(maxsize=1)
def _schema() -> dict:
    return yaml.safe_load(schema_path().read_text(encoding="utf-8"))


def load_schema() -> dict:
    """config/schema.yaml (a copy: the caller may change it)."""
    return copy.deepcopy(_schema())


def trainer_keys() -> tuple[str, ...]:
    """The keys a ``trainer`` section may hold (``$defs.trainer``)."""
    return tuple(_schema()["$defs"]["trainer"]["properties"])


def _validator():
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, subschema):
        # as snakemake.utils.validate(set_default=True): a property's default where the instance leaves it out
        if validator.is_type(instance, "object"):
            for key, prop in properties.items():
                if "default" in prop:
                    instance.setdefault(key, prop["default"])
        yield from check_properties(validator, properties, instance, subschema)

    def named(validator, kind, instance, subschema):
        if not isinstance(instance, str):
            return  # the node's own `type` reports it
        listed, paths = allowed_names(kind)
        if instance in listed:
            return
        if paths and scorer_registry.is_import_path(instance):
            try:
                scorer_registry.scorer_spec(instance)
            except scorer_registry.ScorerError as error:
                yield jsonschema.ValidationError(str(error))
            return
        also = " or an import path 'package.module:function' of a scorer" if paths else ""
        yield jsonschema.ValidationError(f"{instance!r} is not one of {list(listed)}{also}")

    return jsonschema.validators.extend(base, {"properties": fill_defaults, "x-oar-names": named})


def validate(config: dict) -> dict:
    """Validate ``config`` in place against the schema, its defaults filled in; returns it. Raises
    :class:`ConfigError` naming the first bad key (``config error at <key>: <message>``)."""
    import jsonschema

    try:
        _validator()(_schema()).validate(config)
    except jsonschema.ValidationError as error:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ConfigError(key, error.message) from None
    return config


def load_config(path: str | Path) -> dict:
    """A workflow config file, validated, its schema defaults filled in."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(str(path), f"cannot read the config file ({error})") from None
    if not isinstance(config, Mapping):
        raise ConfigError(str(path), "a config file holds a mapping of sections")
    return validate(dict(config))
