"""Analysis metrics of method.md section 8: credit concentration, oracle recall, proxy fidelity, accuracy.

Conventions shared by every function here:

* top-k of a score vector means the k largest scores, ties broken by the lower index first (a stable
  descending sort), so results are deterministic.
* k for "top 10%" of n items is ``default_k(n) = max(1, ceil(0.1 * n))``.
* nan marks a value that is undefined for its input (no tokens, zero mass, constant ranks, empty
  oracle); callers average with ``nanmean`` and report how many were undefined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

from oar.method.probes import Probe

# ---------------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------------


def _check_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")


def _check_token_pair(values: Tensor, mask: Tensor, name: str) -> None:
    if not isinstance(values, Tensor) or not isinstance(mask, Tensor):
        raise ValueError(f"{name} and mask must be torch tensors")
    if values.dim() != 2:
        raise ValueError(f"{name} must be 2-D [B, T], got shape {tuple(values.shape)}")
    if not values.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got {values.dtype}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    if mask.shape != values.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from {name} shape {tuple(values.shape)}")


# ceil(fraction * n) rounds the product to 9 decimals first: in binary floating point
# 0.07 * 100 = 7.000000000000001, whose plain ceil would be 8.


def _ceil_fraction(fraction: float, n: Tensor) -> Tensor:
    """ceil(fraction * n) elementwise for an integer tensor n, as a long tensor."""
    return torch.ceil(torch.round(fraction * n.to(torch.float64), decimals=9)).to(torch.long)


def _as_vector(values, name: str) -> np.ndarray:
    """A 1-D float64 array of finite values from a sequence or tensor."""
    if isinstance(values, Tensor):
        values = values.detach().cpu().to(torch.float64).numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains nan or inf")
    return array


def _top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores; ties go to the lower index (stable sort of the negated scores)."""
    return np.argsort(-scores, kind="stable")[:k]


# ---------------------------------------------------------------------------------------------------
# Credit concentration of token weights / advantages
# ---------------------------------------------------------------------------------------------------


def ess_ratio(weights: Tensor, mask: Tensor) -> Tensor:
    """Effective-sample-size ratio of each row's token weights.

    For row i with masked tokens t = 1..T_i (T_i = number of True entries of ``mask[i]``)::

        ess_i = (sum_t w_t)^2 / (T_i * sum_t w_t^2)

    In (0, 1] for non-negative weights (Cauchy-Schwarz); 1 exactly when all weights are equal (GRPO);
    smaller when credit is concentrated on few tokens. Padding (mask False) is ignored whatever its
    value. nan for rows with T_i == 0 or all-zero weights.

    Args:
        weights: [B, T] floating tensor.
        mask: [B, T] bool tensor, True on the tokens that count.
    Returns:
        [B] tensor in ``weights``' dtype, promoted to at least float32.
    """
    _check_token_pair(weights, mask, "weights")
    dtype = torch.promote_types(weights.dtype, torch.float32)
    counts = mask.sum(dim=-1).to(dtype)
    masked = torch.where(mask, weights.to(dtype), 0.0)
    ratio = masked.sum(dim=-1) ** 2 / (counts * (masked**2).sum(dim=-1))
    return torch.where(counts > 0, ratio, torch.nan)


def top_mass(advantages: Tensor, mask: Tensor, fraction: float = 0.1) -> Tensor:
    """Share of each row's absolute advantage mass held by its top ``ceil(fraction * T_i)`` tokens.

    For row i with masked tokens t = 1..T_i and k_i = ceil(fraction * T_i)::

        top_mass_i = (sum of the k_i largest |A_t|) / (sum_t |A_t|)

    About ``fraction`` for uniform advantages (GRPO gives ~0.10 at fraction 0.1), 1 when a single token
    holds all the mass. nan for rows with T_i == 0 or zero total mass. Padding is ignored.

    Args:
        advantages: [B, T] floating tensor.
        mask: [B, T] bool tensor, True on the tokens that count.
        fraction: share of tokens in the top group, in (0, 1].
    Returns:
        [B] tensor in ``advantages``' dtype, promoted to at least float32.
    """
    _check_token_pair(advantages, mask, "advantages")
    _check_fraction(fraction)
    dtype = torch.promote_types(advantages.dtype, torch.float32)
    magnitude = torch.where(mask, advantages.to(dtype).abs(), 0.0)
    k = _ceil_fraction(fraction, mask.sum(dim=-1))
    # Padding holds 0, so after a descending sort the first k_i entries are the row's k_i largest.
    ordered = magnitude.sort(dim=-1, descending=True).values
    in_top = torch.arange(ordered.shape[-1], device=ordered.device) < k.unsqueeze(-1)
    total = magnitude.sum(dim=-1)
    share = torch.where(in_top, ordered, 0.0).sum(dim=-1) / total
    return torch.where(total > 0, share, torch.nan)


