"""Which of torch's attention kernels the scorers' forwards may use.

The scorers' forwards change shape from call to call: packed copies of different widths over prefixes of
different lengths (OAR-P), each step's probes at its own responses' lengths (OAR-G), and prompts of
another length every step, while cuDNN's attention kernel, torch's choice on Hopper GPUs, builds an
execution graph for every new shape (``oar.sdpa_kernels``). On an H200 the scorers' forwards ran
cuDNN's kernel and spent most of each scoring call with the GPU idle: OAR-G about 0.4 s of device work in
a 3.6 s call, exact OAR-P about 4 s in 11.4 s (``perf/gpu_check.py``'s profiles).

Scoring therefore runs with cuDNN's kernel disabled by default (``oar.scoring_attention: no_cudnn``).
``torch_default`` leaves torch's choice, to measure one against the other (``perf/gpu_check.py
--attention-ab``). The training update keeps torch's choice (its shapes repeat within a step). On a CPU
the choice is unchanged either way: cuDNN is a CUDA kernel.
"""

from __future__ import annotations

import contextlib

from oar.method.names import ATTENTION_CHOICES
from oar.sdpa_kernels import without_cudnn_attention


def scoring_attention(choice: str = "no_cudnn"):
    """Context in which the scorers' forwards (and OAR-G's backward) run: every SDPA kernel but cuDNN's
    (``no_cudnn``), or torch's own choice (``torch_default``)."""
    if choice == "no_cudnn":
        return without_cudnn_attention()
    if choice == "torch_default":
        return contextlib.nullcontext()
    raise ValueError(f"scoring attention must be one of {ATTENTION_CHOICES}, got {choice!r}")
