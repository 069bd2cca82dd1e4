"""The tests and corrections that decide a comparison: paired t-tests, Holm's correction, the minimum
detectable effect, evaluation noise against seed noise, censored steps to a threshold, and a trend test.

Every function takes plain numbers and returns plain numbers (nan where a quantity is undefined), so the
tables and the tests can check them against a direct computation.

- :func:`seed_interval`, :func:`seed_sd`: the mean over seeds with its 95% t-interval, and the SD over seeds.
- :func:`spread`: mean, SD, standard error and 95% t-interval of per-response values.
- :func:`clustered_mean`: the mean of values that come in clusters, with a cluster-robust interval.
- :func:`paired_t`: mean of per-seed differences, its 95% t-interval, the two-sided p-value of a paired
  t-test, the SD of the differences and the minimum detectable effect.
- :func:`holm`: Holm's step-down adjusted p-values over a family (the declared primary comparisons).
- :func:`mde`: the smallest true mean difference a paired t-test finds with 80% power.
- :func:`binomial_se`: a run's evaluation (sampling) noise, beside the seed-to-seed SD.
- :func:`kaplan_meier`: steps to a threshold where some runs never reach it (right-censored).
- :func:`welch`: the difference of two independent groups' means (Welch's t-test).
- :func:`blocked_trend`: the slope of accuracy on a reshaping strength with each seed as a block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8


def _clean(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)


def seed_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of per-seed values; low/high are a t-interval, nan with fewer than 2 values."""
    x = _clean(values)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def seed_sd(values: Sequence[float]) -> float:
    """Sample SD over seeds (nan with fewer than 2 values)."""
    x = _clean(values)
    return float(x.std(ddof=1)) if len(x) > 1 else math.nan


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, standard deviation, standard error and 95% t-interval of the defined values, with how many
    there are (``n``) and how many were undefined (``n_undefined``)."""
    x = _clean(values)
    n = len(x)
    _, low, high = seed_interval(list(x))
    return {
        "mean": float(x.mean()) if n else math.nan,
        "std": float(x.std(ddof=1)) if n > 1 else math.nan,
        "sem": float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
        "ci_low": low,
        "ci_high": high,
        "n": n,
        "n_undefined": len(values) - n,
    }


def clustered_mean(values: Sequence[float], clusters: Sequence, confidence: float = 0.95) -> dict[str, float]:
    """Mean of per-item values that come in clusters (a problem's responses), with a cluster-robust
    t-interval: with S_c the sum and n_c the count of cluster c's defined values, N = sum n_c and C clusters,
    ``mean = sum S_c / N``, ``var = C / (C - 1) * sum_c (S_c - mean n_c)^2 / N^2`` (the ratio estimator's
    linearised variance) and t with C - 1 degrees of freedom. Items of one cluster share their problem, so
    they count as one draw, not n_c. Also ``n`` (items), ``clusters`` and ``n_undefined``."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values for {len(clusters)} cluster labels")
    sums: dict = {}
    counts: dict = {}
    for v, c in zip(values, clusters):
        if v is None or math.isnan(v):
            continue
        sums[c] = sums.get(c, 0.0) + float(v)
        counts[c] = counts.get(c, 0) + 1
    n, k = sum(counts.values()), len(counts)
    out = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": n, "clusters": k,
           "n_undefined": len(values) - n}
    if n == 0:
        return out
    mean = sum(sums.values()) / n
    out["mean"] = mean
    if k < 2:
        return out
    var = k / (k - 1) * sum((sums[c] - mean * counts[c]) ** 2 for c in sums) / n**2
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1) * math.sqrt(var))
    out.update(ci_low=mean - half, ci_high=mean + half)
    return out


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect of a two-sided paired t-test at level ``alpha`` with ``power`` over
    ``n`` pairs whose differences have standard deviation ``sd``:
    ``(t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)`` (nan with fewer than 2 pairs)."""
    if n < 2 or sd is None or math.isnan(sd):
        return math.nan
    df = n - 1
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n))


def t_half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    """Half-width of the t-interval of a mean of ``n`` values with standard deviation ``sd``."""
    if n < 2 or sd is None or math.isnan(sd):
        return math.nan
    return float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n))


def paired_t(differences: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """A paired t-test on per-seed differences (method minus baseline on the same seed): ``n``,
    ``mean``, ``ci_low``/``ci_high`` (t-interval), ``sd`` (of the differences), ``p`` (two-sided, H0:
    mean 0) and ``mde`` (:func:`mde` at the observed SD). Undefined entries are nan; all differences
    equal (SD 0) gives p 0 for a non-zero mean and 1 for a zero mean."""
    d = _clean(differences)
    n = len(d)
    out = {"n": n, "mean": float(d.mean()) if n else math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "sd": math.nan, "p": math.nan, "mde": math.nan}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_half_width(sd, n, confidence)
    if se > 0:
        p = float(2 * stats.t.sf(abs(out["mean"]) / se, n - 1))
    else:
        p = 0.0 if out["mean"] != 0 else 1.0
    out.update(ci_low=out["mean"] - half, ci_high=out["mean"] + half, sd=sd, p=p, mde=mde(sd, n))
    return out


def welch(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """Mean of ``a`` minus mean of ``b`` for independent samples (e.g. runs of different policies):
    ``diff``, Welch's t-interval ``ci_low``/``ci_high`` and two-sided ``p`` (nan with fewer than 2 values
    in a group or no spread)."""
    a, b = _clean(a), _clean(b)
    out = {"diff": float(a.mean() - b.mean()) if len(a) and len(b) else math.nan,
           "ci_low": math.nan, "ci_high": math.nan, "p": math.nan}
    if len(a) < 2 or len(b) < 2 or (a.var(ddof=1) == 0 and b.var(ddof=1) == 0):
        return out
    test = stats.ttest_ind(a, b, equal_var=False)
    ci = test.confidence_interval(confidence)
    out.update(ci_low=float(ci.low), ci_high=float(ci.high), p=float(test.pvalue))
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: sort ascending, multiply the i-th smallest
    (0-based) by ``m - i``, carry the running maximum forward and cap at 1. A nan p-value stays nan and
    does not count in ``m``. Reject at level alpha exactly where the adjusted p is <= alpha."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def holm_alpha(m: int, alpha: float = ALPHA) -> float:
    """The strictest level Holm applies in a family of ``m`` (to its smallest p-value): alpha / m."""
    return alpha / m if m else math.nan


def binomial_se(accuracy: float, problems: int, samples: int = 1) -> float:
    """Evaluation (sampling) noise of one run's accuracy: the binomial standard error
    ``sqrt(p (1 - p) / (problems * samples))``. For the fixed set of problems evaluated (the noise that
    separates two evaluations of one policy) it is an upper bound: problems differ in difficulty, and the
    sampling variance of each, ``p_i (1 - p_i)``, averages to at most ``p (1 - p)``. As the error of the
    accuracy on the population the problems were drawn from it is a lower bound where several samples of
    one problem are correlated."""
    k = (problems or 0) * (samples or 1)
    if k <= 0 or accuracy is None or math.isnan(accuracy):
        return math.nan
    return math.sqrt(accuracy * (1 - accuracy) / k)


def kaplan_meier(times: Sequence[float], reached: Sequence[bool]) -> dict[str, float]:
    """Kaplan-Meier estimate for steps to a threshold with right censoring. ``times``: the step at which
    a run reached the threshold, or, for a run that never did (``reached`` False), its last step (the
    run is known only to need more). Returns ``n``, ``reached`` (count), ``median`` (the first step at
    which the survival estimate falls to 0.5 or below; nan when it never does within the runs: "not
    reached") and ``rmst`` (restricted mean: the area under the survival curve up to the largest time,
    i.e. the mean steps to threshold when every run is stopped at that step)."""
    t = np.asarray(times, dtype=float)
    e = np.asarray(reached, dtype=bool)
    n = len(t)
    out = {"n": n, "reached": int(e.sum()), "median": math.nan, "rmst": math.nan}
    if n == 0:
        return out
    survival, at_risk, previous, area = 1.0, n, 0.0, 0.0
    for time in np.unique(t):
        area += survival * (time - previous)
        previous = time
        events = int(((t == time) & e).sum())
        if events:
            survival *= 1 - events / at_risk
            if survival <= 0.5 and math.isnan(out["median"]):
                out["median"] = float(time)
        at_risk -= int((t == time).sum())
    out["rmst"] = float(area)
    return out


def blocked_trend(strength: Sequence[float], values: Sequence[float], blocks: Sequence) -> dict[str, float]:
    """Linear trend of ``values`` (accuracy) on ``strength`` with each block (seed) its own intercept:
    both are centred within their block, and the slope is the least-squares fit of the centred values
    on the centred strengths. Its t-test has ``N - blocks - 1`` degrees of freedom. Returns ``slope``
    (value per unit strength), ``ci_low``/``ci_high`` (95%), ``p`` (two-sided), ``n`` and ``blocks``."""
    x = np.asarray(strength, dtype=float)
    y = np.asarray(values, dtype=float)
    b = np.asarray([str(v) for v in blocks])
    out = {"slope": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "n": len(x),
           "blocks": len(set(b))}
    xc, yc = x.copy(), y.copy()
    for block in set(b):
        sel = b == block
        xc[sel] -= x[sel].mean()
        yc[sel] -= y[sel].mean()
    sxx = float((xc ** 2).sum())
    df = len(x) - out["blocks"] - 1
    if sxx == 0 or df < 1:
        return out
    slope = float((xc * yc).sum() / sxx)
    resid = yc - slope * xc
    se = math.sqrt(float((resid ** 2).sum()) / df / sxx)
    half = float(stats.t.ppf(0.975, df) * se)
    p = float(2 * stats.t.sf(abs(slope) / se, df)) if se > 0 else (0.0 if slope else 1.0)
    out.update(slope=slope, ci_low=slope - half, ci_high=slope + half, p=p)
    return out


# ------------------------------------------------------------------ one-sided and equivalence tests


def one_sided_t(differences: Sequence[float], margin: float, alternative: str,
                level: float = ALPHA) -> dict[str, float]:
    """One-sided paired t-test of the mean difference against ``margin``.

    ``alternative`` ``"less"``: H0 mean >= margin against H1 mean < margin (non-superiority: the gain is
    below the margin); ``"greater"``: H0 mean <= margin against H1 mean > margin. Returns ``n``, ``mean``,
    ``sd``, ``t``, ``p`` (one-sided) and ``bound``: the one-sided ``1 - level`` confidence limit on the
    side the test rejects from (upper for ``less``, lower for ``greater``); H0 is rejected at ``level``
    exactly when ``bound`` is on the alternative's side of ``margin``."""
    if alternative not in ("less", "greater"):
        raise ValueError(f"alternative must be 'less' or 'greater', got {alternative!r}")
    d = _clean(differences)
    n = len(d)
    out = {"n": n, "mean": float(d.mean()) if n else math.nan, "sd": math.nan, "t": math.nan, "p": math.nan,
           "bound": math.nan}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    sign = -1.0 if alternative == "less" else 1.0
    if se > 0:
        t = (out["mean"] - margin) / se
        p = float(stats.t.sf(sign * t, n - 1))
    else:
        t = math.copysign(math.inf, out["mean"] - margin) if out["mean"] != margin else 0.0
        p = 0.0 if sign * (out["mean"] - margin) > 0 else 1.0
    bound = out["mean"] - sign * float(stats.t.ppf(1 - level, n - 1)) * se
    out.update(sd=sd, t=float(t), p=p, bound=bound)
    return out