STEP_CREDIT = ("final_step_weight_share", "early_steps_weight_share", "final_step_token_share",
               "early_steps_token_share")


def step_credit_shares(weights: Tensor, probes: Sequence[Probe]) -> Tensor:
    """Where each response's credit sits among the steps the chain task's grammar parses: [B, 4] with the
    columns of ``STEP_CREDIT``.

    For response i with R reasoning tokens and weights w (the gate's, or GRPO's uniform 1s)::

        final_step_weight_share = sum of w over the last step's decisive tokens / sum_t w_t
        early_steps_weight_share = sum of w over the other decisive tokens   / sum_t w_t

    and the token shares are those tokens' counts over R: what uniform weights give, so a weight share
    above its token share is credit concentrated there. The mediator of the mechanism test: how much of
    the gate's weight a method puts on the restatement the answer is copied from. nan for a response
    without parsed positions (``Probe.decisive``/``final_step`` None), without reasoning, or whose
    reasoning weight is 0.

    Args:
        weights: [B, T] token weights on response positions (reasoning first, as ``Probe`` has it).
        probes: the B responses' probes, with the parsed positions attached.
    Returns:
        [B, 4] float64 tensor on the CPU.
    """
    if weights.dim() != 2 or weights.shape[0] != len(probes):
        raise ValueError(f"weights {tuple(weights.shape)} must be [B, T] for the {len(probes)} probes")
    host = weights.detach().to("cpu", torch.float64)
    shares = torch.full((len(probes), len(STEP_CREDIT)), torch.nan, dtype=torch.float64)
    for i, p in enumerate(probes):
        if p.decisive is None or p.final_step is None or p.reasoning_len == 0:
            continue
        row = host[i, : p.reasoning_len]
        total = row.sum()
        if total <= 0:
            continue
        final = sorted(set(p.final_step))
        early = sorted(set(p.decisive) - set(p.final_step))
        shares[i] = torch.stack([row[final].sum() / total, row[early].sum() / total,
                                 torch.tensor(len(final) / p.reasoning_len, dtype=torch.float64),
                                 torch.tensor(len(early) / p.reasoning_len, dtype=torch.float64)])
    return shares


# ---------------------------------------------------------------------------------------------------
# Token rankings against the oracle and against OAR-P
# ---------------------------------------------------------------------------------------------------


def default_k(num_reasoning_tokens: int, fraction: float = 0.1) -> int:
    """k for "the top ``fraction``" of R items: ``max(1, ceil(fraction * R))``."""
    if isinstance(num_reasoning_tokens, bool) or not isinstance(num_reasoning_tokens, int | np.integer):
        raise ValueError(f"num_reasoning_tokens must be an int, got {type(num_reasoning_tokens).__name__}")
    if num_reasoning_tokens < 0:
        raise ValueError(f"num_reasoning_tokens must be >= 0, got {num_reasoning_tokens}")
    _check_fraction(fraction)
    return max(1, math.ceil(round(fraction * num_reasoning_tokens, 9)))


def recall_at_k(scores: Sequence[float] | Tensor, oracle: set[int] | Sequence[int], k: int) -> float:
    """Oracle causal-token recall of one response's token scores.

    ``recall@k = |top-k(scores) ∩ oracle| / min(k, |oracle|)``, where top-k takes the k highest scores
    with ties broken by the lower index first, and ``oracle`` holds the indices (into ``scores``) of the
    causal tokens. Dividing by min(k, |oracle|) makes a perfect ranking score 1 even when there are
    fewer oracle tokens than k. k larger than ``len(scores)`` takes every token. nan when the oracle
    is empty.
    """
    values = _as_vector(scores, "scores")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    causal = {int(i) for i in oracle}
    if any(i < 0 or i >= len(values) for i in causal):
        raise ValueError(f"oracle indices must lie in [0, {len(values)}), got {sorted(causal)}")
    if not causal:
        return math.nan
    hits = causal.intersection(_top_k_indices(values, k).tolist())
    return len(hits) / min(k, len(causal))


