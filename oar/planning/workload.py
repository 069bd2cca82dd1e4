"""What a run's steps hold, which no shape tells: the share of rows scored and the completions' mean length.
Each is a band (low, central, high) read from measured sources, per model, for the cost plan.

- **Completion length**: the mean completion length by training step that published GRPO runs logged
  (``LENGTH_CURVES``, read off their figures), clipped at the run's ``max_completion_length``. The band
  spans the shortest and the longest any source logged; the central figure is the sources' mean over the
  run's own steps (a curve's last value held beyond its last step).
- **Scored share**: only rows with a non-zero advantage are scored, the rows of a group whose rewards
  differ. A problem solved with probability ``p`` gives a mixed group of ``G`` with probability
  ``1 - p^G - (1 - p)^G``; over problems whose ``p`` follows a Beta distribution of mean ``m`` and
  concentration ``k``, ``1 - E[p^G] - E[(1 - p)^G]``. ``k`` is fitted to a measured pass@1 and pass@k pair
  (``PASS_RATES``), ``m`` is the measured accuracy before and after RL; the band spans the two, the central
  figure is their midpoint's share.
- **Measured runs** (``from_metrics``): a run's own ``metrics.jsonl`` (``frac_scored``, ``completion_length``)
  replaces the sources: its steps' mean is the central figure, their least and most the band.

A model no source speaks to gets ``FALLBACK``, the widest: every share and length up to the limit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oar.planning.memory_plan import PlanError


@dataclass(frozen=True)
class Band:
    """A low, central and high figure of one quantity; ``low <= central <= high``."""

    low: float
    central: float
    high: float

    def __post_init__(self):
        if not self.low <= self.central <= self.high:
            raise PlanError(f"a workload band's figures must rise: low {self.low:g}, central {self.central:g}, "
                            f"high {self.high:g}")

    def scenario(self, name: str) -> float:
        """``low``, ``central``, ``high``, or ``ceiling``: 1, the limit (every row scored, every completion
        at ``max_completion_length``)."""
        return {"low": self.low, "central": self.central, "high": self.high, "ceiling": 1.0}[name]


def share_band(low: float, central: float, high: float, where: str) -> Band:
    """A scored share's band, each figure in (0, 1]; ``where`` names the flag or file it came from."""
    for value in (low, central, high):
        if not 0 < value <= 1:
            raise PlanError(f"{where}: a scored share of {value:g} is not in (0, 1]")
    if not low <= central <= high:
        raise PlanError(f"{where}: the low end {low:g} exceeds the high end {high:g}" if low > high else
                        f"{where}: the central share {central:g} is outside {low:g}..{high:g}")
    return Band(low, central, high)


# ---------------------------------------------------------------------------------- completion length


@dataclass(frozen=True)
class LengthCurve:
    """Mean completion tokens logged at training steps by one published GRPO run."""

    name: str
    model: str  # what was trained
    setting: str  # data, template, limit
    citation: str  # paper, figure
    points: tuple  # ((step, tokens), ...), read off the figure
    stands_for: tuple  # model sources (config ``models.<name>.source``) whose runs it speaks to

    def at(self, step: float) -> float:
        """Tokens at ``step``, linear between points, the last value held after the last point."""
        points = self.points
        if step <= points[0][0]:
            return points[0][1]
        for (s0, t0), (s1, t1) in zip(points, points[1:]):
            if step <= s1:
                return t0 + (t1 - t0) * (step - s0) / (s1 - s0)
        return points[-1][1]

    def run_mean(self, steps: int, limit: int) -> float:
        """Mean completion over a run of ``steps`` steps, each step's mean clipped at ``limit`` tokens."""
        return sum(min(self.at(s), limit) for s in range(steps)) / steps

    def span(self, limit: int) -> tuple[float, float]:
        clipped = [min(t, limit) for _, t in self.points]
        return min(clipped), max(clipped)