def tost(differences: Sequence[float], margin: float, alpha: float = ALPHA) -> dict[str, float]:
    """Two one-sided tests (TOST) of equivalence within ``(-margin, +margin)`` on paired differences:
    H0 |mean| >= margin against H1 |mean| < margin. Returns ``n``, ``mean``, ``p_lower`` (H0 mean <=
    -margin), ``p_upper`` (H0 mean >= +margin), ``p`` (the larger of the two: the TOST p-value),
    ``ci_low``/``ci_high`` (the ``1 - 2 alpha`` t-interval, inside the margins exactly when both tests
    reject) and ``equivalent`` (p < alpha). ``margin`` must be positive: it is fixed before the runs."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    low = one_sided_t(differences, -margin, "greater", alpha)
    high = one_sided_t(differences, margin, "less", alpha)
    p = max(low["p"], high["p"]) if not (math.isnan(low["p"]) or math.isnan(high["p"])) else math.nan
    return {"n": low["n"], "mean": low["mean"], "margin": float(margin), "p_lower": low["p"], "p_upper": high["p"],
            "p": p, "ci_low": low["bound"], "ci_high": high["bound"],
            "equivalent": bool(not math.isnan(p) and p < alpha)}


def declared_test(differences: Sequence[float], test: str, margin: float | None = None,
                  alpha: float = ALPHA) -> dict[str, float]:
    """One test fixed before its runs, on paired differences: the paired t summary (``n_seeds``, ``mean``,
    its 95% interval, ``sd``, ``mde``) and ``p`` by ``test``: ``greater`` / ``less`` one-sided against
    ``margin`` (0 when None), ``two-sided`` against 0, ``equivalent`` two one-sided tests within
    +-``margin`` (with their interval, ``tost_low`` / ``tost_high``; NaN for the other tests)."""
    two = paired_t(differences)
    row = {"n_seeds": len(differences), "mean": two["mean"], "ci_low": two["ci_low"], "ci_high": two["ci_high"],
           "sd": two["sd"], "mde": two["mde"], "tost_low": math.nan, "tost_high": math.nan}
    if test == "equivalent":
        e = tost(differences, float(margin), alpha)
        row.update(p=e["p"], tost_low=e["ci_low"], tost_high=e["ci_high"])
    elif test == "two-sided":
        row["p"] = two["p"]
    else:
        row["p"] = one_sided_t(differences, float(margin or 0.0), test, alpha)["p"]
    return row


def _signed_rank_counts(n: int) -> np.ndarray:
    """Number of sign patterns of ranks 1..n with each positive-rank sum W+ (index 0..n(n+1)/2): the exact
    null distribution of the Wilcoxon signed-rank statistic without ties, times 2**n."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[:-k].copy()
    return counts


