"""The model card of an OAR run's checkpoints: what the model is, how it was trained, what to cite.

TRL writes a card (``README.md``) into the trainer's output folder at every checkpoint from its trainer's
name and paper; for ``OARTrainer`` that card would call the model a GRPO model of an unknown base
(``"None"`` where the base is a local folder). :func:`write_model_card` writes OAR's instead: the base model
(a hub id or the folder it was loaded from), the method and every OAR setting it trained with, the GRPO
settings that shape the update, the framework versions, and the OAR paper with GRPO's and TRL's citations.
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


def card_text(trainer: Any, model_name: str | None = None, dataset_name: str | None = None,
              tags: str | list[str] | None = None) -> ModelCard:
    """The card of a trainer's model (an ``OARTrainer``: its ``args`` is an ``OARConfig``)."""
    args = trainer.args
    method = args.oar_method
    hub_id, base = base_model_of(trainer.accelerator.unwrap_model(trainer.model))
    extra = {tags} if isinstance(tags, str) else set(tags or ())
    data = ModelCardData(base_model=hub_id, datasets=dataset_name, library_name="transformers",
                         model_name=model_name, tags=sorted({"oar", "trl", "grpo", "token-level-credit", *extra}))
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
- PyTorch: {_version("torch")}

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
                     dataset_name: str | None = None, tags: str | list[str] | None = None) -> Path:
    """Write the card to ``folder/README.md``; returns its path."""
    path = Path(folder) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card_text(trainer, model_name, dataset_name, tags).save(str(path))
    return path