# SimpleRL-Zoo (Zeng et al. 2025, arXiv 2503.18892), Figure 1 (the repository's
# assets/plot_figure1_v2.3_token_length_vs_steps.png): GRPO from the base models on 8K MATH training
# questions of a difficulty matched to the model, responses up to 8,192 tokens (Qwen2.5-Math models 3,072),
# read every 5 steps. Understanding R1-Zero-like training (Liu et al. 2025, arXiv 2503.20783), Figure 6,
# plot 2 (GRPO, grey): the base model with the R1 template on MATH training questions, up to 3,000 tokens.
LENGTH_CURVES = (
    LengthCurve("SimpleRL-Zoo, Qwen2.5-7B", "Qwen2.5-7B (base)", "GRPO, 8K MATH training questions, 8 samples",
                "Zeng et al. 2025 (arXiv 2503.18892), Figure 1",
                ((0, 720), (5, 665), (10, 740), (15, 745), (20, 780), (25, 770), (30, 790), (35, 815), (40, 805),
                 (45, 860), (50, 835), (55, 835), (60, 865), (65, 860), (70, 830), (75, 880), (80, 905), (85, 1020),
                 (90, 850), (95, 910), (100, 960), (105, 865), (110, 845), (115, 915), (120, 870)),
                ("Qwen/Qwen2.5-7B",)),
    LengthCurve("SimpleRL-Zoo, Qwen2.5-1.5B", "Qwen2.5-1.5B (base)", "GRPO, 8K MATH training questions, 8 samples",
                "Zeng et al. 2025 (arXiv 2503.18892), Figure 1",
                ((0, 380), (5, 450), (10, 490), (15, 640), (20, 580), (25, 710), (30, 710), (35, 980), (40, 970),
                 (45, 970), (50, 980), (55, 920), (60, 920), (65, 980), (70, 960), (75, 960), (80, 1080), (85, 950),
                 (90, 1210), (95, 1020), (100, 1040), (105, 1030), (110, 1200), (115, 1000), (120, 1240)),
                ("Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-1.5B")),
    LengthCurve("Dr. GRPO paper, GRPO on Qwen2.5-1.5B", "Qwen2.5-1.5B (base)",
                "GRPO, MATH training questions, R1 template, 8 samples", "Liu et al. 2025 (arXiv 2503.20783), Figure 6",
                ((0, 340), (10, 430), (20, 530), (25, 580), (30, 570), (40, 640), (50, 660), (60, 700), (70, 770),
                 (75, 760), (80, 800), (90, 900), (100, 860), (110, 920), (120, 1000), (125, 920), (130, 960),
                 (140, 960), (150, 1090)),
                ("Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-1.5B")),
)


def fill_band(source: str, max_completion_length: int, steps: int) -> tuple[Band, list[LengthCurve]] | None:
    """(the completion fill's band, the curves it rests on) for runs of ``source``, or None if no curve
    speaks to it. Fill: mean completion / ``max_completion_length``."""
    curves = [c for c in LENGTH_CURVES if source in c.stands_for]
    if not curves:
        return None
    limit = max_completion_length
    low = min(c.span(limit)[0] for c in curves) / limit
    high = max(c.span(limit)[1] for c in curves) / limit
    central = sum(c.run_mean(steps, limit) for c in curves) / len(curves) / limit
    return Band(low, central, high), curves


# --------------------------------------------------------------------------------------- scored share


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def all_alike(mean: float, concentration: float, group: int) -> tuple[float, float]:
    """(E[p^G], E[(1 - p)^G]): the shares of groups of ``group`` all right and all wrong when the problems'
    pass rates ``p`` follow a Beta distribution of ``mean`` and ``concentration`` (a + b)."""
    a, b = mean * concentration, (1 - mean) * concentration
    return (math.exp(_log_beta(a + group, b) - _log_beta(a, b)),
            math.exp(_log_beta(a, b + group) - _log_beta(a, b)))