def _tie_groups(values: np.ndarray) -> list[np.ndarray]:
    """The indices of equal scores, highest score first."""
    levels, inverse = np.unique(-values, return_inverse=True)
    return [np.flatnonzero(inverse == g) for g in range(len(levels))]


def topk_hits(scores: Sequence[float] | Tensor, positions: set[int] | Sequence[int], k: int) -> float:
    """How many of ``positions`` the top ``k`` of ``scores`` holds, in expectation over the orders of tied
    scores (each order of a tie equally likely): the groups of equal scores above the k-th place count
    whole, the group that straddles it in proportion to the places left (``hits * places / size``). A
    scorer gains nothing from ties (where :func:`recall_at_k` breaks them by position)."""
    values = _as_vector(scores, "scores")
    wanted = {int(i) for i in positions}
    if any(i < 0 or i >= len(values) for i in wanted):
        raise ValueError(f"positions must lie in [0, {len(values)}), got {sorted(wanted)}")
    left, hits = int(k), 0.0
    for group in _tie_groups(values):
        if left <= 0:
            break
        inside = sum(int(i) in wanted for i in group)
        hits += inside * min(1.0, left / len(group))
        left -= len(group)
    return hits


def average_precision(scores: Sequence[float] | Tensor, relevant: set[int] | Sequence[int]) -> float:
    """Average precision of one response's ranking against its relevant tokens, in expectation over the
    orders of tied scores.

    Tokens are ranked by score, highest first; with ``m`` relevant tokens and ``r_d`` the rank of relevant
    token d, ``AP = (1/m) sum_d |{relevant tokens ranked at or above r_d}| / r_d``. Within a group of n
    tied tokens, r of them relevant, after B tokens (R_B relevant) of higher scores, a relevant token at
    place j of the group has precision ``(R_B + 1 + (r - 1)(j - 1)/(n - 1)) / (B + j)`` in expectation (each
    other relevant token of the group lies above it with probability (j - 1)/(n - 1)), and j is uniform.
    1 exactly when every relevant token scores above every other; nan when there is none.
    """
    values = _as_vector(scores, "scores")
    wanted = {int(i) for i in relevant}
    if any(i < 0 or i >= len(values) for i in wanted):
        raise ValueError(f"relevant indices must lie in [0, {len(values)}), got {sorted(wanted)}")
    if not wanted:
        return math.nan
    total, before, relevant_before = 0.0, 0, 0
    for group in _tie_groups(values):
        n, r = len(group), sum(int(i) in wanted for i in group)
        if r:
            places = np.arange(1, n + 1, dtype=np.float64)
            others = (r - 1) * (places - 1) / (n - 1) if n > 1 else 0.0
            total += r * float(np.mean((relevant_before + 1 + others) / (before + places)))
        before, relevant_before = before + n, relevant_before + r
    return total / len(wanted)


def expected_average_precision(num_tokens: int, num_relevant: int) -> float:
    """Average precision of a uniformly random ranking of R tokens of which m are relevant, in expectation::

        E[AP] = ((m - 1) / (R - 1) * (R - H_R) + H_R) / R,   H_R = sum_{i=1}^R 1/i

    (relevant token d at rank r counts itself, and each of the other m - 1 ranks above it with probability
    (r - 1) / (R - 1)). The chance line of :func:`average_precision`; nan when m is 0."""
    r_len, m = int(num_tokens), int(num_relevant)
    if not 0 <= m <= r_len:
        raise ValueError(f"need 0 <= num_relevant <= num_tokens, got {m} and {r_len}")
    if m == 0:
        return math.nan
    harmonic = float(np.sum(1.0 / np.arange(1, r_len + 1)))
    if r_len == 1:
        return 1.0
    return ((m - 1) / (r_len - 1) * (r_len - harmonic) + harmonic) / r_len


