"""Ship a pretrained testbed policy with the package: its model files, card and index entry (torch-free).

A maintainer's step, run once per policy from what the workflow wrote:

    python -m oar.models.ship chain_f1 --model results/models/chain_f1 \
        --summary results/models/chain_f1.summary.json \
        --untrained results/eval/chain_f1/base/chain_test/summary.json \
        --config config/config.yaml --chosen-by "make run's policy: ..."

It copies the model folder's files into ``oar/models/frozen/<name>/``, writes the card ``CARD.md`` (how it
was made: the commit, the config, the CPU kernels and package versions of the job that pretrained it; its
recipe; its untrained accuracy; size; sha256; licence) and adds the entry to ``policies.json``, which
:mod:`oar.models.frozen` reads. The model summary's provenance is the record of the job that pretrained
it, so the card states what that job ran with, not what this machine runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oar.files import atomic_write_json, atomic_write_text, sha256_file
from oar.models.frozen import CARD, FROZEN_DIR, INDEX, WEIGHTS

MODEL_FILES = ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
               "tokenizer_config.json", "chat_template.jinja", "pretrain.json")
LICENCE = "MIT (the project's LICENSE; the weights were trained by the project on generated data)"


def recipe_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The pretraining recipe a model summary's job ran: its pretrain settings and seed."""
    args = summary["provenance"]["args"]
    if summary.get("source") != "chain" or not args.get("pretrain"):
        raise ValueError("the summary is not of a pretrained testbed policy (source 'chain')")
    return {**json.loads(args["pretrain"]), "seed": int(args["seed"])}


def card_text(name: str, entry: Mapping[str, Any]) -> str:
    made, untrained = entry["made_with"], entry["untrained"]
    kernels = made["cpu_kernels"]
    recipe = ", ".join(f"{k} {v}" for k, v in sorted(entry["recipe"].items()))
    files = "\n".join(f"| `{f}` | {entry['sizes'][f]:,} | `{h}` |" for f, h in sorted(entry["files"].items()))
    return (
        f"# Frozen policy `{name}`\n\n"
        f"{entry['summary']}\n\n"
        "## What it is\n\n"
        f"A {entry['parameters']:,}-parameter Llama pretrained from scratch by next-token prediction on the chain "
        "task (`oar.training.pretrain`), shipped so that every machine starts RL from the same weights. "
        f"Its untrained held-out accuracy: **{100 * untrained['accuracy']:.2f}%** [{100 * untrained['ci95'][0]:.1f}, "
        f"{100 * untrained['ci95'][1]:.1f}] on `{untrained['benchmark']}` ({untrained['problems']} problems x "
        f"{untrained['samples']} samples at temperature {untrained['temperature']:g}).\n\n"
        "## How it was made\n\n"
        f"- Recipe (`models.<name>.pretrain` and `seed`): {recipe}.\n"
        f"- Config: `{made['config']}`; commit `{made['commit']}`; made {made['created_utc']}.\n"
        f"- CPU kernels: torch capability {kernels.get('capability')}, MKL branch {kernels.get('mkl_branch')} "
        f"(`OAR_CPU_KERNELS={kernels.get('OAR_CPU_KERNELS')}`); {made['threads']} threads; "
        + ", ".join(f"{k} {v}" for k, v in made["packages"].items()) + ".\n"
        f"- Chosen by: {entry['chosen_by']}\n\n"
        "## Files\n\n| file | bytes | sha256 |\n| --- | ---: | --- |\n" + files + "\n\n"
        f"Size in all: {entry['size_bytes']:,} bytes. A config names it as `models.<name>.frozen: {{policy: {name}, "
        f"sha256: {entry['files'][WEIGHTS]}}}`; the workflow checks every file's hash before it uses the policy "
        "and stops when one differs. `make rebuild-policies` pretrains the recipe again and says whether the "
        "bits match (they can only where the same kernels run: an Intel CPU with AVX2 for `avx2`).\n\n"
        f"## Licence\n\n{LICENCE}.\n")


def ship(name: str, model: str | Path, summary: Mapping[str, Any], untrained: Mapping[str, Any], config: str,
         chosen_by: str, one_line: str) -> dict[str, Any]:
    """Copy a pretrained policy into ``oar/models/frozen/<name>/`` with its card and index entry; returns the
    entry. ``summary``: the model's summary.json (prepare_model); ``untrained``: its base evaluation's
    summary.json."""
    model = Path(model)
    missing = [f for f in MODEL_FILES if not (model / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{model}: missing {missing}")
    out = FROZEN_DIR / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in MODEL_FILES:
        shutil.copyfile(model / f, out / f)
    record = summary["provenance"]
    entry = {
        "summary": one_line,
        "files": {f: sha256_file(out / f) for f in MODEL_FILES},
        "sizes": {f: (out / f).stat().st_size for f in MODEL_FILES},
        "recipe": recipe_of(summary),
        "parameters": summary["pretrain"]["parameters"],
        "made_with": {"commit": record["git"]["commit"], "config": config, "created_utc": record["created_utc"],
                      "cpu_kernels": record["cpu_kernels"], "threads": record["args"].get("threads"),
                      "packages": {k: record["packages"].get(k) for k in ("torch", "transformers")}},
        "untrained": {"benchmark": untrained["benchmark"], "accuracy": untrained["pass@1"],
                      "ci95": untrained["pass@1_ci95"], "problems": untrained["num_problems"],
                      "samples": untrained["samples_per_problem"], "temperature": untrained["temperature"]},
        "chosen_by": chosen_by,
        "licence": LICENCE,
    }
    entry["size_bytes"] = sum(entry["sizes"].values())
    atomic_write_text(out / CARD, card_text(name, entry))
    policies = json.loads(INDEX.read_text(encoding="utf-8"))["policies"] if INDEX.is_file() else {}
    policies[name] = entry
    atomic_write_json(INDEX, {"about": "shipped testbed policies (oar.models.frozen); each folder's CARD.md says "
                                       "how it was made", "policies": dict(sorted(policies.items()))})
    return entry


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Ship a pretrained testbed policy with the package.")
    parser.add_argument("name")
    parser.add_argument("--model", required=True, help="the pretrained model folder (results/models/<name>)")
    parser.add_argument("--summary", required=True, help="its summary.json (results/models/<name>.summary.json)")
    parser.add_argument("--untrained", required=True, help="its base evaluation's summary.json")
    parser.add_argument("--config", required=True, help="the config that pretrained it")
    parser.add_argument("--chosen-by", required=True, help="why this policy: the rule or run it comes from")
    parser.add_argument("--one-line", required=True, help="the card's first line: what the policy is for")
    args = parser.parse_args(argv)
    summary = json.loads(Path(args.summary).read_text(encoding="utf-8"))
    untrained = json.loads(Path(args.untrained).read_text(encoding="utf-8"))
    entry = ship(args.name, args.model, summary, untrained, args.config, args.chosen_by, args.one_line)
    print(f"shipped {args.name}: {entry['files'][WEIGHTS]} ({entry['size_bytes']:,} bytes)")


if __name__ == "__main__":
    main()
