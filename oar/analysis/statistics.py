"""The tests and corrections that decide a comparison: paired t-tests, Holm's correction, the minimum
detectable effect, evaluation noise against seed noise, censored steps to a threshold, and a trend test.

Every function takes plain numbers and returns plain numbers (nan where a quantity is undefined), so the
tables (``oar.analysis.tables``) and the tests can check them against a direct computation.

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
    ``sqrt(p (1 - p) / (problems * samples))``. Samples of the same problem are correlated, so with
    several samples per problem this is a lower bound; with one sample it is exact for a fixed policy."""
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
