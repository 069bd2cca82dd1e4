"""Attention kernels for work whose shapes change call after call.

On Hopper GPUs torch's ``scaled_dot_product_attention`` picks cuDNN's attention kernel, which builds an
execution graph for every new shape before it runs (tens of milliseconds on the host, cached by shape).
Work whose shapes keep changing pays that build again and again:

- transformers' ``generate`` attends over a key length one longer at every decoded token, so a process's
  first generation to a length builds one graph per token (on an H200, a 1.5B model's first 1,024-token
  generation took about 3x its later ones);
- the scorers' forwards are packed copies of changing widths over prefixes of changing lengths
  (``oar.method.attention_kernels``).

:func:`without_cudnn_attention` leaves every other SDPA kernel to torch: flash attention where no mask is
needed, the memory-efficient kernel where one is, math otherwise; none builds anything per shape. On a
CPU nothing changes: cuDNN is a CUDA kernel.
"""

from __future__ import annotations

from torch.nn.attention import SDPBackend, sdpa_kernel

NO_CUDNN_KERNELS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def without_cudnn_attention():
    """Context in which ``scaled_dot_product_attention`` may use every kernel but cuDNN's; torch's own
    choice is back on leaving it."""
    return sdpa_kernel(list(NO_CUDNN_KERNELS))
