"""The wait for the slowest rank: in a step of several processes every rank scores its own rows, and the
update's collectives make every rank wait for the one that scored most.

Only rows with a non-zero advantage are scored (unless ``oar.score_all``), and a GRPO group's rows are
scored together or not at all: its rewards all agree (advantage 0 for every row) or they do not. A rank
holding ``g`` whole groups, each mixed with probability ``q`` (the scored share), scores ``X ~ Binomial(g,
q)`` groups; the step waits for ``max`` of ``X`` over the ``r`` ranks. Scoring's time grows with the rows it
scores (OAR-P's copies and model calls, OAR-G's micro-batches), so a step that the plan prices at the mean
rank's scoring takes

    E[max_r X_r] / E[X] = sum_{k >= 0} (1 - F(k)^r) / (g q)        (F: Binomial(g, q)'s distribution)

times as long. With 16 groups on each of 4 ranks (the paper's 7B runs): 1.26 at a share of 0.5, 1.45 at
0.25. Where a scoring call also has a fixed time (a small model on a CPU), the ratio is smaller, and
``slowest_rank_factor`` takes it. The scoring time of a logged run gives the same ratio:
``time_score_max_s`` (the slowest rank's) over ``time_score_s`` (the mean rank's), summed over its steps
(``perf/rank_wait.py`` measures it on CPU).
"""

from __future__ import annotations

import math


def slowest_rank_factor(groups_per_rank: int, share: float, ranks: int, fixed: float = 0.0) -> float:
    """E[the slowest of ``ranks`` ranks' scoring time] / E[one rank's], each rank holding ``groups_per_rank``
    whole groups, each scored with probability ``share``, and scoring ``k > 0`` groups taking ``fixed + k``
    (in the time of one group; none when ``k`` is 0, the scorer is not called): with ``fixed`` 0,
    E[most groups a rank scores] / E[groups a rank scores]. 1 on one rank or at a share of 1."""
    if ranks < 1 or groups_per_rank < 1:
        raise ValueError(f"ranks ({ranks}) and groups per rank ({groups_per_rank}) must be at least 1")
    if not 0 < share <= 1:
        raise ValueError(f"scored share {share} is not in (0, 1]")
    if ranks == 1 or share == 1:
        return 1.0
    g = groups_per_rank
    pmf = [math.comb(g, k) * share**k * (1 - share) ** (g - k) for k in range(g + 1)]
    cdf = [sum(pmf[: k + 1]) for k in range(g + 1)]
    # the slowest rank scores the most groups: P(max = k) = F(k)^r - F(k - 1)^r
    most = [min(cdf[k], 1.0) ** ranks - (min(cdf[k - 1], 1.0) ** ranks if k else 0.0) for k in range(g + 1)]

    def time(k: int) -> float:
        return fixed + k if k else 0.0

    return sum(p * time(k) for k, p in enumerate(most)) / sum(p * time(k) for k, p in enumerate(pmf))


def logged_ratio(steps: list[dict]) -> float | None:
    """The slowest rank's scoring time over the mean rank's, summed over a run's logged steps
    (``metrics.jsonl`` lines with ``time_score_max_s`` and ``time_score_s``): what the run waited on
    average, the steps weighted by their scoring time. None when no step scored."""
    slowest = sum(s["time_score_max_s"] for s in steps if s.get("time_score_max_s") is not None)
    mean = sum(s["time_score_s"] for s in steps if s.get("time_score_s") is not None)
    return slowest / mean if mean > 0 else None
