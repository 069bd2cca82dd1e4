"""A group-sequential one-sided test on paired differences: O'Brien-Fleming boundaries, their power and
expected size, and the reading of a non-superiority test at each declared look.

The boundaries are computed, not tabulated: the standardised statistics ``Z_k`` at the looks are a
Brownian motion observed at the information fractions ``t_k`` (``Z_k = S(t_k) / sqrt(t_k)``), so the
probability of first crossing a boundary at look k is an integral over the paths that stayed below the
earlier ones. :func:`crossing_probabilities` computes it by recursive numerical integration on a grid
(Armitage, McPherson and Rowe's method), deterministic and accurate to about 1e-7 here.

- :func:`spending_obf`: Lan and DeMets' O'Brien-Fleming-type alpha-spending function,
  ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``.
- :func:`obf_boundaries`: the boundaries ``c_k`` on the Z scale, by that spending function
  (``"lan_demets"``, the looks may fall at any fractions) or the classic constant ``C / sqrt(t_k)``
  (``"classic"``, O'Brien and Fleming's own).
- :func:`power` and :func:`expected_pairs`: the chance of crossing by the last look, and the expected
  number of pairs, for a true standardised effect per pair.
- :func:`conditional_power`: the chance that a later look crosses, given where an interim look stood
  (the future increments are a fresh Brownian motion, so it is the same crossing problem, shifted).
- :func:`read_looks`: the non-superiority test of paired differences at each look that has its pairs:
  H0 the mean gain is at least ``margin``; it is rejected at the first look whose t statistic falls
  below ``-c_k`` (the boundary's nominal one-sided level, on the t scale with n - 1 df).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

from oar.analysis.statistics import hodges_lehmann, one_sided_t, wilcoxon_shift

SPENDING = ("lan_demets", "classic")
_GRID = 2001  # points of the integration grid per look
_WIDTH = 9.0  # the grid spans the mean -9 SD up to the boundary


def spending_obf(t: float, alpha: float) -> float:
    """Alpha spent by information fraction ``t`` (0 < t <= 1) by Lan and DeMets' O'Brien-Fleming-type
    function: ``2 - 2 Phi(Phi^{-1}(1 - alpha / 2) / sqrt(t))``; ``alpha`` at t = 1."""
    if t <= 0:
        return 0.0
    return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


def _check_fractions(fractions: Sequence[float]) -> np.ndarray:
    t = np.asarray(fractions, dtype=float)
    if len(t) == 0 or np.any(t <= 0) or np.any(t > 1) or np.any(np.diff(t) <= 0):
        raise ValueError(f"information fractions must increase within (0, 1], got {list(fractions)}")
    return t


def _trapezoid(grid: np.ndarray) -> np.ndarray:
    w = np.full(len(grid), grid[1] - grid[0])
    w[0] = w[-1] = w[0] / 2
    return w


class _Paths:
    """The sub-density of the score process ``S(t) = Z sqrt(t)`` over the paths that have stayed below
    every boundary so far, on a grid (mass per grid point), advanced look by look."""

    def __init__(self, drift: float):
        self.drift = drift
        self.t = 0.0
        self.grid: np.ndarray | None = None
        self.mass: np.ndarray | None = None

    def crossing(self, t: float, c: float) -> float:
        """Probability of staying below until now and crossing ``c`` (Z scale) at fraction ``t``."""
        dt = t - self.t
        top = c * math.sqrt(t)
        if self.grid is None:
            return float(stats.norm.sf((top - self.drift * t) / math.sqrt(t)))
        return float(np.sum(self.mass * stats.norm.sf((top - self.grid - self.drift * dt) / math.sqrt(dt))))

    def advance(self, t: float, c: float) -> None:
        """Move to fraction ``t``, keeping the paths below ``c``."""
        dt = t - self.t
        top = c * math.sqrt(t)
        low = self.drift * t - _WIDTH * math.sqrt(t)
        if self.grid is not None:
            low = min(low, float(self.grid[0]))
        new = np.linspace(low, top, _GRID)
        if self.grid is None:
            density = stats.norm.pdf((new - self.drift * t) / math.sqrt(t)) / math.sqrt(t)
        else:
            step = math.sqrt(dt)
            density = (stats.norm.pdf((new[:, None] - self.grid[None, :] - self.drift * dt) / step) / step) @ self.mass
        self.grid, self.mass, self.t = new, density * _trapezoid(new), t


def crossing_probabilities(bounds: Sequence[float], fractions: Sequence[float], drift: float = 0.0) -> list[float]:
    """Probability of first crossing the upper boundary ``bounds[k]`` (Z scale) at each look, for Z
    statistics at information ``fractions`` whose mean at fraction t is ``drift * sqrt(t)`` (drift: the
    mean of Z at the full information). Paths that stay below continue; there is no lower boundary."""
    t = _check_fractions(fractions)
    b = np.asarray(bounds, dtype=float)
    if len(b) != len(t):
        raise ValueError(f"{len(b)} boundaries for {len(t)} looks")
    paths = _Paths(drift)
    out = []
    for k, (x, c) in enumerate(zip(t, b)):
        out.append(paths.crossing(float(x), float(c)))
        if k + 1 < len(t):
            paths.advance(float(x), float(c))
    return out


def obf_boundaries(fractions: Sequence[float], alpha: float, spending: str = "lan_demets") -> list[float]:
    """One-sided O'Brien-Fleming boundaries (Z scale) at the looks' information ``fractions`` (the last
    normally 1) with overall one-sided level ``alpha`` under H0. ``"lan_demets"``: each look spends
    :func:`spending_obf`'s increment; ``"classic"``: ``C / sqrt(t_k)`` with C such that the total is
    ``alpha``."""
    t = _check_fractions(fractions)
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    if spending == "classic":
        def excess(c: float) -> float:
            return sum(crossing_probabilities(c / np.sqrt(t), t)) - alpha
        c = optimize.brentq(excess, 0.5, 20.0, xtol=1e-8)
        return [float(c / math.sqrt(x)) for x in t]
    if spending != "lan_demets":
        raise ValueError(f"spending must be one of {SPENDING}, got {spending!r}")
    bounds: list[float] = []
    paths = _Paths(0.0)
    spent = 0.0
    for k, x in enumerate(t):
        target = spending_obf(float(x), alpha) - spent
        spent += target
        c = optimize.brentq(lambda c: paths.crossing(float(x), c) - target, -5.0, 40.0, xtol=1e-10)
        bounds.append(float(c))
        if k + 1 < len(t):
            paths.advance(float(x), float(c))
    return bounds


def power(bounds: Sequence[float], fractions: Sequence[float], drift: float) -> float:
    """Probability of crossing a boundary by the last look when the mean of Z at full information is
    ``drift``."""
    return float(sum(crossing_probabilities(bounds, fractions, drift)))


def expected_pairs(bounds: Sequence[float], looks: Sequence[int], drift: float) -> float:
    """Expected number of pairs at stopping (stop at the first crossing, else at the last look)."""
    fractions = [n / looks[-1] for n in looks]
    cross = crossing_probabilities(bounds, fractions, drift)
    stay = 1.0
    total = 0.0
    for n, p in zip(looks, cross):
        total += p * n
        stay -= p
    return float(total + stay * looks[-1])


def conditional_power(bounds: Sequence[float], fractions: Sequence[float], look: int, z: float,
                      drift: float) -> float:
    """Probability that a look after ``look`` (0-based) crosses its boundary, given that the Z statistic
    stood at ``z`` there (below its boundary), when the mean of Z at full information is ``drift``.

    From fraction ``t_k`` on, ``S(t) = S(t_k) + drift (t - t_k) + W(t - t_k)`` with W a fresh Brownian
    motion; on the clock ``u = t - t_k`` (scaled to end at 1) crossing ``c_j sqrt(t_j)`` is crossing
    ``(c_j sqrt(t_j) - S(t_k)) / sqrt(u_j)`` on the Z scale, which :func:`crossing_probabilities` computes."""
    t = _check_fractions(fractions)
    b = np.asarray(bounds, dtype=float)
    if len(b) != len(t):
        raise ValueError(f"{len(b)} boundaries for {len(t)} looks")
    if not 0 <= look < len(t) - 1:
        raise ValueError(f"look {look}: a conditional power needs a later look (looks 0-{len(t) - 2})")
    start = z * math.sqrt(t[look])
    u = t[look + 1:] - t[look]
    shifted = (b[look + 1:] * np.sqrt(t[look + 1:]) - start) / np.sqrt(u)
    return float(sum(crossing_probabilities(shifted, u / u[-1], drift * math.sqrt(u[-1]))))


def drift_for(effect: float, sd: float, pairs: int) -> float:
    """The mean of the Z statistic at ``pairs`` pairs whose differences have standard deviation ``sd``,
    when the true distance from the null is ``effect`` (same units)."""
    return float(effect / sd * math.sqrt(pairs))


def nominal_levels(bounds: Sequence[float]) -> list[float]:
    """Each Z boundary's nominal one-sided level, ``1 - Phi(c_k)``: the p-value at or below which a look
    rejects (applied to the look's one-sided t-test)."""
    return [float(stats.norm.sf(c)) for c in bounds]


def read_looks(differences: Sequence[float], looks: Sequence[int], margin: float, alpha: float,
               spending: str = "lan_demets", planned: int | None = None) -> list[dict]:
    """The non-superiority test (H0: mean gain >= ``margin``; H1: below it) of paired ``differences``
    (in the order the pairs were declared: seed order) at each declared look that has its pairs:
    the look's pairs are the first ``looks[k]``. A look rejects when its one-sided t-test p is at or below
    the boundary's nominal level; the first look that rejects stops the test and later looks are not
    read. Each row: ``look`` (1-based), ``pairs``, ``fraction``, ``boundary_z``, ``nominal_alpha``,
    ``mean``, ``sd``, ``t``, ``p`` (one-sided), ``upper`` (the repeated confidence limit: the one-sided
    upper limit at the nominal level, below ``margin`` exactly when the look rejects), ``rejects``, the
    sensitivity analysis at the same nominal level (``wilcoxon_p``, one-sided signed-rank p of the
    differences minus the margin; ``hl_estimate`` and ``hl_upper``, the Hodges-Lehmann estimate and its
    one-sided upper limit) and ``status``: ``"stopped: gain below the margin"``, ``"continue"``,
    ``"final: gain of the margin not excluded"`` or ``"not reached"`` (fewer pairs than the look).
    ``planned``: the planned pairs of the last look, where the final analysis falls at fewer (the interim
    looks keep their planned information fractions and the final look spends what is left)."""
    d = [float(x) for x in differences]
    planned = planned or looks[-1]
    fractions = [n / planned for n in looks[:-1]] + [1.0]
    bounds = obf_boundaries(fractions, alpha, spending)
    levels = nominal_levels(bounds)
    rows = []
    stopped = False
    for k, (n, c, level) in enumerate(zip(looks, bounds, levels)):
        row = {"look": k + 1, "pairs": int(n), "fraction": fractions[k], "boundary_z": c, "nominal_alpha": level}
        if stopped or len(d) < n:
            row["status"] = "not read: stopped earlier" if stopped else "not reached"
            rows.append(row)
            continue
        x = d[:n]
        t = one_sided_t(x, margin, "less", level)
        hl = hodges_lehmann(x, 1 - level, side="upper")
        w = wilcoxon_shift(x, margin, "less")
        rejects = bool(not math.isnan(t["p"]) and t["p"] <= level)
        final = k == len(looks) - 1
        row.update(mean=t["mean"], sd=t["sd"], t=t["t"], p=t["p"], upper=t["bound"], rejects=rejects,
                   wilcoxon_p=w["p"], wilcoxon_rejects=bool(not math.isnan(w["p"]) and w["p"] <= level),
                   hl_estimate=hl["estimate"], hl_upper=hl["ci_high"],
                   status=("stopped: gain below the margin" if rejects else
                           "final: gain of the margin not excluded" if final else "continue"))
        stopped = rejects
        rows.append(row)
    return rows
