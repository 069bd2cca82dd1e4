"""The configuration page (docs/configuration.md), generated from config/schema.yaml.

The schema is the one place where a config key is described, typed, bounded and given its default;
this module turns it into a page a person reads: how config files combine, then one table per
top-level section. ``make docs`` (``python -m oar.experiment.config_docs``) rewrites the page, and
tests/test_config_docs.py fails when the committed page differs from what the schema gives.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterator

import yaml

from oar.experiment.config_schema import SCHEMA, allowed_names

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"

PREAMBLE = """\
<!-- Generated from config/schema.yaml by `make docs` (python -m oar.experiment.config_docs): edit the schema, not this page. -->
# Configuration

Every key the workflow reads, with its type, allowed values, default and meaning. The Snakefile
validates the configuration against `config/schema.yaml` (`oar.experiment.config_schema`) before it plans any job: an unknown key or a
value out of range stops the run with one line naming the key, for example
`config error at runs.gating.taus.0: 1.5 is greater than the maximum of 1`. Defaults below are filled
in where a file leaves a key out.

## Where the configuration comes from

Snakemake builds one configuration in this order, later sources winning:

1. **`config/config.yaml`, the embedded default**, is read only when no `--configfile` is given on the
   command line.
2. **A `--configfile` replaces the default whole.** `snakemake --configfile config/paper.yaml all`
   runs exactly what `config/paper.yaml` says; nothing of `config/config.yaml` is kept (a merge would
   keep the default's models and datasets beside yours).
3. **Several files after `--configfile` are merged left to right**, key by key: a mapping in a later
   file updates the same mapping of an earlier one recursively, and any other value (a number, a
   string, a list) replaces it. `--configfile config/config.yaml config/ablations.yaml` is the default
   with its ablations turned on; `config/ablations.yaml` alone would not be a complete configuration.
4. **`--config key=value` goes on top** of whatever the files gave, merged the same way. Snakemake
   reads each value as a number when it is one (`4`, `0.5`), as `True`/`False`, and otherwise with
   YAML's base loader, in which every nested value is text: `--config 'evaluation={limit: 4}'` gives
   the string `"4"`, which the schema rejects. Use `--config` for top-level text such as
   `results=out`, and a small overlay file for anything nested.

Schema defaults are filled in last, for keys that no file gave. Lists are never merged: to change one
benchmark of `evaluation.benchmarks`, give the whole list.

```bash
snakemake --cores 2 all                                                        # config/config.yaml
snakemake --cores 2 all --configfile my.yaml                                   # my.yaml alone
snakemake --cores 2 all --configfile config/config.yaml config/ablations.yaml  # default + overlay
snakemake --cores 2 all --configfile config/config.yaml my-overlay.yaml        # default, a few keys changed
snakemake --cores 2 all --config results=results-try2                          # default, another output folder
```

Complete configurations to start from: `config/config.yaml` (the embedded CPU default),
`config/paper.yaml` (the paper's scale) and `tests/data/workflow_tiny.yaml` (the tiny test DAG);
`config/ablations.yaml` is an overlay. In the tables, `<name>` stands for a key you choose (a model's short name, a
dataset or benchmark name, a kind of job); a key marked *required* has no default.
"""  # noqa: E501


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The node with its ``$ref`` inlined; the node's own keys (description, default) win."""
    while "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _fmt(value: Any) -> str:
    # a string as written, unless it is empty or holds line breaks or edge spaces: then quoted as in YAML
    plain = isinstance(value, str) and value and value.strip() == value and "\n" not in value
    return f"`{value}`" if plain else "`" + json.dumps(value, ensure_ascii=False) + "`"


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    names = []
    for kind in kinds:
        if kind == "array":
            items = _resolve(node.get("items", {}), defs)
            inner = _type(items, defs) if items else "any"
            names.append(f"list of {inner}")
        elif kind == "object":
            names.append("mapping")
        else:
            names.append(kind)
    if not names and "enum" in node:
        names.append("one of")
    return " or ".join(names) or "any"


def _allowed(node: dict[str, Any], defs: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append(", ".join(_fmt(v) for v in node["enum"]))
    if "x-oar-names" in node:  # a list of names the registry gives (oar.experiment.config_schema)
        listed, paths = allowed_names(node["x-oar-names"], builtin_only=True)
        parts.append(", ".join(_fmt(v) for v in listed) + (", or an import path `package.module:function`"
                                                           if paths else ""))
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in node:
            parts.append(f"{sign} {node[key]}")
    if "items" in node:
        items = _resolve(node["items"], defs)
        inner = _allowed(items, defs)
        if inner:
            parts.append(f"each {inner}")
        if node.get("uniqueItems"):
            parts.append("no repeats")
        if "minItems" in node:
            parts.append(f"at least {node['minItems']}")
    if "pattern" in node.get("propertyNames", {}):
        parts.append(f"names match `{node['propertyNames']['pattern']}`")
    return "; ".join(parts)


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "*required*"
    if "default" not in node:
        return ""
    value = node["default"]
    if value == {}:
        return ""  # an empty mapping default only means "the section may be left out"
    return _fmt(value)


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def rows(node: dict[str, Any], path: str, defs: dict[str, Any], required: bool = False) -> Iterator[list[str]]:
    """One table row per key under ``node``, depth first, nested keys as dotted paths."""
    node = _resolve(node, defs)
    props = node.get("properties")
    mapping_of = node.get("additionalProperties")
    is_section = props is not None or isinstance(mapping_of, dict) and _resolve(mapping_of, defs).get("properties")
    if not is_section or node.get("description"):
        yield [f"`{path}`", _type(node, defs), _allowed(node, defs), _default(node, required),
               node.get("description", "")]
    for name, child in (props or {}).items():
        yield from rows(child, f"{path}.{name}", defs, name in node.get("required", []))
    if isinstance(mapping_of, dict) and (props is None or mapping_of):
        child = _resolve(mapping_of, defs)
        if child.get("properties") or child.get("additionalProperties") not in (None, False, True):
            yield from rows(child, f"{path}.<name>", defs)
        elif child.get("type") and props is not None:  # extra keys of a resource set
            yield [f"`{path}.<name>`", _type(child, defs), "", "",
                   "any other key is passed on unchanged to the executor"]


def render(schema: dict[str, Any]) -> str:
    defs = schema.get("$defs", {})
    out = [PREAMBLE]
    for name, node in schema["properties"].items():
        node = _resolve(node, defs)
        out.append(f"\n## `{name}`\n")
        if node.get("description"):
            out.append(_cell(node["description"]) + "\n")
        out.append("\n| key | type | allowed | default | meaning |\n| --- | --- | --- | --- | --- |\n")
        for row in rows(node, name, defs, name in schema.get("required", [])):
            if row[0] == f"`{name}`" and node.get("description"):
                row[4] = "(above)"
            out.append("| " + " | ".join(_cell(c) for c in row) + " |\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m oar.experiment.config_docs",
        description="Write the configuration page (Markdown) generated from the workflow's config schema.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--schema", type=Path, default=SCHEMA, help="config schema (YAML, JSON Schema)")
    parser.add_argument("--out", type=Path, default=PAGE, help="page to write")
    args = parser.parse_args(argv)
    text = render(yaml.safe_load(args.schema.read_text(encoding="utf-8")))
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} from {args.schema}")


if __name__ == "__main__":
    main()
