"""Whether the paper reproduced: each claim of the paper (config/paper_claims.yaml) beside this run's number,
with a verdict by the rule the config declared before the run (``analysis.reproduction``).

Three kinds of claim, one rule (``interval`` at ``level``; ``resolution`` the smallest difference, in points, a
verdict must be able to tell):

- a **figure** (a reported pass@1): this run's mean over seeds with its t-interval. The paper's figure outside
  the interval: ``higher`` or ``lower`` (this run's number against the paper's). Inside it: ``reproduced`` when
  the design's MDE (80% power, two-sided at 1 - level) is at most the resolution, else ``undecided``. One seed
  gives no interval over seeds (the bootstrap over problems is shown, but leaves out the run-to-run variation
  of identical runs): ``undecided``.
- an **ordering** (one arm above another, ``>`` or ``>=``): the paired difference over the seeds both arms ran,
  with its t-interval. ``>``: ``reproduced`` when the interval lies above 0, ``contradicted`` when below;
  ``>=``: ``reproduced`` when it lies above minus the resolution, ``contradicted`` when below 0. Otherwise
  ``undecided`` when the MDE exceeds the resolution, ``not reproduced`` when the design could have seen a
  difference that large and did not.
- a **cost ratio** (median step time over the baseline's): the cost table's ratio with a percentile bootstrap
  interval over the logged steps; the paper's ratio inside it ``reproduced``, else ``higher`` or ``lower``. The
  paper's ratios are a GPU's: measured without one, ``undecided``.

A claim whose runs this config does not make is ``not run``. :func:`check_claims` finds what a config cannot
read (unknown models, benchmarks, metrics, methods, groups) before any job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.formatting import fmt_num, is_missing, markdown_table
from oar.analysis.labels import BENCHMARK_NAMES, METHOD_NAMES, PROBE_NAMES
from oar.analysis.statistics import mde, paired_t, seed_interval, seed_sd

KINDS = ("figure", "ordering", "cost_ratio")
METRICS = {"figure": ("pass@1",), "ordering": ("pass@1",), "cost_ratio": ("step_time_ratio",)}
RELATIONS = (">", ">=")
RULES = ("interval",)
ARM_KEYS = ("method", "tau", "beta", "probe")
CLAIM_KEYS = ("id", "kind", "model", "group", *ARM_KEYS, "higher", "relation", "lower", "baseline", "benchmark",
              "metric", "sampling", "value", "source")
VERDICTS = ("reproduced", "higher", "lower", "contradicted", "not reproduced", "undecided", "not run")
COLUMNS = ["id", "kind", "claim", "model", "benchmark", "metric", "sampling", "source", "paper", "run", "ci_low",
           "ci_high", "interval", "n", "difference", "mde", "verdict", "reason"]
_REQUIRED = {"figure": ("model", "group", "method", "benchmark", "metric", "sampling", "value", "source"),
             "ordering": ("model", "group", "higher", "relation", "lower", "benchmark", "metric", "sampling",
                          "source"),
             "cost_ratio": ("model", "method", "baseline", "benchmark", "metric", "sampling", "value", "source")}


# ------------------------------------------------------------------------------------ the claims file


def read_claims(path: str | Path) -> list[dict]:
    """The claims of a claims file (its ``claims`` list), as written."""
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list):
        raise ValueError(f"{path}: no `claims` list")
    return claims


def check_claims(claims: Sequence[Mapping], models: Sequence[str], benchmarks: Sequence[str],
                 methods: Sequence[str], groups: Sequence[str]) -> list[tuple[str, str]]:
    """What a config cannot read in the claims: (where, message) per problem, ``where`` as
    ``claims[i].key`` (the claim's id in the message). Known: the config's models, its evaluation benchmarks
    (and ``average``; ``training`` for a cost ratio), the methods, the run registry's groups, the kinds,
    metrics and relations of this module."""
    problems = []
    seen: set = set()
    for i, c in enumerate(claims):
        at = f"claims[{i}]"
        if not isinstance(c, Mapping):
            problems.append((at, "not a mapping"))
            continue
        name = c.get("id")
        if not name or name in seen:
            problems.append((f"{at}.id", f"{name!r}: missing or given twice"))
        seen.add(name)
        kind = c.get("kind")
        if kind not in KINDS:
            problems.append((f"{at}.kind", f"{name}: unknown kind {kind!r} (use {list(KINDS)})"))
            continue
        missing = [k for k in _REQUIRED[kind] if c.get(k) is None]
        if missing:
            problems.append((f"{at}.{missing[0]}", f"{name}: a {kind} claim needs {missing[0]}"))
            continue
        if c["model"] not in models:
            problems.append((f"{at}.model", f"{name}: unknown model {c['model']!r} (the config's: {list(models)})"))
        allowed = ["training"] if kind == "cost_ratio" else [*benchmarks, "average"]
        if c["benchmark"] not in allowed:
            problems.append((f"{at}.benchmark", f"{name}: unknown benchmark {c['benchmark']!r} (use {allowed})"))
        if c["metric"] not in METRICS[kind]:
            problems.append((f"{at}.metric", f"{name}: unknown metric {c['metric']!r} for a {kind} "
                                             f"(use {list(METRICS[kind])})"))
        if "group" in _REQUIRED[kind] and c["group"] not in groups:
            problems.append((f"{at}.group", f"{name}: unknown group {c['group']!r} (use {list(groups)})"))
        arms = {"method": {"method": c.get("method")}, "baseline": {"method": c.get("baseline")}} \
            if kind != "ordering" else {"higher": c["higher"], "lower": c["lower"]}
        for key, arm in arms.items():
            if kind == "figure" and key == "baseline":
                continue
            if not isinstance(arm, Mapping) or set(arm) - set(ARM_KEYS) or arm.get("method") not in methods:
                problems.append((f"{at}.{key}", f"{name}: {arm!r} is not an arm: a known method "
                                                f"({list(methods)}) and optionally tau, beta, probe"))
        unknown = sorted(set(c) - set(CLAIM_KEYS))
        if unknown:
            problems.append((f"{at}.{unknown[0]}", f"{name}: unknown key (use {list(CLAIM_KEYS)})"))
        if kind == "ordering" and c["relation"] not in RELATIONS:
            problems.append((f"{at}.relation", f"{name}: unknown relation {c['relation']!r} (use {list(RELATIONS)})"))
        if kind != "ordering" and not isinstance(c["value"], (int, float)):
            problems.append((f"{at}.value", f"{name}: {c['value']!r} is not a number"))
    return problems


# ------------------------------------------------------------------------------------ reading the runs


def _matches(frame: pd.DataFrame, model: str, arm: Mapping[str, Any]) -> pd.DataFrame:
    """The rows of one model's runs of one arm (method, and tau, beta, probe where the arm gives them)."""
    rows = frame[(frame["model"] == model) & (frame["method"] == arm["method"])]
    for key in ("tau", "beta", "probe"):
        if key in arm:
            want = arm[key]
            rows = rows[[not is_missing(v) and (v == want if isinstance(want, str) else
                                                 math.isclose(float(v), float(want))) for v in rows[key]]]
    return rows


def _per_seed(rows: pd.DataFrame, benchmark: str, benchmarks: Sequence[str]) -> dict[Any, float]:
    """Seed -> the run's pass@1 on ``benchmark`` (``average``: the mean over ``benchmarks``, runs that have
    them all), as a fraction."""
    out = {}
    for _, g in rows.groupby("run", sort=False):
        seed = g["seed"].iloc[0]
        if benchmark == "average":
            if set(benchmarks) <= set(g["benchmark"]):
                out[seed] = float(g[g["benchmark"].isin(benchmarks)]["pass@1"].mean())
        elif (g["benchmark"] == benchmark).any():
            out[seed] = float(g[g["benchmark"] == benchmark]["pass@1"].iloc[0])
    return out


def _arm_label(arm: Mapping[str, Any]) -> str:
    label = METHOD_NAMES.get(arm["method"], arm["method"])
    extra = [f"tau {arm['tau']:g}" if "tau" in arm else "", f"beta {arm['beta']:g}" if "beta" in arm else "",
             PROBE_NAMES.get(arm.get("probe"), arm.get("probe") or "")]
    extra = [e for e in extra if e]
    return f"{label} ({', '.join(extra)})" if extra else label


def describe(claim: Mapping[str, Any]) -> str:
    """The claim in words: ``OAR-G GSM8K = 92.4``, ``OAR-P >= OAR-G (average)``, ``OAR-P step = 4.2x GRPO``."""
    bench = BENCHMARK_NAMES.get(claim["benchmark"], claim["benchmark"])
    if claim["kind"] == "figure":
        arm = {"method": claim["method"], **{k: claim[k] for k in ("tau", "beta", "probe") if k in claim}}
        return f"{_arm_label(arm)} {bench} = {claim['value']:g}"
    if claim["kind"] == "ordering":
        return f"{_arm_label(claim['higher'])} {claim['relation']} {_arm_label(claim['lower'])} ({bench})"
    return (f"{METHOD_NAMES.get(claim['method'], claim['method'])} step = {claim['value']:g}x "
            f"{METHOD_NAMES.get(claim['baseline'], claim['baseline'])}")


# ------------------------------------------------------------------------------------ verdicts


def _row(claim: Mapping[str, Any], **values) -> dict:
    out = {k: None for k in COLUMNS}
    out.update(id=claim["id"], kind=claim["kind"], claim=describe(claim), model=claim["model"],
               benchmark=claim["benchmark"], metric=claim["metric"], sampling=claim["sampling"],
               source=claim["source"], paper=claim.get("value"))
    out.update(values)
    return out


def figure_verdict(claim: Mapping[str, Any], acc: pd.DataFrame | None, benchmarks: Sequence[str],
                   rule: Mapping[str, Any]) -> dict:
    """A reported pass@1 (in %) against this run's mean over seeds (see the module's rule)."""
    arm = {"method": claim["method"], **{k: claim[k] for k in ("tau", "beta", "probe") if k in claim}}
    rows = _matches(acc, claim["model"], arm) if acc is not None else pd.DataFrame()
    values = _per_seed(rows, claim["benchmark"], benchmarks) if not rows.empty else {}
    if not values:
        return _row(claim, verdict="not run", reason=f"this config has no {claim['group']} run of it")
    level, resolution = float(rule["level"]), float(rule["resolution"])
    x = [100 * v for v in values.values()]
    mean, low, high = seed_interval(x, level)
    interval = "seeds"
    if len(x) == 1:
        b = rows[rows["benchmark"] == claim["benchmark"]]
        if len(b):  # the single evaluation's bootstrap over problems, as the main table shows it
            low, high, interval = 100 * float(b["ci_low"].iloc[0]), 100 * float(b["ci_high"].iloc[0]), "problems"
        else:
            interval = "none"
    size = mde(seed_sd(x), len(x), alpha=1 - level)
    common = dict(run=mean, ci_low=low, ci_high=high, interval=interval, n=len(x), difference=mean - claim["value"],
                  mde=size)
    if len(x) < 2:
        return _row(claim, **common, verdict="undecided",
                    reason="one seed: no interval over seeds (the run-to-run variation is not measured)")
    if not low <= claim["value"] <= high:
        verdict = "higher" if mean > claim["value"] else "lower"
        return _row(claim, **common, verdict=verdict,
                    reason=f"the paper's {claim['value']:g} lies outside the run's {level:.0%} interval")
    if math.isnan(size) or size > resolution:
        return _row(claim, **common, verdict="undecided",
                    reason=f"within the interval, but the MDE {fmt_num(size, 1)} exceeds the resolution "
                           f"{resolution:g}")
    return _row(claim, **common, verdict="reproduced",
                reason=f"within the run's {level:.0%} interval; MDE {fmt_num(size, 1)} <= {resolution:g}")


def ordering_verdict(claim: Mapping[str, Any], acc: pd.DataFrame | None, benchmarks: Sequence[str],
                     rule: Mapping[str, Any]) -> dict:
    """One arm above another: the paired difference (points) over the seeds both ran (see the module's rule)."""
    higher = _per_seed(_matches(acc, claim["model"], claim["higher"]), claim["benchmark"], benchmarks) \
        if acc is not None else {}
    lower = _per_seed(_matches(acc, claim["model"], claim["lower"]), claim["benchmark"], benchmarks) \
        if acc is not None else {}
    seeds = sorted(set(higher) & set(lower))
    if not seeds:
        return _row(claim, verdict="not run", reason=f"this config has no paired {claim['group']} runs of both arms")
    level, resolution = float(rule["level"]), float(rule["resolution"])
    t = paired_t([100 * (higher[s] - lower[s]) for s in seeds], confidence=level)
    size = mde(t["sd"], t["n"], alpha=1 - level)
    common = dict(run=t["mean"], ci_low=t["ci_low"], ci_high=t["ci_high"], interval="paired seeds", n=t["n"],
                  difference=t["mean"], mde=size)
    if t["n"] < 2:
        return _row(claim, **common, verdict="undecided", reason="one paired seed: no interval")
    floor = 0.0 if claim["relation"] == ">" else -resolution
    if t["ci_low"] > floor:
        return _row(claim, **common, verdict="reproduced", reason=f"the {level:.0%} interval lies above {floor:g}")
    if t["ci_high"] < 0:
        return _row(claim, **common, verdict="contradicted", reason=f"the {level:.0%} interval lies below 0")
    if math.isnan(size) or size > resolution:
        return _row(claim, **common, verdict="undecided",
                    reason=f"the interval holds 0; the MDE {fmt_num(size, 1)} exceeds the resolution {resolution:g}")
    return _row(claim, **common, verdict="not reproduced",
                reason=f"the interval holds 0 though the MDE {fmt_num(size, 1)} is at most {resolution:g}")


def _median_ratio_interval(steps: np.ndarray, base: np.ndarray, level: float, n_boot: int = 2000,
                           seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(steps) / median(base), each resampled over its own steps."""
    rng = np.random.default_rng(seed)
    a = np.median(rng.choice(steps, (n_boot, len(steps))), axis=1)
    b = np.median(rng.choice(base, (n_boot, len(base))), axis=1)
    ratios = a / b
    tail = (1 - level) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def cost_verdict(claim: Mapping[str, Any], curves: pd.DataFrame | None, rule: Mapping[str, Any],
                 on_gpu: bool) -> dict:
    """A step-time ratio against the run's median ratio over its logged steps (see the module's rule)."""
    def steps(method):
        if curves is None:
            return np.array([])
        g = curves[(curves["model"] == claim["model"]) & (curves["method"] == method)]["step_time_s"]
        return g.dropna().to_numpy(dtype=float)

    arm, base = steps(claim["method"]), steps(claim["baseline"])
    if not len(arm) or not len(base):
        return _row(claim, verdict="not run", reason="the cost table has no steps of both methods")
    level = float(rule["level"])
    ratio = float(np.median(arm) / np.median(base))
    low, high = _median_ratio_interval(arm, base, level) if min(len(arm), len(base)) > 1 else (math.nan, math.nan)
    common = dict(run=ratio, ci_low=low, ci_high=high, interval="steps", n=int(min(len(arm), len(base))),
                  difference=ratio - claim["value"])
    if not on_gpu:
        return _row(claim, **common, verdict="undecided",
                    reason="measured without a GPU: the paper's ratio is a GPU's")
    if math.isnan(low):
        return _row(claim, **common, verdict="undecided", reason="one logged step: no interval")
    if low <= claim["value"] <= high:
        return _row(claim, **common, verdict="reproduced", reason=f"within the run's {level:.0%} interval over steps")
    return _row(claim, **common, verdict="higher" if ratio > claim["value"] else "lower",
                reason=f"the paper's {claim['value']:g}x lies outside the run's {level:.0%} interval over steps")


# ------------------------------------------------------------------------------------ the table


def reproduction_frame(claims: Sequence[Mapping], rule: Mapping[str, Any], accuracy: Mapping[str, pd.DataFrame],
                       benchmarks: Mapping[str, Sequence[str]], curves: pd.DataFrame | None,
                       on_gpu: Mapping[str, bool]) -> pd.DataFrame:
    """One row per claim: the paper's number, this run's with its interval, the difference, the MDE and the
    verdict. ``accuracy``: group -> its accuracy rows (analysis/accuracy/<group>.csv), for the groups this
    config runs; ``benchmarks``: group -> the benchmarks its average is over; ``curves``: the cost group's
    training curves (analysis/credit/<group>.csv); ``on_gpu``: model -> whether its training jobs had a GPU."""
    if rule["rule"] not in RULES:
        raise ValueError(f"unknown verdict rule {rule['rule']!r} (use {list(RULES)})")
    rows = []
    for c in claims:
        if c["kind"] == "figure":
            rows.append(figure_verdict(c, accuracy.get(c["group"]), benchmarks.get(c["group"], ()), rule))
        elif c["kind"] == "ordering":
            rows.append(ordering_verdict(c, accuracy.get(c["group"]), benchmarks.get(c["group"], ()), rule))
        else:
            rows.append(cost_verdict(c, curves, rule, bool(on_gpu.get(c["model"]))))
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(r: Mapping[str, Any]) -> str:
    if is_missing(r["run"]):
        return "–"
    digits, unit = (2, "x") if r["kind"] == "cost_ratio" else (1, "")
    cell = fmt_num(r["run"], digits) + unit
    if not is_missing(r["ci_low"]):
        cell += f" [{fmt_num(r['ci_low'], digits)}, {fmt_num(r['ci_high'], digits)}]"
    return cell + f" ({r['interval']}; n {int(r['n'])})"


def reproduction_table(frame: pd.DataFrame, rule: Mapping[str, Any], claims_file: str) -> tuple[pd.DataFrame, str]:
    """The frame (:func:`reproduction_frame`) as the report's first table: a count of verdicts, then one row
    per claim, then the rule."""
    counts = frame["verdict"].value_counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts)
    rows = []
    for r in frame.to_dict("records"):
        paper = "–" if is_missing(r["paper"]) else f"{r['paper']:g}" + ("x" if r["kind"] == "cost_ratio" else "")
        rows.append([r["claim"], r["model"], paper, _cell(r),
                     "–" if is_missing(r["difference"]) else fmt_num(r["difference"], 2 if r["kind"] == "cost_ratio"
                                                                    else 1),
                     "–" if is_missing(r["mde"]) else fmt_num(r["mde"], 1), f"**{r['verdict']}**", r["reason"],
                     r["source"]])
    level, resolution = float(rule["level"]), float(rule["resolution"])
    text = (
        "## Did the paper reproduce?\n\n"
        f"{len(frame)} claims of the paper ({claims_file}): {tally}.\n\n"
        + markdown_table(["Claim", "Model", "Paper", f"This run [{level:.0%} interval]", "Difference", "MDE",
                          "Verdict", "Why", "Source"], rows)
        + f"\nRule (`analysis.reproduction`: {rule['rule']}, level {level:g}, resolution {resolution:g} point"
        + ("" if resolution == 1 else "s") + "), "
        "declared before the run. Accuracies are pass@1 in %. A figure: this run's mean over seeds with its "
        "t-interval; the paper's figure outside it is `higher` or `lower` (this run against the paper), inside it "
        "`reproduced` when the MDE (80% power, two-sided at 1 - level) is at most the resolution, else `undecided`; "
        "one seed is `undecided` (its interval, over problems, leaves out the run-to-run variation). An "
        "ordering: the paired difference over the seeds both arms ran, `reproduced` when its interval lies above 0 "
        "(above minus the resolution for >=), `contradicted` when below 0, else `undecided` when the MDE exceeds "
        "the resolution and `not reproduced` when it does not. A cost ratio: the median step time over the "
        "baseline's with a bootstrap interval over logged steps, `undecided` when measured without a GPU. "
        "`not run`: this config makes no runs for it.\n"
    )
    return frame, text
