"""The frozen policies shipped with the package: pretrained testbed policies as files, with their hashes.

A testbed policy pretrained inside the workflow (``oar.training.pretrain``) is another policy on every
kind of CPU (the kernels add in another order), and RL results differ between such draws by more than
between methods. The published results therefore start from policies shipped in ``oar/models/frozen/``:
one folder per policy (an ordinary model folder with its ``pretrain.json`` and a card, ``CARD.md``), and
``policies.json``, the index: per policy the sha256 of every file, the recipe it was pretrained by and how
it was made. Torch-free: the workflow checks a config against it before any job is planned.

A config names a shipped policy on a ``chain`` model (``models.<name>.frozen: {policy, sha256}``): the model
is then that file, not a fresh pretraining. :func:`check_frozen` returns every problem of such a
declaration (an unknown policy, a declared hash that is not the shipped one, shipped bytes that are not
what the index says, or a pretraining recipe in the config other than the one that made the file);
:func:`install` copies a verified policy into a model folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oar.files import sha256_file

FROZEN_DIR = Path(__file__).resolve().parent / "frozen"
INDEX = FROZEN_DIR / "policies.json"
WEIGHTS = "model.safetensors"
# the card and the index describe a policy; the files below are what a model folder needs
CARD = "CARD.md"


class FrozenPolicyError(ValueError):
    """A shipped policy is unknown, or its files are not the ones declared."""


def index() -> dict[str, Any]:
    """The shipped policies by name (``policies.json``); empty when none is shipped."""
    if not INDEX.is_file():
        return {}
    return json.loads(INDEX.read_text(encoding="utf-8"))["policies"]


def policy_dir(name: str) -> Path:
    policies = index()
    if name not in policies:
        raise FrozenPolicyError(f"no shipped policy {name!r}; shipped: {sorted(policies)}")
    return FROZEN_DIR / name


def mismatched_files(name: str) -> list[str]:
    """The files of a shipped policy whose bytes are not the ones its index entry hashes (missing files
    included), as 'file: why'."""
    entry = index()[name]
    folder = FROZEN_DIR / name
    bad = []
    for file, expected in sorted(entry["files"].items()):
        path = folder / file
        if not path.is_file():
            bad.append(f"{file}: missing")
        elif sha256_file(path) != expected:
            bad.append(f"{file}: sha256 {sha256_file(path)[:16]}..., the index says {expected[:16]}...")
    return bad


def weights_sha256(name: str) -> str:
    """The declared sha256 of a shipped policy's weights (its index entry)."""
    return index()[name]["files"][WEIGHTS]


def check_frozen(model: str, spec: Mapping[str, Any], pretrain: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems of ``models.<model>.frozen`` (``spec``: ``policy`` and ``sha256``), each (key, message).

    ``pretrain`` is the model's pretraining recipe as the workflow would run it (``models.<model>.pretrain``
    with its check's sampling settings and ``seed``): every key it sets must equal the recipe recorded
    for the shipped file, so that a config never calls a policy by a recipe that did not make it."""
    key = f"models.{model}.frozen"
    policies = index()
    name = spec.get("policy")
    if name not in policies:
        return [(f"{key}.policy", f"no shipped policy {name!r}; shipped: {sorted(policies)}")]
    declared, shipped = spec.get("sha256"), weights_sha256(name)
    if declared != shipped:
        return [(f"{key}.sha256", f"{declared!r} is not the shipped {name}'s weights ({shipped}): the design "
                                  "declared another file")]
    bad = mismatched_files(name)
    if bad:
        return [(f"{key}.sha256", f"the shipped {name} is not the file its index hashes: {'; '.join(bad)}")]
    recorded = policies[name]["recipe"]
    differ = [f"{k} {v!r} (shipped: {recorded.get(k)!r})" for k, v in sorted(pretrain.items()) if recorded.get(k) != v]
    if differ:
        return [(f"models.{model}.pretrain", f"the shipped {name} was pretrained by another recipe: "
                                             f"{', '.join(differ)}; drop {key} to pretrain this recipe")]
    return []


def install(name: str, out_dir: str | os.PathLike) -> Path:
    """Copy the shipped policy ``name`` into the model folder ``out_dir`` after checking every file's
    hash; written atomically (a staging folder, then a rename), so a failed copy leaves nothing."""
    bad = mismatched_files(name) if name in index() else [f"no shipped policy {name!r}"]
    if bad:
        raise FrozenPolicyError(f"shipped policy {name}: {'; '.join(bad)}")
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for file in index()[name]["files"]:
            if file != CARD:
                shutil.copyfile(FROZEN_DIR / name / file, staging / file)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
