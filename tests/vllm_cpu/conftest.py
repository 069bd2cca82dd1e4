"""vLLM on CPU (``make test-vllm``, environment ``.venv-vllm``). Every module here skips where vLLM is
not importable, so plain ``make test`` in ``.venv`` reports them as skipped. (The folder is not named
``vllm``: pytest puts ``tests/`` on sys.path, where a ``vllm`` folder would import as a namespace package
and defeat the skip.)

vLLM's CPU backend reads its settings from the environment when it is imported, hence set here:
a 1 GiB KV cache (its default, 4 GiB per engine, is too much beside the other developers' jobs) and
no graph compilation (``VLLM_CPU_CI_ENV``: start-up 30-70 s instead of minutes).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_PROBLEMS = [f"What is {a} + {b}? Tom has {a} apples and buys {b} more." for a, b in
           [(3, 4), (12, 7), (25, 25), (8, 1), (30, 2), (5, 19), (41, 3), (16, 16), (9, 27), (2, 48), (14, 6),
            (33, 10)]]


@pytest.fixture(scope="session")
def problems() -> list[str]:
    """Twelve short word problems (the tiny model's answers mean nothing; the tokens are compared)."""
    return list(_PROBLEMS)


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory) -> Path:
    """The tiny random model with head_dim 32 (vLLM's CPU attention rejects the default 16), saved as a folder."""
    from oar.models.tiny import build_tiny_model

    model, tokenizer = build_tiny_model(head_dim=32)
    tokenizer.clean_up_tokenization_spaces = False
    out = tmp_path_factory.mktemp("models") / "tiny-hd32"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