def outrank_share(scores: Sequence[float] | Tensor, one: int, others: Sequence[int]) -> float:
    """Share of the tokens ``others`` that token ``one`` outranks: ``(#{s_one > s_o} + #{s_one = s_o} / 2) /
    |others|``. 0.5 for a ranking that cannot tell them apart (equal or random scores); nan without others."""
    values = _as_vector(scores, "scores")
    positions = [int(one), *(int(o) for o in others)]
    if any(i < 0 or i >= len(values) for i in positions):
        raise ValueError(f"positions must lie in [0, {len(values)}), got {positions}")
    if not others:
        return math.nan
    mine, theirs = values[int(one)], values[[int(o) for o in others]]
    return float(((mine > theirs).sum() + 0.5 * (mine == theirs).sum()) / len(theirs))


def spearman(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor) -> float:
    """Spearman rank correlation: the Pearson correlation of the average ranks (ties share the mean
    rank). nan when either input is constant, since its ranks carry no order."""
    x, y = _as_vector(a, "a"), _as_vector(b, "b")
    if len(x) != len(y):
        raise ValueError(f"a and b must have the same length, got {len(x)} and {len(y)}")
    if len(x) < 2:
        raise ValueError(f"spearman needs at least 2 values, got {len(x)}")
    if np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(rankdata(x), rankdata(y))[0, 1])


def topk_overlap(a: Sequence[float] | Tensor, b: Sequence[float] | Tensor, fraction: float = 0.1) -> float:
    """``|top-k(a) ∩ top-k(b)| / k`` with ``k = default_k(len(a), fraction)`` (ties: lower index first)."""
    x, y = _as_vector(a, "a"), _as_vector(b, "b")
    if len(x) != len(y):
        raise ValueError(f"a and b must have the same length, got {len(x)} and {len(y)}")
    if len(x) == 0:
        raise ValueError("topk_overlap needs at least one value")
    k = default_k(len(x), fraction)
    shared = np.intersect1d(_top_k_indices(x, k), _top_k_indices(y, k))
    return len(shared) / k


# ---------------------------------------------------------------------------------------------------
# Benchmark accuracy
# ---------------------------------------------------------------------------------------------------


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k estimator of Chen et al. (2021) from n samples with c correct.

    ``pass@k = 1 - C(n - c, k) / C(n, k)``, the probability that k samples drawn without replacement
    include a correct one, computed as ``1 - prod_{i = n-c+1}^{n} (1 - k / i)`` to avoid huge binomials.
    """
    n, c = num_samples, num_correct
    for name, value in (("num_samples", n), ("num_correct", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= num_correct <= num_samples, got num_correct={c}, num_samples={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= num_samples, got k={k}, num_samples={n}")
    if n - c < k:
        return 1.0  # every k-subset contains a correct sample
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


@dataclass
class AccuracySummary:
    """Mean accuracy with a bootstrap confidence interval (see `mean_accuracy`)."""

    mean: float
    ci_low: float
    ci_high: float
    n_problems: int
    n_samples_per_problem: int


def mean_accuracy(correct, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> AccuracySummary:
    """mean@K accuracy over problems with a percentile-bootstrap interval.

    ``correct`` is a [P, K] array of 0/1 (or bool): K graded samples for each of P problems.
    ``mean = (1/P) sum_p (1/K) sum_j correct[p, j]``, which is pass@1 for K == 1 (greedy decoding) and
    the usual mean@K otherwise. The interval resamples problems (not samples) with replacement
    ``n_boot`` times and takes the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of
    the resampled means; ``seed`` fixes the resampling so that reports are reproducible.
    """
    matrix = np.asarray(correct.detach().cpu() if isinstance(correct, Tensor) else correct)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"correct must be a non-empty 2-D [problems, samples] array, got shape {matrix.shape}")
    if not np.all((matrix == 0) | (matrix == 1)):
        raise ValueError("correct must contain only 0/1 values")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise ValueError(f"n_boot must be an int >= 1, got {n_boot!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")

    per_problem = matrix.astype(np.float64).mean(axis=1)
    resampled = np.random.default_rng(seed).integers(0, len(per_problem), size=(n_boot, len(per_problem)))
    boot_means = per_problem[resampled].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot_means, [tail, 1.0 - tail])
    return AccuracySummary(
        mean=float(per_problem.mean()),
        ci_low=float(low),
        ci_high=float(high),
        n_problems=int(matrix.shape[0]),
        n_samples_per_problem=int(matrix.shape[1]),
    )
