"""Loading a model folder: its tokenizer and its causal LM, in the dtype, on the device and with the
torch thread count a caller asks for.

The workflow scripts, the benches and the evaluation's generator load models through this one function.
Each option's default leaves that part as transformers leaves it, so a caller states only what it sets.
"""

from __future__ import annotations

import os
from typing import Any


def load_model(model_dir: str | os.PathLike, dtype: Any = None, device: str | None = None,
               threads: int | None = None, eval_mode: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) of a model folder.

    ``dtype``: a torch dtype, its name (``"float32"``, ``"bfloat16"``), ``"auto"`` (the checkpoint's own)
    or None (transformers' default). ``device``: where the model goes (``"auto"``: CUDA when there is
    one, else the CPU); None leaves it where transformers loads it (the CPU). ``threads``: torch's CPU
    thread count, set before loading; None or 0 keeps torch's own choice. ``eval_mode``: dropout off.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(int(threads))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, **({} if dtype is None else {"dtype": dtype}))
    if device is not None:
        model = model.to(device)
    if eval_mode:
        model.eval()
    return model, tokenizer