def mixed_share(mean: float, concentration: float, group: int) -> float:
    """The share of groups of ``group`` whose rewards differ: the rows scored."""
    right, wrong = all_alike(mean, concentration, group)
    return 1 - right - wrong


def fit_concentration(pass_at_1: float, pass_at_k: float, k: int) -> float:
    """The Beta concentration whose ``E[(1 - p)^k]`` is ``1 - pass_at_k`` at mean ``pass_at_1`` (bisection on
    its logarithm: a smaller concentration spreads the pass rates, more problems never solved)."""
    low, high = 1e-3, 1e4
    for _ in range(200):
        middle = math.sqrt(low * high)
        if all_alike(pass_at_1, middle, k)[1] > 1 - pass_at_k:
            low = middle  # too many never solved: concentrate
        else:
            high = middle
    return math.sqrt(low * high)


@dataclass(frozen=True)
class PassRates:
    """A measured accuracy before and after RL and the spread of pass rates across problems."""

    name: str
    citation: str
    pass_at_1: float  # sampled, the base model
    pass_at_k: float
    k: int
    trained: float  # accuracy after RL
    trained_citation: str
    stands_for: tuple

    def band(self, group: int) -> Band:
        k = fit_concentration(self.pass_at_1, self.pass_at_k, self.k)
        ends = sorted(mixed_share(m, k, group) for m in (self.pass_at_1, self.trained))
        return Band(ends[0], mixed_share((self.pass_at_1 + self.trained) / 2, k, group), ends[1])


PASS_RATES = (
    PassRates("Qwen2.5-Math-1.5B on MATH500", "rqzhangberkeley/efficient-reasoning, README (MATH500: sampled pass@1 "
              "62.8%, pass@8 87.0%)", 0.628, 0.870, 8, 0.742,
              "Oat-Zero-1.5B, Qwen2.5-Math-1.5B after RL on MATH levels 3-5: MATH500 74.2% (Liu et al. 2025, "
              "arXiv 2503.20783, Table 4)",
              ("Qwen/Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B")),
)


def scored_band(source: str, group: int) -> tuple[Band, PassRates] | None:
    rates = next((r for r in PASS_RATES if source in r.stands_for), None)
    return None if rates is None else (rates.band(group), rates)


# ---------------------------------------------------------------------------------------- per model


FALLBACK = {"scored_share": Band(0.25, 0.5, 1.0), "completion_fill": Band(0.25, 0.75, 1.0)}


@dataclass(frozen=True)
class Workload:
    """A model's workload bands and the sources of each (one line each)."""

    scored_share: Band
    completion_fill: Band
    sources: tuple


def model_workload(source: str, max_completion_length: int, steps: int, group: int) -> Workload:
    """The workload of runs of a model of ``source`` (its config ``source``)."""
    lines = []
    fill = fill_band(source, max_completion_length, steps)
    if fill is None:
        fill_figures = FALLBACK["completion_fill"]
        lines.append(f"completion fill: no published curve speaks to {source}: {fill_figures.low:g}..1 (fallback)")
    else:
        fill_figures, curves = fill
        lines += [f"completion length: {c.name} ({c.model}; {c.setting}): {c.points[0][1]:,.0f} tokens at step "
                  f"{c.points[0][0]}, {c.points[-1][1]:,.0f} at step {c.points[-1][0]} ({c.citation})" for c in curves]
    share = scored_band(source, group)
    if share is None:
        share_figures = FALLBACK["scored_share"]
        lines.append(f"scored share: no measured pass rates speak to {source}: {share_figures.low:g}..1 (fallback)")
    else:
        share_figures, rates = share
        proxy = "" if source.endswith(rates.name.split(" on ")[0].split("/")[-1]) else " (a proxy for this model)"
        lines.append(f"scored share: {rates.name}{proxy}: {rates.citation}; after RL: {rates.trained_citation}; "
                     f"groups of {group} mixed under a Beta spread of pass rates fitted to pass@1 and pass@{rates.k}")
    return Workload(share_figures, fill_figures, tuple(lines))


