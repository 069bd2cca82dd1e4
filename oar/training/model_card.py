"""The model card of an OAR run's checkpoints: what the model is, how it was trained, what to cite.

TRL writes a card (``README.md``) into the trainer's output folder at every checkpoint, and PEFT writes or
updates one in every folder an adapter is saved to; both put their facts in the card's metadata (TRL: the
base model, the dataset, its tags; PEFT: ``library_name: peft``, the base model, the adapter's tags). Their
text would call the model a GRPO model of an unknown base (``"None"`` where the base is a local folder).
:func:`write_model_card` keeps the metadata already in the folder's card and in TRL's card of the run,
adds OAR's (its tags, the base model where none is named), and writes OAR's text: what the folder holds (a
full fine-tune, or a PEFT adapter of a base model and how to load it), the base model, the method and every
OAR setting it trained with, the GRPO settings that shape the update, the framework versions, and the OAR
paper with GRPO's and TRL's citations.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

# The paper this project implements (CITATION.cff's preferred-citation; a test keeps them equal).
PAPER = {
    "title": "Outcome-Grounded Advantage Reshaping for Fine-Grained Credit Assignment in Mathematical Reasoning",
    "arxiv": "2601.07408",
    "authors": ("Li, Z.", "Kang, L.", "Xiao, F.", "Xing, L.", "Si, Q.", "Li, Z.", "Gong, W.", "Yang, D.", "Xiao, Y.",
                "Guo, H."),
    "year": 2026,
}
GRPO_PAPER = {"title": "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
              "arxiv": "2402.03300"}
DISTRIBUTION = "oar-trl"  # the package's name on the package index
# The GRPO settings a reader needs to know how the update was shaped (the card lists every OAR setting).
GRPO_KEYS = ("learning_rate", "max_steps", "num_generations", "per_device_train_batch_size",
             "gradient_accumulation_steps", "max_completion_length", "temperature", "loss_type", "beta", "epsilon",
             "scale_rewards", "top_entropy_quantile", "seed")

METHOD_LINES = {
    "grpo": "GRPO's uniform token advantages (no reshaping): the baseline",
    "oar_p": "OAR-P: each reasoning token scored by how far substituting it moves the final-answer distribution",
    "oar_g": "OAR-G: each reasoning token scored by |gradient x input| of the final-answer distribution's "
             "divergence at a noised point",
    "ktae_rule": "KTAE's own advantage rule (arXiv 2505.16826): GRPO's advantage plus the signed key-token value of "
                 "each completion token, A_i + v_t, with no gate (the gate described next is not used)",
}


def bibtex(paper: dict[str, Any] = PAPER) -> str:
    authors = " and ".join(paper["authors"])
    return (f"@article{{oar{paper['year']},\n  title   = {{{paper['title']}}},\n  author  = {{{authors}}},\n"
            f"  year    = {{{paper['year']}}},\n  eprint  = {{arXiv:{paper['arxiv']}}},\n"
            f"  url     = {{https://arxiv.org/abs/{paper['arxiv']}}}\n}}")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def base_model_of(model: Any) -> tuple[str | None, str]:
    """(the hub id of the base model where it came from the hub, else None; how the card names it)."""
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if not name:
        return None, "a model given in memory (no name or path recorded in its config)"
    if os.path.isdir(name):
        return None, f"the local model folder `{name}`"
    return name, f"[{name}](https://huggingface.co/{name})"


def adapter_of(model: Any) -> tuple[str, str | None] | None:
    """(the PEFT method, e.g. ``LORA``; the base model's name or path) where ``model`` is a PEFT model, else None."""
    config = getattr(model, "peft_config", None)
    if not isinstance(config, dict) or not config:
        return None
    active = config.get(getattr(model, "active_adapter", "default")) or next(iter(config.values()))
    kind = getattr(active, "peft_type", "PEFT")
    return str(getattr(kind, "value", kind)), getattr(active, "base_model_name_or_path", None)


# TRL writes `licence: license` (a placeholder under a key the hub does not read); the rest of its metadata stays.
_NOT_KEPT = ("licence",)


def merged_metadata(ours: ModelCardData, *cards: ModelCard) -> ModelCardData:
    """``ours`` over the metadata of ``cards`` (TRL's, PEFT's, an earlier OAR card), in order: their keys are
    kept, the tags are the union, the base model and library are theirs where they name one."""
    merged: dict[str, Any] = {}
    tags: set[str] = set()
    for card in cards:
        data = {k: v for k, v in card.data.to_dict().items() if v is not None and k not in _NOT_KEPT}
        tags |= set(data.pop("tags", None) or ())
        merged.update(data)
    for key, value in ours.to_dict().items():
        if value is None or (key in ("base_model", "library_name") and merged.get(key)):
            continue
        merged[key] = value
    merged["tags"] = sorted(tags | set(ours.tags or ()))
    return ModelCardData(**merged)


def existing_cards(*folders: str | os.PathLike) -> list[ModelCard]:
    """The cards (``README.md``) already in ``folders``, each folder once, in order."""
    paths = dict.fromkeys((Path(folder) / "README.md").resolve() for folder in folders)
    return [ModelCard.load(str(path)) for path in paths if path.is_file()]


def card_text(trainer: Any, model_name: str | None = None, dataset_name: str | None = None,
              tags: str | list[str] | None = None, keep: tuple[ModelCard, ...] = ()) -> ModelCard:
    """The card of a trainer's model (an ``OARTrainer``: its ``args`` is an ``OARConfig``), with the
    metadata of the cards ``keep`` (TRL's, PEFT's) merged under OAR's."""
    args = trainer.args
    method = args.oar_method
    model = trainer.accelerator.unwrap_model(trainer.model)
    hub_id, base = base_model_of(model)
    adapter = adapter_of(model)
    extra = {tags} if isinstance(tags, str) else set(tags or ())
    ours = ModelCardData(base_model=hub_id, datasets=dataset_name,
                         library_name="peft" if adapter else "transformers", model_name=model_name,
                         tags=sorted({"oar", "trl", "grpo", "token-level-credit", *extra}))
    if adapter:
        # PEFT names the base model by its recorded name or path; so does the card's metadata
        ours.base_model = ours.base_model or (adapter[1] if adapter[1] and not os.path.isdir(adapter[1]) else None)
    data = merged_metadata(ours, *keep)
    if adapter:
        data.library_name = "peft"
        holds = (f"This folder holds a **PEFT adapter** ({adapter[0]}) of that base model, not a full model: "
                 "`adapter_config.json` and the adapter's weights. Load it with `peft.AutoPeftModelForCausalLM"
                 ".from_pretrained(folder)`, or `peft.PeftModel.from_pretrained(base, folder)` over the base "
                 "model.")
    else:
        holds = ("This folder holds the full fine-tuned model: load it with "
                 "`AutoModelForCausalLM.from_pretrained(folder)`.")
    settings = args.oar_settings()
    rows = "\n".join(f"| `{name}` | `{value!r}` |" for name, value in vars(settings).items())
    grpo = "\n".join(f"| `{key}` | `{getattr(args, key)!r}` |" for key in GRPO_KEYS if hasattr(args, key))
    what = METHOD_LINES.get(method, f"the scorer `{method}` through OAR's bi-level gate")
    body = f"""---
{data.to_yaml()}
---

# {model_name or Path(args.output_dir).name}

This model is {base} fine-tuned with **OAR** (outcome-grounded advantage reshaping, arXiv
[{PAPER['arxiv']}](https://arxiv.org/abs/{PAPER['arxiv']})) on top of GRPO, using `OARTrainer` of the
`{DISTRIBUTION}` package (a subclass of TRL's `GRPOTrainer`){f" on the `{dataset_name}` dataset" if dataset_name else ""}.

**Method: `{method}`**, {what}. OAR scores each reasoning token, turns the scores into weights with a bi-level
gate that keeps each response's total advantage, and trains on the token advantages w_t x A_i; nothing
else of GRPO changes.

{holds}

## OAR settings

| setting | value |
| --- | --- |
{rows}

## GRPO settings

| setting | value |
| --- | --- |
{grpo}

## Framework versions

- {DISTRIBUTION}: {_version(DISTRIBUTION)}
- TRL: {_version("trl")}
- Transformers: {_version("transformers")}
- PyTorch: {_version("torch")}{f"{chr(10)}- PEFT: {_version('peft')}" if adapter else ""}

## Citations

The method:

```bibtex
{bibtex()}
```

GRPO ([DeepSeekMath](https://arxiv.org/abs/{GRPO_PAPER['arxiv']})) and TRL, which this trainer extends:

```bibtex
@article{{shao2024deepseekmath,
  title   = {{{GRPO_PAPER['title']}}},
  author  = {{Zhihong Shao and Peiyi Wang and Qihao Zhu and Runxin Xu and Junxiao Song and Mingchuan Zhang and Y. K. Li and Y. Wu and Daya Guo}},
  year    = {{2024}},
  eprint  = {{arXiv:{GRPO_PAPER['arxiv']}}}
}}
@software{{vonwerra2020trl,
  title   = {{TRL: Transformers Reinforcement Learning}},
  author  = {{von Werra, Leandro and others}},
  url     = {{https://github.com/huggingface/trl}},
  year    = {{2020}}
}}
```
"""  # noqa: E501
    return ModelCard(body)


def write_model_card(trainer: Any, folder: str | os.PathLike, model_name: str | None = None,
                     dataset_name: str | None = None, tags: str | list[str] | None = None,
                     earlier: tuple[ModelCard, ...] = ()) -> Path:
    """Write the card to ``folder/README.md``, keeping the metadata of the cards ``earlier`` (read before a
    save that rewrote them: PEFT replaces a card's tags), of TRL's card in the run's output folder and of
    the card already in ``folder`` (PEFT's, or TRL's); returns its path."""
    path = Path(folder) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = (*earlier, *existing_cards(trainer.args.output_dir, folder))
    card_text(trainer, model_name, dataset_name, tags, keep=keep).save(str(path))
    return path