def hodges_lehmann(differences: Sequence[float], confidence: float = 0.95, side: str = "two-sided") -> dict[str, float]:
    """The Hodges-Lehmann estimate of the centre of paired differences (the median of the Walsh averages
    ``(d_i + d_j) / 2``, i <= j) with its distribution-free confidence interval from the exact null
    distribution of the signed-rank statistic (order statistics of the Walsh averages; no ties assumed).
    ``side``: ``"two-sided"`` (both limits at ``confidence``), ``"upper"`` or ``"lower"`` (a one-sided
    limit at ``confidence``; the other is infinite). Returns ``n``, ``estimate``, ``ci_low``, ``ci_high``
    and ``coverage``: the interval's exact coverage (at least ``confidence``; nan where n is too small to
    reach it, and the limits are then infinite)."""
    d = _clean(differences)
    n = len(d)
    out = {"n": n, "estimate": math.nan, "ci_low": -math.inf, "ci_high": math.inf, "coverage": math.nan}
    if n == 0:
        return out
    walsh = np.sort([(d[i] + d[j]) / 2 for i in range(n) for j in range(i, n)])
    out["estimate"] = float(np.median(walsh))
    m = len(walsh)
    cdf = np.cumsum(_signed_rank_counts(n)) / 2.0 ** n  # P(W+ <= w)
    tail = (1 - confidence) / (2 if side == "two-sided" else 1)
    # the largest k with P(W+ <= k - 1) <= tail: the k-th smallest Walsh average is the lower limit
    k = int(np.searchsorted(cdf, tail, side="right"))
    if k < 1:
        return out
    achieved = float(cdf[k - 1])
    if side in ("two-sided", "lower"):
        out["ci_low"] = float(walsh[k - 1])
    if side in ("two-sided", "upper"):
        out["ci_high"] = float(walsh[m - k])
    out["coverage"] = 1 - achieved * (2 if side == "two-sided" else 1)
    return out