def from_metrics(paths: Iterable[str | Path], max_completion_length: int) -> Workload:
    """The workload a run logged (``metrics.jsonl`` of one or more runs of one model): ``frac_scored`` and
    ``completion_length`` over their steps, the first step left out where there are others (the untrained
    policy). Stops naming the file when a step lacks either figure."""
    shares, fills, names = [], [], []
    for path in paths:
        try:
            lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        except (OSError, json.JSONDecodeError) as error:
            raise PlanError(f"--metrics {path}: {error}") from error
        for n, line in enumerate(lines[1:] if len(lines) > 1 else lines, start=2 if len(lines) > 1 else 1):
            for key in ("frac_scored", "completion_length"):
                if not isinstance(line.get(key), (int, float)):
                    raise PlanError(f"--metrics {path}: step line {n} has no number {key!r}")
            shares.append(line["frac_scored"])
            fills.append(min(line["completion_length"] / max_completion_length, 1.0))
        names.append(str(path))
    if not shares:
        raise PlanError("--metrics: no logged step")
    if min(shares) <= 0:
        raise PlanError(f"--metrics {', '.join(names)}: a step scored no row (frac_scored 0; a run of GRPO, or "
                        "score_all?): a scored share must be in (0, 1]")
    share = share_band(min(shares), sum(shares) / len(shares), max(shares), f"--metrics {', '.join(names)}")
    fill = Band(min(fills), sum(fills) / len(fills), max(fills))
    return Workload(share, fill, (f"measured: {len(shares)} logged steps of {', '.join(names)}",))


def measured_workloads(paths: Iterable[str | Path]) -> dict[str, Workload]:
    """Model -> the workload its runs logged (:func:`from_metrics`), each ``metrics.jsonl`` grouped by the
    run's model and limit from the ``run.yaml`` beside it (``oar.training.run`` writes both)."""
    import yaml

    groups: dict[str, tuple[int, list]] = {}
    for path in paths:
        settings_file = Path(path).parent / "run.yaml"
        try:
            settings = yaml.safe_load(settings_file.read_text())["settings"]
            model = settings["run_id"].split("/", 1)[0]
            limit = int(settings["trainer"]["max_completion_length"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as error:
            raise PlanError(f"--metrics {path}: no readable run.yaml beside it naming the run's model and "
                            f"max_completion_length ({type(error).__name__}: {error})") from error
        known = groups.setdefault(model, (limit, []))
        if known[0] != limit:
            raise PlanError(f"--metrics {path}: max_completion_length {limit} differs from {known[0]} of another "
                            f"run of {model}")
        known[1].append(path)
    return {model: from_metrics(files, limit) for model, (limit, files) in groups.items()}


def describe(workloads: Mapping[str, Workload]) -> list[str]:
    """One line per model and figure, then the sources."""
    lines = []
    for model, w in workloads.items():
        lines.append(f"{model}: scored share {w.scored_share.low:.2f} / {w.scored_share.central:.2f} / "
                     f"{w.scored_share.high:.2f}, completion fill {w.completion_fill.low:.2f} / "
                     f"{w.completion_fill.central:.2f} / {w.completion_fill.high:.2f} (low / central / high)")
        lines += [f"  - {s}" for s in w.sources]
    return lines


def validated(band: Sequence[float], where: str, share: bool) -> Band:
    """A band given on the command line (three numbers low, central, high)."""
    if len(band) != 3:
        raise PlanError(f"{where}: give three figures, low central high")
    if share:
        return share_band(*band, where)
    for value in band:
        if not 0 < value <= 1:
            raise PlanError(f"{where}: {value:g} is not in (0, 1]")
    if band[0] > band[2]:
        raise PlanError(f"{where}: the low end {band[0]:g} exceeds the high end {band[2]:g}")
    if not band[0] <= band[1] <= band[2]:
        raise PlanError(f"{where}: the central figure {band[1]:g} is outside {band[0]:g}..{band[2]:g}")
    return Band(*band)
