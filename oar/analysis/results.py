"""Analysis from files: accuracy per run, credit curves, training cost, causal recall, proxy fidelity.

Pure functions over the workflow's files (evaluation ``summary.json``, each run's ``metrics.jsonl``,
held-out oracle and score JSONL files); they return pandas frames or plain dicts and write nothing.
Run metadata (model, method, tau, beta, probe, seed per run id) is passed in by the caller.

Aggregation over seeds (:func:`seed_interval`): the mean, and a 95% t-interval when there are two or
more seeds (no interval with one). The tests behind the comparisons (paired t-test, Holm, minimum
detectable effect, Kaplan-Meier for the censored steps to threshold, the grid's trend) are in
:mod:`oar.analysis.statistics`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.statistics import binomial_se, holm, holm_alpha, kaplan_meier, logrank, paired_t, t_half_width

META_COLUMNS = ("run", "model", "method", "tau", "beta", "probe", "seed")
CURVE_METRICS = (
    "reward", "reward_std", "entropy", "completion_length", "loss", "ess_ratio", "top_mass", "frac_scored",
    "frac_active",
    "fallback_no_answer", "fallback_nonfinite", "grading_undecided", "time_generate_s", "time_score_s", "time_update_s",
    "step_time_s", "peak_memory_mb", "score_peak_memory_mb", "peak_memory_max_mb", "score_peak_memory_max_mb",
)


def _meta_row(run: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    return {"run": run, **{k: meta.get(k) for k in META_COLUMNS[1:]}}


# ------------------------------------------------------------------------------------ seeds


def seed_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of per-seed values; low/high are a t-interval, nan with fewer than 2 values."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


# ------------------------------------------------------------------------------------ accuracy


def read_summary(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _share(count: int | None, total: int) -> float:
    return count / total if count is not None and total else math.nan


def accuracy_frame(runs: Mapping[str, Mapping[str, Any]], summaries: Mapping[tuple[str, str], str | Path]) -> pd.DataFrame:
    """One row per (run, benchmark): pass@1 and its bootstrap interval over problems, with run metadata.

    ``summaries`` maps (run id, benchmark) to the evaluation's ``summary.json``.
    """
    rows = []
    for (run, bench), path in summaries.items():
        s = read_summary(path)
        ci = s.get("pass@1_ci95") or [math.nan, math.nan]
        rows.append({
            **_meta_row(run, runs[run]),
            "benchmark": bench,
            "pass@1": s["pass@1"],
            "ci_low": ci[0],
            "ci_high": ci[1],
            "num_problems": s["num_problems"],
            "samples_per_problem": s["samples_per_problem"],
            "unparsable": s.get("unparsable"),
            # share of responses in which the grader found no answer: a low score caused by format shows here
            "unparsable_share": _share(s.get("unparsable"),
                                       s.get("num_samples") or s["num_problems"] * s["samples_per_problem"]),
            "truncated": s.get("truncated"),
            "mean_response_tokens": s.get("mean_response_tokens"),
            # graded wrong because the symbolic check timed out twice (oar.grading): 0 unless the grader was starved
            "undecided": s.get("undecided", 0),
        })
    return pd.DataFrame(rows, columns=[*META_COLUMNS, "benchmark", "pass@1", "ci_low", "ci_high", "num_problems",
                                       "samples_per_problem", "unparsable", "unparsable_share", "truncated",
                                       "mean_response_tokens", "undecided"])


def variant_key(row: Mapping[str, Any]) -> tuple:
    """What identifies a method variant across seeds: model, method, tau, beta, probe."""
    return tuple(None if _isnan(row.get(k)) else row.get(k) for k in ("model", "method", "tau", "beta", "probe"))


def _isnan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _mean_share(rows: pd.DataFrame) -> float:
    """Mean unparsable share of some (run, benchmark) rows; nan when a summary did not count it."""
    if "unparsable_share" not in rows or rows.empty:
        return math.nan
    values = [float(v) for v in rows["unparsable_share"]]
    return math.nan if any(math.isnan(v) for v in values) else float(np.mean(values))


def _undecided(rows: pd.DataFrame) -> int:
    """Responses of some (run, benchmark) rows that the grader left undecided, summed over the rows."""
    if "undecided" not in rows:
        return 0
    return int(sum(0 if _isnan(v) else int(v) for v in rows["undecided"]))


def _sd(values: Sequence[float]) -> float:
    """Sample SD over seeds (nan with fewer than 2)."""
    x = [float(v) for v in values if not _isnan(v)]
    return float(np.std(x, ddof=1)) if len(x) > 1 else math.nan


def aggregate_accuracy(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per variant (model, method, tau, beta, probe) and benchmark (plus ``average``): mean pass@1 over
    seeds with its 95% interval (t over seeds with >= 2 seeds, else the single run's bootstrap interval
    over problems; none for the average of a single seed), what it rests on, the mean share of
    responses without an answer (``unparsable_share``; for ``average``, the mean over benchmarks), and
    the two noise sources: ``seed_sd``, the SD of the per-seed accuracies (training noise plus
    evaluation noise), and ``eval_se``, the mean over seeds of a run's binomial standard error from its
    problems x samples (evaluation noise alone, :func:`oar.analysis.statistics.binomial_se`). Where
    ``seed_sd`` is much larger than ``eval_se``, seeds, not evaluation problems, limit the comparison."""
    if acc.empty:
        return pd.DataFrame()
    out = []
    acc = acc.copy()
    acc["_key"] = [variant_key(r) for r in acc.to_dict("records")]
    for key, g in acc.groupby("_key", sort=False, dropna=False):
        seeds = sorted({s for s in g["seed"] if not _isnan(s)})
        base = dict(zip(("model", "method", "tau", "beta", "probe"), key))
        per_seed_avg: dict[Any, list[float]] = {}
        for bench in benchmarks:
            b = g[g["benchmark"] == bench]
            if b.empty:
                continue
            values = list(b["pass@1"])
            n_seeds = len(values)
            mean, low, high = seed_interval(values)
            interval = "seeds"
            if n_seeds == 1:
                low, high, interval = float(b["ci_low"].iloc[0]), float(b["ci_high"].iloc[0]), "bootstrap over problems"
            errors = [binomial_se(v, k, n) for v, k, n in zip(b["pass@1"], b["num_problems"], b["samples_per_problem"])]
            out.append({**base, "benchmark": bench, "mean": mean, "ci_low": low, "ci_high": high, "n_seeds": n_seeds,
                        "interval": interval, "num_problems": int(b["num_problems"].max()),
                        "samples_per_problem": int(b["samples_per_problem"].max()),
                        "unparsable_share": _mean_share(b), "seed_sd": _sd(values),
                        "eval_se": float(np.mean(errors)), "undecided": _undecided(b)})
            for seed, v, se in zip(b["seed"], b["pass@1"], errors):
                per_seed_avg.setdefault(None if _isnan(seed) else seed, []).append((v, se))
        complete = [v for v in per_seed_avg.values() if len(v) == len(benchmarks)]
        if complete:
            averages = [float(np.mean([v for v, _ in runs])) for runs in complete]
            mean, low, high = seed_interval(averages)
            shares = [_mean_share(g[g["benchmark"] == bench]) for bench in benchmarks]
            # the mean of independent benchmark accuracies: SE = sqrt(sum of squared SEs) / benchmarks
            errors = [math.sqrt(sum(se ** 2 for _, se in runs)) / len(runs) for runs in complete]
            out.append({**base, "benchmark": "average", "mean": mean, "ci_low": low, "ci_high": high,
                        "n_seeds": len(complete), "interval": "seeds" if len(complete) > 1 else "none",
                        "num_problems": None, "samples_per_problem": None,
                        "unparsable_share": float(np.mean(shares)) if not any(map(math.isnan, shares)) else math.nan,
                        "seed_sd": _sd(averages), "eval_se": float(np.mean(errors)),
                        "undecided": sum(_undecided(g[g["benchmark"] == bench]) for bench in benchmarks)})
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------- paired seeds


