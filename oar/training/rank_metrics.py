"""Step statistics over every rank's rows, not rank 0's share.

TRL's ``GRPOTrainer.log`` averages each process's own ``_metrics`` lists and only the main process
writes the log, so a statistic appended from one rank's rows describes that rank's quarter of the
batch. Each rank therefore contributes *sums* (a value summed over its rows, and the number of rows it
was summed over) and *maxima*; ``over_ranks`` adds the sums and takes the maxima across processes,
and a mean is then sum / count over all rows, never a mean of per-rank means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.distributed as dist


def _several_processes() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def over_ranks(
    sums: Mapping[str, float], maxima: Mapping[str, float], device: torch.device | str = "cpu"
) -> tuple[dict[str, float], dict[str, float]]:
    """``sums`` added and ``maxima`` maxed over all processes (unchanged on one process).

    Every rank must call this with the same keys, at the same point of the step: it is two all-reduces
    (keys in sorted order), on ``device`` (the process's accelerator under NCCL).
    """
    sum_keys, max_keys = sorted(sums), sorted(maxima)
    if not _several_processes():
        return {k: float(sums[k]) for k in sum_keys}, {k: float(maxima[k]) for k in max_keys}
    summed = torch.tensor([float(sums[k]) for k in sum_keys], dtype=torch.float64, device=device)
    # An unknown maximum (NaN) must not win or poison the others: -inf in the reduction, NaN if all are.
    maxed = torch.tensor([float(maxima[k]) for k in max_keys], dtype=torch.float64, device=device)
    maxed = maxed.nan_to_num(nan=-math.inf, posinf=math.inf, neginf=-math.inf)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    dist.all_reduce(maxed, op=dist.ReduceOp.MAX)
    maxed[maxed == -math.inf] = math.nan
    return dict(zip(sum_keys, summed.tolist())), dict(zip(max_keys, maxed.tolist()))


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when there is nothing to average over."""
    return numerator / denominator if denominator else float("nan")