def wilcoxon_shift(differences: Sequence[float], margin: float = 0.0,
                   alternative: str = "two-sided") -> dict[str, float]:
    """Wilcoxon's signed-rank test of the paired differences shifted by ``margin`` (H0: their centre is
    ``margin``; ``alternative`` as scipy's: ``"less"`` tests a centre below the margin), exact where
    scipy computes it exactly. Returns ``n``, ``statistic`` and ``p`` (nan with fewer than 2 values)."""
    d = _clean(differences) - margin
    if len(d) < 2 or not np.any(d != 0):
        return {"n": len(d), "statistic": math.nan, "p": math.nan}
    res = stats.wilcoxon(d, alternative=alternative)
    return {"n": len(d), "statistic": float(res.statistic), "p": float(res.pvalue)}


def logrank(times_a: Sequence[float], reached_a: Sequence[bool], times_b: Sequence[float],
            reached_b: Sequence[bool]) -> dict[str, float]:
    """The log-rank test of two groups' steps to a threshold with right censoring (a run that never
    reached it is censored at its last step): ``observed_a``/``expected_a`` (group a's events and their
    expectation under equal hazards), ``chi2`` (1 df) and two-sided ``p``; nan where no run reached it.
    Pairing by seed is not used: the test treats the two groups' runs as independent, which is
    conservative when seeds correlate positively."""
    t = np.concatenate([np.asarray(times_a, float), np.asarray(times_b, float)])
    e = np.concatenate([np.asarray(reached_a, bool), np.asarray(reached_b, bool)])
    g = np.concatenate([np.zeros(len(times_a), bool), np.ones(len(times_b), bool)])
    out = {"observed_a": float((e & ~g).sum()), "expected_a": math.nan, "chi2": math.nan, "p": math.nan}
    if not e.any() or not len(times_a) or not len(times_b):
        return out
    observed, expected, variance = 0.0, 0.0, 0.0
    for time in np.unique(t[e]):
        at_risk = t >= time
        n_all, n_a = at_risk.sum(), (at_risk & ~g).sum()
        d_all = (e & (t == time)).sum()
        d_a = (e & (t == time) & ~g).sum()
        observed += d_a
        expected += d_all * n_a / n_all
        if n_all > 1:
            variance += d_all * (n_a / n_all) * (1 - n_a / n_all) * (n_all - d_all) / (n_all - 1)
    out["expected_a"] = float(expected)
    if variance > 0:
        chi2 = (observed - expected) ** 2 / variance
        out.update(chi2=float(chi2), p=float(stats.chi2.sf(chi2, 1)))
    return out