def _variant_seed_averages(acc: pd.DataFrame, benchmarks: Sequence[str]) -> dict[tuple, dict[Any, float]]:
    """Variant key -> seed -> the run's accuracy averaged over ``benchmarks`` (trained runs that have
    every benchmark)."""
    acc = acc[acc["benchmark"].isin(benchmarks) & (acc["method"] != "base")]
    by_variant: dict[tuple, dict[Any, float]] = {}
    for _, g in acc.groupby("run", sort=False):
        if set(g["benchmark"]) == set(benchmarks):
            first = g.iloc[0].to_dict()
            by_variant.setdefault(variant_key(first), {})[first["seed"]] = float(g["pass@1"].mean())
    return by_variant


def paired_accuracy_differences(acc: pd.DataFrame, benchmarks: Sequence[str], baseline: str = "grpo") -> pd.DataFrame:
    """Per trained variant (model, method, tau, beta, probe) other than ``baseline``: its accuracy
    averaged over ``benchmarks`` minus the baseline's on the same model, over the seeds both ran (the
    same seed means the same prompts and first rollouts), as a fraction: mean with its 95% t-interval,
    the seed count, the seeds it won, whether the interval excludes 0, the paired t-test's p-value, the
    SD of the paired differences and the minimum detectable effect at 80% power
    (:func:`oar.analysis.statistics.paired_t`). A run missing a benchmark has no average and no pair."""
    columns = ["model", "method", "tau", "beta", "probe", "n_seeds", "diff_mean", "ci_low", "ci_high", "wins",
               "decided", "p", "sd_diff", "mde"]
    if acc.empty:
        return pd.DataFrame(columns=columns)
    by_variant = _variant_seed_averages(acc, benchmarks)
    references: dict[Any, dict[Any, float]] = {}
    for key, values in by_variant.items():
        if key[1] == baseline:
            if key[0] in references:
                raise ValueError(f"model {key[0]!r}: several {baseline!r} variants to pair with")
            references[key[0]] = values
    out = []
    for key, values in by_variant.items():
        model, method = key[0], key[1]
        reference = references.get(model)
        if method == baseline or reference is None:
            continue
        seeds = sorted(set(values) & set(reference))
        d = [values[s] - reference[s] for s in seeds]
        t = paired_t(d)
        out.append({**dict(zip(("model", "method", "tau", "beta", "probe"), key)), "n_seeds": len(seeds),
                    "diff_mean": t["mean"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                    "wins": sum(x > 0 for x in d),
                    "decided": bool(len(seeds) > 1 and (t["ci_low"] > 0 or t["ci_high"] < 0)),
                    "p": t["p"], "sd_diff": t["sd"], "mde": t["mde"]})
    return pd.DataFrame(out, columns=columns)


GATE_NAMES = {0.0: "boost-only", 1.0: "suppress-only"}


def gate_comparisons(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The gating ablation's direct tests: per model and method, the bi-level gate (the training tau,
    neither 0 nor 1) minus boost-only (tau 0) and minus suppress-only (tau 1) in accuracy averaged over
    ``benchmarks``, paired over the seeds both ran (:func:`oar.analysis.statistics.paired_t`: mean,
    95% t-interval, p, SD of the differences, MDE at 80% power, wins). Exploratory: raw p-values."""
    columns = ["model", "method", "comparison", "n_seeds", "diff_mean", "ci_low", "ci_high", "p", "sd_diff",
               "mde", "wins"]
    rows = []
    by_variant = _variant_seed_averages(acc, benchmarks) if not acc.empty else {}
    for (model, method) in dict.fromkeys((k[0], k[1]) for k in by_variant):
        gates = {float(k[2]): v for k, v in by_variant.items() if k[:2] == (model, method) and not _isnan(k[2])}
        bilevel = [t for t in gates if t not in GATE_NAMES]
        for other, name in GATE_NAMES.items():
            if len(bilevel) != 1 or other not in gates:
                continue
            a, b = gates[bilevel[0]], gates[other]
            seeds = sorted(set(a) & set(b))
            d = [a[s] - b[s] for s in seeds]
            t = paired_t(d)
            rows.append({"model": model, "method": method,
                         "comparison": f"bi-level (tau {bilevel[0]:g}) minus {name} (tau {other:g})",
                         "n_seeds": len(seeds), "diff_mean": t["mean"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                         "p": t["p"], "sd_diff": t["sd"], "mde": t["mde"], "wins": sum(x > 0 for x in d)})
    return pd.DataFrame(rows, columns=columns)


def strength_trends(acc: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The grid's trend tests: per model and method, the slope of accuracy (averaged over ``benchmarks``)
    on each reshaping strength with the other setting and the seed as blocks
    (:func:`oar.analysis.statistics.blocked_trend`): on log2(beta), the gate's sharpness, per doubling
    (blocks: seed x tau), and on tau, the share of tokens pushed down (blocks: seed x beta). A negative
    slope with p < 0.05 is the tested form of "the stronger the reshaping, the lower the accuracy"."""
    from oar.analysis.statistics import blocked_trend

    columns = ["model", "method", "strength", "slope", "ci_low", "ci_high", "p", "n", "blocks"]
    rows = []
    by_variant = _variant_seed_averages(acc, benchmarks) if not acc.empty else {}
    for (model, method) in dict.fromkeys((k[0], k[1]) for k in by_variant):
        cells = [(float(k[2]), float(k[3]), seed, v) for k, seeds in by_variant.items()
                 if k[:2] == (model, method) and not _isnan(k[2]) and not _isnan(k[3]) for seed, v in seeds.items()]
        if not cells:
            continue
        tau, beta, seed, value = map(list, zip(*cells))
        for name, x, block in (("log2(beta), per doubling", [math.log2(b) for b in beta], zip(seed, tau)),
                               ("tau, per unit", tau, zip(seed, beta))):
            t = blocked_trend(x, value, list(block))
            rows.append({"model": model, "method": method, "strength": name, **{k: t[k] for k in columns[3:]}})
    return pd.DataFrame(rows, columns=columns)


PAIRED_METRICS = {
    "final_accuracy": "held-out accuracy after training",
    "reward_auc": "mean training reward over all steps (area under the reward curve)",
    "steps_to_threshold": "first step whose trailing mean reward reaches the threshold",
}


def steps_to_threshold(rewards: Sequence[float], threshold: float, window: int = 5) -> float:
    """First (1-based) step whose trailing mean over ``window`` steps reaches ``threshold``; nan if none."""
    r = np.asarray(rewards, dtype=float)
    for i in range(len(r)):
        if np.nanmean(r[max(0, i - window + 1) : i + 1]) >= threshold:
            return float(i + 1)
    return math.nan


def base_accuracy(acc: pd.DataFrame, benchmark: str) -> dict[str, float]:
    """Model -> the untrained policy's accuracy on ``benchmark`` (the rows of method ``base``)."""
    rows = acc[(acc["method"] == "base") & (acc["benchmark"] == benchmark)]
    return {str(m): float(v) for m, v in zip(rows["model"], rows["pass@1"])}


def reward_thresholds(curves: pd.DataFrame, threshold: float | None, gain: float | None = None) -> dict[str, float]:
    """Model -> the reward threshold of "steps to threshold": ``threshold`` for every model, or, with
    ``gain``, the model's starting reward (mean reward at the first logged step over all its runs; the
    same for every method, as a seed fixes the first rollouts) plus ``gain``. Exactly one is set."""
    if (threshold is None) == (gain is None):
        raise ValueError(f"set exactly one of reward_threshold and reward_gain, got {threshold} and {gain}")
    models = list(dict.fromkeys(curves["model"]))
    if gain is None:
        return {m: float(threshold) for m in models}
    first = curves[curves["step"] == curves.groupby("run")["step"].transform("min")]
    start = first.groupby("model")["reward"].mean()
    return {m: float(start[m]) + float(gain) for m in models}


def per_seed_outcomes(acc: pd.DataFrame, curves: pd.DataFrame, benchmark: str, threshold: float | None,
                      window: int = 5, gain: float | None = None) -> pd.DataFrame:
    """One row per run of a group: model, method, seed, the model's reward threshold
    (:func:`reward_thresholds`) and each of :data:`PAIRED_METRICS`. A run that never reaches the
    threshold is right-censored: ``reached`` False and ``steps_to_threshold`` nan (it is known only to
    need more than its ``steps``)."""
    rows = []
    acc = acc[acc["benchmark"] == benchmark]
    final = {r: v for r, v in zip(acc["run"], acc["pass@1"])}
    thresholds = reward_thresholds(curves, threshold, gain)
    for run, g in curves.groupby("run", sort=False):
        g = g.sort_values("step")
        rewards = list(g["reward"])
        if run not in final:
            raise ValueError(f"run {run!r} has training curves but no {benchmark} accuracy")
        model = g["model"].iloc[0]
        reached = steps_to_threshold(rewards, thresholds[model], window)
        rows.append({"run": run, "model": model, "method": g["method"].iloc[0],
                     "seed": int(g["seed"].iloc[0]), "threshold": thresholds[model], "final_accuracy": final[run],
                     "reward_auc": float(np.nanmean(rewards)), "steps_to_threshold": reached,
                     "reached": not math.isnan(reached), "steps": len(rewards)})
    return pd.DataFrame(rows)


def censored_steps(outcomes: pd.DataFrame) -> dict[str, float]:
    """Kaplan-Meier summary (:func:`oar.analysis.statistics.kaplan_meier`) of the steps to threshold of
    some runs, a run that never reached it censored at its last step: n, reached, median, rmst."""
    times = [float(t) if r else float(n) for t, r, n in
             zip(outcomes["steps_to_threshold"], outcomes["reached"].astype(bool), outcomes["steps"])]
    return kaplan_meier(times, list(outcomes["reached"].astype(bool)))


def _censored_times(runs: pd.DataFrame) -> tuple[list[float], list[bool]]:
    """Steps to threshold of some runs as (times, reached): a run that never reached it at its last step."""
    reached = [bool(r) for r in runs["reached"]]
    return [float(t) if r else float(n) for t, r, n in zip(runs["steps_to_threshold"], reached, runs["steps"])], reached


PRIMARY_ROLE, SECONDARY_ROLE = "primary", "secondary"


def check_family(frame: pd.DataFrame, primary: Mapping[str, Any]) -> None:
    """Holm's family is the declared one, not the rows that happen to exist: every declared primary
    comparison (``primary["family"]``: [model, arm] pairs, from the registry) is present on
    ``primary["metric"]`` with every declared seed (``primary["seeds"]``) paired, and no other row is
    primary. Raises ValueError naming each missing comparison and seed otherwise (an interim table
    that applied Holm to the runs made so far would test a smaller family than the one declared)."""
    declared = [tuple(x) for x in primary["family"]]
    seeds = sorted(int(s) for s in primary.get("seeds") or [])
    rows = frame[frame["metric"] == primary["metric"]] if len(frame) else frame
    problems = []
    for model, arm in declared:
        r = rows[(rows["model"] == model) & (rows["method"] == arm)] if len(rows) else rows
        if r.empty:
            problems.append(f"{model}/{arm}: no paired runs")
        elif seeds and int(r["n_seeds"].iloc[0]) < len(seeds):
            problems.append(f"{model}/{arm}: {int(r['n_seeds'].iloc[0])} of the {len(seeds)} declared seeds paired")
    if problems:
        raise ValueError(f"analysis.primary: the declared family of {len(declared)} comparisons is incomplete "
                         f"({'; '.join(problems)}); Holm over the runs that exist would test a smaller family. "
                         "Make the missing runs, or read them as exploratory without analysis.primary")


def paired_differences(outcomes: pd.DataFrame, baseline: str = "grpo",
                       primary: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Each method minus ``baseline`` over the seeds both ran (same seed = same prompts and first
    rollouts), per model and metric.

    Final accuracy and reward AUC: a paired t-test (:func:`oar.analysis.statistics.paired_t`): mean
    difference with its 95% t-interval, p-value, SD of the differences, minimum detectable effect at 80%
    power, the seed count, how many seeds the method won, and both methods' own means; decided when the
    interval excludes 0.

    Steps to threshold is censored (a run may never reach it), so it gets no t-interval: per method and
    baseline, how many of the paired runs reached the threshold and the Kaplan-Meier median steps (nan:
    the median is not reached within the runs) and restricted mean (to the last step);
    ``diff_mean`` is the difference of the two medians and ``p`` the log-rank test's
    (:func:`oar.analysis.statistics.logrank`, two-sided); never decided, never primary.

    ``primary`` (the config's ``analysis.primary``: ``arms``, ``metric``) marks the declared primary
    comparisons (``role`` primary; every other row secondary) and adds ``p_holm``, Holm's adjusted
    p-value over the primary family (every declared arm on every model), and ``mde_holm``, the minimum
    detectable effect at Holm's strictest level alpha / family size. Secondary rows carry raw p-values only.
    """
    from oar.analysis.statistics import mde

    out = []
    for model, m in outcomes.groupby("model", sort=False):
        base = m[m["method"] == baseline].set_index("seed")
        if base.empty:
            raise ValueError(f"model {model!r}: no {baseline!r} runs to pair with")
        for method, g in m.groupby("method", sort=False):
            if method == baseline:
                continue
            g = g.set_index("seed")
            seeds = sorted(set(g.index) & set(base.index))
            for metric in PAIRED_METRICS:
                row = {"model": model, "method": method, "baseline": baseline, "metric": metric,
                       "threshold": float(m["threshold"].iloc[0]) if "threshold" in m else math.nan,
                       "n_seeds": len(seeds)}
                if metric == "steps_to_threshold":
                    mine = censored_steps(g.loc[seeds].reset_index())
                    theirs = censored_steps(base.loc[seeds].reset_index())
                    both = [s for s in seeds if g.at[s, "reached"] and base.at[s, "reached"]]
                    lr = logrank(*_censored_times(g.loc[seeds]), *_censored_times(base.loc[seeds]))
                    row.update(diff_mean=mine["median"] - theirs["median"], ci_low=math.nan, ci_high=math.nan,
                               p=lr["p"], sd_diff=math.nan, mde=math.nan,
                               wins=sum(float(g.at[s, metric]) < float(base.at[s, metric]) for s in both)
                               + sum(bool(g.at[s, "reached"]) and not bool(base.at[s, "reached"]) for s in seeds),
                               method_mean=mine["median"], baseline_mean=theirs["median"],
                               method_reached=mine["reached"], baseline_reached=theirs["reached"],
                               method_rmst=mine["rmst"], baseline_rmst=theirs["rmst"],
                               steps=int(m["steps"].max()), decided=False)
                else:
                    d = [float(g.at[s, metric]) - float(base.at[s, metric]) for s in seeds]
                    t = paired_t(d)
                    row.update(diff_mean=t["mean"], ci_low=t["ci_low"], ci_high=t["ci_high"], p=t["p"],
                               sd_diff=t["sd"], mde=t["mde"], wins=sum(x > 0 for x in d),
                               method_mean=float(g.loc[seeds, metric].mean()),
                               baseline_mean=float(base.loc[seeds, metric].mean()),
                               decided=bool(len(seeds) > 1 and (t["ci_low"] > 0 or t["ci_high"] < 0)))
                out.append(row)
    frame = pd.DataFrame(out)
    if primary and primary.get("family") is not None:
        check_family(frame, primary)
    if frame.empty:
        return frame
    is_primary = [bool(primary) and r["method"] in primary["arms"] and r["metric"] == primary["metric"]
                  for r in frame.to_dict("records")]
    frame["role"] = [PRIMARY_ROLE if x else SECONDARY_ROLE for x in is_primary]
    adjusted = holm([p for p, x in zip(frame["p"], is_primary) if x])
    family = len(adjusted)
    it = iter(adjusted)
    frame["p_holm"] = [next(it) if x else math.nan for x in is_primary]
    frame["mde_holm"] = [mde(sd, n, alpha=holm_alpha(family)) if x else math.nan
                         for sd, n, x in zip(frame["sd_diff"], frame["n_seeds"], is_primary)]
    frame["family_size"] = [family if x else math.nan for x in is_primary]
    # beside the raw interval, the one at Holm's strictest level (Bonferroni's: simultaneous over the family)
    half = [t_half_width(sd, n, 1 - holm_alpha(family)) if x else math.nan
            for sd, n, x in zip(frame["sd_diff"], frame["n_seeds"], is_primary)]
    frame["ci_low_holm"] = frame["diff_mean"] - half
    frame["ci_high_holm"] = frame["diff_mean"] + half
    return frame


# ------------------------------------------------------------------------------------ credit curves


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines of a run's ``metrics.jsonl`` (blank lines skipped; a torn last line dropped)."""
    rows = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break  # a run killed mid-write
            raise ValueError(f"{path}:{i + 1}: not a JSON line") from None
    return rows


def training_curves(runs: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, str | Path]) -> pd.DataFrame:
    """Long frame: one row per (run, logged step) with the run metadata and every known metric."""
    rows = []
    for run, path in metrics.items():
        for m in read_metrics(path):
            if "step" not in m:
                raise ValueError(f"{path}: a metrics line has no 'step'")
            rows.append({**_meta_row(run, runs[run]), "step": int(m["step"]),
                         **{k: m.get(k) for k in CURVE_METRICS}})
    frame = pd.DataFrame(rows, columns=[*META_COLUMNS, "step", *CURVE_METRICS])
    for k in CURVE_METRICS:
        frame[k] = pd.to_numeric(frame[k], errors="coerce")
    return frame


def steps_with_advantage(g: pd.DataFrame) -> int:
    """Logged steps of one run in which some response had a non-zero advantage (the only steps that
    train anything). Older metrics files without ``frac_active`` fall back on a non-zero reward std."""
    if "frac_active" in g and g["frac_active"].notna().any():
        return int((g["frac_active"].fillna(0) > 0).sum())
    return int((g["reward_std"].fillna(0) > 0).sum())


SUMMARY_COLUMNS = ("steps", "steps_with_advantage", "weights_changed", "rel_l2_delta", "trained", "reward_first",
                   "reward_mean", "reward_final", "ess_ratio_mean", "top_mass_mean", "entropy_final",
                   "completion_length_final", "frac_scored_mean", "step_time_s_median")


def credit_summary(curves: pd.DataFrame, weights: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Per run: steps logged and steps with a non-zero advantage, whether the weights moved (from the
    run's ``weights_delta.json`` in ``weights``, run id -> record), ``trained`` (both), first, mean and
    final reward, mean ESS ratio and top-10% mass over training, final entropy and response length,
    median step time. A run without a weights record has ``weights_changed`` unknown (None) and is
    judged on its steps alone."""
    weights = weights or {}
    rows = []
    for run, g in curves.groupby("run", sort=False):
        g = g.sort_values("step")
        first = g.iloc[0]
        delta = weights.get(run)
        changed = None if delta is None else bool(delta["tensors_changed"] > 0)
        active_steps = steps_with_advantage(g)
        rows.append({
            **{k: first[k] for k in META_COLUMNS},
            "steps": int(g["step"].max()),
            "steps_with_advantage": active_steps,
            "weights_changed": changed,
            "rel_l2_delta": math.nan if delta is None else delta["rel_l2_delta"],
            "trained": active_steps > 0 and changed is not False,
            "reward_first": g["reward"].iloc[0],
            "reward_mean": g["reward"].mean(),
            "reward_final": g["reward"].iloc[-1],
            "ess_ratio_mean": g["ess_ratio"].mean(),
            "top_mass_mean": g["top_mass"].mean(),
            "entropy_final": g["entropy"].iloc[-1],
            "completion_length_final": g["completion_length"].iloc[-1],
            "frac_scored_mean": g["frac_scored"].mean(),
            "step_time_s_median": g["step_time_s"].median(),
        })
    return pd.DataFrame(rows, columns=[*META_COLUMNS, *SUMMARY_COLUMNS])


def cost_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method): median step time over every logged step of its runs, its ratio to GRPO's,
    the median generate / score / update times, and the largest process and scoring-phase peak memory
    (of the largest rank, for runs of several processes). Methods are compared at their training tau/beta/probe
    only when the frame holds one variant per method (the cost group does)."""
    rows = []
    for (model, method), g in curves.groupby(["model", "method"], sort=False):
        rows.append({
            "model": model, "method": method, "runs": g["run"].nunique(), "steps": len(g),
            "step_time_s": g["step_time_s"].median(),
            "time_generate_s": g["time_generate_s"].median(),
            "time_score_s": g["time_score_s"].median(),
            "time_update_s": g["time_update_s"].median(),
            # the largest rank's peak where several processes logged one (what must fit one GPU)
            "peak_memory_mb": g["peak_memory_max_mb"].fillna(g["peak_memory_mb"]).max(),
            "score_peak_memory_mb": g["score_peak_memory_max_mb"].fillna(g["score_peak_memory_mb"]).max(),
        })
    out = pd.DataFrame(rows, columns=["model", "method", "runs", "steps", "step_time_s", "time_generate_s",
                                      "time_score_s", "time_update_s", "peak_memory_mb", "score_peak_memory_mb"])
    ratios = []
    for r in out.to_dict("records"):
        grpo = out[(out["model"] == r["model"]) & (out["method"] == "grpo")]["step_time_s"]
        ratios.append(r["step_time_s"] / grpo.iloc[0] if len(grpo) and grpo.iloc[0] > 0 else math.nan)
    out["ratio_to_grpo"] = ratios
    return out


# ------------------------------------------------------------------------------------ held-out study


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _scores_by_index(rows: Sequence[Mapping[str, Any]]) -> dict[int, list[float]]:
    return {int(r["index"]): list(r["scores"]) for r in rows}


def _spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, standard deviation, standard error and 95% t-interval of the defined values."""
    x = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
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


# Rankings that need no scorer: the trivial orders any scorer's recall must be read against.
POSITION_BASELINES = {
    "earliest_first": lambda r_len: [float(-i) for i in range(r_len)],
    "latest_first": lambda r_len: [float(i) for i in range(r_len)],
}


def oracle_sanity(oracle: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Is the oracle measuring the reasoning, or just breaking the model? Share of reasoning positions
    whose intervention flips the answer (pooled and per response), and the Spearman correlation of
    oracle membership with the relative position j / R, pooled over responses (strongly negative: early
    tokens flip because any early change derails the model; strongly positive: only the last tokens matter).
    """
    from oar.method.metrics import spearman

    member, where = [], []
    for row in oracle:
        r_len = int(row["reasoning_len"])
        causal = {int(i) for i in row["causal"]}
        member += [1.0 if j in causal else 0.0 for j in range(r_len)]
        where += [j / max(r_len - 1, 1) for j in range(r_len)]
    correct = [row.get("correct") for row in oracle]
    return {
        "intervention": next((row.get("intervention") for row in oracle if row.get("intervention")), None),
        "positions": len(member),
        "flip_rate": float(np.mean(member)) if member else math.nan,
        "flip_rate_per_response": _spread([len(r["causal"]) / r["reasoning_len"] for r in oracle if r["reasoning_len"]]),
        "position_spearman": spearman(member, where) if len(member) > 1 else math.nan,
        "responses_correct": sum(c is True for c in correct),
        "responses_incorrect": sum(c is False for c in correct),
    }


def causal_recall(oracle: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                  fraction: float = 0.1) -> dict[str, Any]:
    """recall@k (k = ceil(fraction R)) of each scorer's top tokens against the oracle causal tokens.

    ``oracle``: rows with ``index``, ``reasoning_len`` and ``causal`` (positions); ``scores``: scorer ->
    rows with ``index`` and ``scores`` (R values). Responses with an empty oracle carry no recall
    (counted in ``empty_oracle``). A chance line is included: the expected recall of a uniformly random
    top-k, ``E|K ∩ O| / min(k, |O|) = k |O| / R / min(k, |O|)``; so are the trivial position orders of
    ``POSITION_BASELINES`` (``baselines``), and the oracle's own sanity numbers (:func:`oracle_sanity`).
    """
    from oar.method.metrics import default_k, recall_at_k

    per_response = []
    chance = []
    for row in oracle:
        causal = [int(i) for i in row["causal"]]
        r_len = int(row["reasoning_len"])
        if r_len == 0 or not causal:
            continue
        k = default_k(r_len, fraction)
        chance.append(k * len(causal) / r_len / min(k, len(causal)))
        entry = {"index": int(row["index"]), "reasoning_len": r_len, "k": k, "oracle_size": len(causal)}
        for scorer, rows in scores.items():
            s = _scores_by_index(rows).get(int(row["index"]))
            if s is None:
                raise ValueError(f"scorer {scorer!r} has no scores for held-out response {row['index']}")
            if len(s) != r_len:
                raise ValueError(f"scorer {scorer!r}: {len(s)} scores for {r_len} reasoning tokens (response {row['index']})")
            entry[scorer] = recall_at_k(s, causal, k)
        for name, order in POSITION_BASELINES.items():
            entry[name] = recall_at_k(order(r_len), causal, k)
        per_response.append(entry)
    summary = {scorer: _spread([e[scorer] for e in per_response]) for scorer in scores}
    baselines = {name: _spread([e[name] for e in per_response]) for name in POSITION_BASELINES}
    sizes = [len(r["causal"]) / r["reasoning_len"] for r in oracle if r["reasoning_len"]]
    return {
        "fraction": fraction,
        "responses": len(oracle),
        "empty_oracle": len(oracle) - len(per_response),
        "oracle_share_mean": float(np.mean(sizes)) if sizes else math.nan,
        "chance": _spread(chance),
        "baselines": baselines,
        "oracle": oracle_sanity(oracle),
        "summary": summary,
        "per_response": per_response,
    }


def ground_truth_tokens(responses: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Decisive reasoning positions of each held-out response of the chain task, found by parsing it
    (:func:`oar.data.chains.decisive_spans`): the tokens overlapping a step result. Rows as the oracle's
    (``index``, ``reasoning_len``, ``causal``), so :func:`causal_recall` scores against them."""
    from oar.data.chains import decisive_spans

    rows = []
    for row in responses:
        tokens = row["reasoning_tokens"]
        starts = np.cumsum([0] + [len(t) for t in tokens])
        spans = decisive_spans("".join(tokens))
        causal = [j for j in range(len(tokens))
                  if any(starts[j] < end and start < starts[j + 1] for start, end in spans)]
        rows.append({"index": int(row["index"]), "reasoning_len": int(row["reasoning_len"]), "causal": causal})
    return rows


def _step_tokens(tokens: Sequence[str]) -> tuple[list[list[int]], list[str]]:
    """Per equation of a chain response: the positions of its decisive tokens (relation and result), and
    its relation (``=`` or ``~``) with the position of the relation token last."""
    from oar.data.chains import _EQUATION

    starts = np.cumsum([0] + [len(t) for t in tokens])
    text = "".join(tokens)

    def overlapping(start: int, end: int) -> list[int]:
        return [j for j in range(len(tokens)) if starts[j] < end and start < starts[j + 1]]

    steps, relations = [], []
    for m in _EQUATION.finditer(text):
        relation = overlapping(*m.span(4))
        steps.append(sorted(set(relation + overlapping(*m.span(5)))))
        relations.append((m.group(4), relation[-1] if relation else None))
    return steps, relations


def step_attribution(responses: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                     fraction: float = 0.1, gate_settings: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Where each scorer's credit goes, step by step, on the chain task.

    ``by_step``: per chain step k, the share of step k's decisive tokens (relation and result) that fall
    in the scorer's top ``fraction`` of the response (mean and 95% interval over responses that have a
    step k). A scorer that credits the last restatement of a result shows recall rising with k.

    ``erring``: in wrong responses whose first sloppy step (``~``) is followed by an exact one (``=``),
    the gate weight (:func:`oar.method.gate.gate` with ``gate_settings``: tau, beta, floor) on the erring
    relation token and the mean weight on the later correct relation tokens, and the share of responses
    in which the erring one weighs more. Credit assignment that works puts the blame on the erring token.
    """
    import torch

    from oar.method.gate import gate
    from oar.method.metrics import default_k

    settings = {"tau": 0.4, "beta": 2.0, "floor": 0.1, **(gate_settings or {})}
    parsed = {int(r["index"]): (_step_tokens(r["reasoning_tokens"]), r.get("correct")) for r in responses}
    out: dict[str, Any] = {"fraction": fraction, "gate": settings, "by_step": {}, "erring": {}}
    for scorer, rows in scores.items():
        per_step: dict[int, list[float]] = {}
        erring, later, erring_wins = [], [], []
        for idx, s in _scores_by_index(rows).items():
            if idx not in parsed or len(s) == 0:
                continue
            (steps, relations), correct = parsed[idx]
            values = torch.as_tensor(s, dtype=torch.float64)
            top = set(torch.argsort(values, descending=True, stable=True)[: default_k(len(s), fraction)].tolist())
            for k, positions in enumerate(steps, start=1):
                if positions:
                    per_step.setdefault(k, []).append(sum(j in top for j in positions) / len(positions))
            first = next((i for i, (rel, _) in enumerate(relations) if rel == "~"), None)
            if correct is False and first is not None:
                after = [pos for rel, pos in relations[first + 1 :] if rel == "=" and pos is not None]
                if after and relations[first][1] is not None:
                    w = gate(values[None].float(), torch.ones(1, len(s), dtype=torch.bool), **settings)[0]
                    erring.append(float(w[relations[first][1]]))
                    later.append(float(w[after].mean()))
                    erring_wins.append(float(erring[-1] > later[-1]))
        out["by_step"][scorer] = {str(k): _spread(v) for k, v in sorted(per_step.items())}
        out["erring"][scorer] = {"erring_weight": _spread(erring), "later_correct_weight": _spread(later),
                                 "share_erring_heavier": _spread(erring_wins), "responses": len(erring)}
    return out


def oracle_agreement(oracle: Sequence[Mapping[str, Any]], truth: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How well the intervention oracle's causal tokens match the parsed decisive tokens, per response:
    precision (share of oracle tokens that are decisive), recall (share of decisive tokens the oracle
    finds) and Jaccard, each as mean with its 95% interval over responses."""
    by_index = {int(r["index"]): {int(i) for i in r["causal"]} for r in truth}
    precision, recall, jaccard = [], [], []
    for row in oracle:
        found, true = {int(i) for i in row["causal"]}, by_index.get(int(row["index"]))
        if true is None:
            raise ValueError(f"no ground truth for held-out response {row['index']}")
        both = len(found & true)
        if found:
            precision.append(both / len(found))
        if true:
            recall.append(both / len(true))
        if found or true:
            jaccard.append(both / len(found | true))
    return {"precision": _spread(precision), "recall": _spread(recall), "jaccard": _spread(jaccard),
            "responses": len(oracle)}


def proxy_fidelity(reference: Sequence[Mapping[str, Any]], scorers: Mapping[str, Sequence[Mapping[str, Any]]],
                   fraction: float = 0.1) -> dict[str, Any]:
    """Spearman and top-k overlap of each scorer with the reference scorer (OAR-P), per response.

    Responses with fewer than 2 reasoning tokens are skipped; a constant score vector gives an
    undefined Spearman (counted in ``n_undefined``).
    """
    from oar.method.metrics import spearman, topk_overlap

    ref = _scores_by_index(reference)
    summary, per_response = {}, []
    for name, rows in scorers.items():
        other = _scores_by_index(rows)
        rhos, overlaps = [], []
        for idx, r in ref.items():
            if len(r) < 2:
                continue
            o = other.get(idx)
            if o is None or len(o) != len(r):
                raise ValueError(f"scorer {name!r}: scores of response {idx} missing or of another length")
            rho, ov = spearman(o, r), topk_overlap(o, r, fraction)
            rhos.append(rho)
            overlaps.append(ov)
            per_response.append({"scorer": name, "index": idx, "spearman": rho, "topk_overlap": ov})
        summary[name] = {"spearman": _spread(rhos), "topk_overlap": _spread(overlaps)}
    return {"fraction": fraction, "summary": summary, "per_response": per_response}
