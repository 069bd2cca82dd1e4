"""The decisive run's reading (oar.analysis.decisive) by its fixed rules, the Holm-level intervals it
prints, and the registry's handling of the graded truth gate where it equals the truth gate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oar.analysis import decisive
from oar.analysis.paired import paired_differences
from oar.experiment.config_error import ConfigError
from oar.experiment.runs import deep_merge

from test_registry import load, registry

pytestmark = pytest.mark.quick

LEVELS = {"low": {"distractors": 0, "filler": 0}, "high": {"distractors": 8, "filler": 0}}
PRIMARY = {"baseline": "grpo", "arms": ["truth", "truth_graded", "oar_g"], "metric": "final_accuracy",
           "min_seeds": 10}


def _outcomes(gains: dict[str, dict[str, float]], seeds=range(10)) -> pd.DataFrame:
    """model -> {method: true gain over GRPO}; per seed a shared offset (training noise every arm of a
    seed shares) and a small arm-specific wobble."""
    rng = np.random.default_rng(0)
    rows = []
    for model, arms in gains.items():
        for seed in seeds:
            offset = rng.normal(0, 0.05)
            for method, gain in {"grpo": 0.0, **arms}.items():
                acc = 0.5 + offset + gain + rng.normal(0, 0.01)
                rows.append({"run": f"{model}/{method}-seed{seed}", "model": model, "method": method, "seed": seed,
                             "threshold": 0.5, "final_accuracy": acc, "reward_auc": acc, "steps_to_threshold": 5.0,
                             "reached": True, "steps": 10})
    return pd.DataFrame(rows)


def test_no_truth_gate_win_makes_the_scorers_uninformative_and_a_win_gives_each_a_share():
    out = _outcomes({"low": {"truth": 0.0, "oar_g": 0.0, "oar_p": -0.06},
                     "high": {"truth": 0.02, "truth_graded": 0.06, "oar_g": 0.03, "entropy": -0.01}})
    readings = decisive.level_readings(paired_differences(out, primary=PRIMARY), LEVELS)
    low = readings[readings["model"] == "low"].set_index("method")
    high = readings[readings["model"] == "high"].set_index("method")
    assert not low.at["truth", "beats"] and low.at["oar_g", "reading"].startswith("not informative")
    assert math.isnan(low.at["oar_g", "share_of_upper_bound"])
    assert low.at["oar_p", "reading"].startswith("below the baseline")  # a decided loss is read as one
    # the upper bound is the better truth gate of the level, and it wins under Holm
    assert high.at["oar_g", "upper_bound"] == "truth_graded" and high.at["truth_graded", "beats"]
    assert high.at["truth_graded", "p_holm"] < 0.05
    share = high.at["oar_g", "diff_mean"] / high.at["truth_graded", "diff_mean"]
    assert high.at["oar_g", "share_of_upper_bound"] == pytest.approx(share) and 0.3 < share < 0.7
    assert high.at["oar_g", "reading"] == "recovers part of the upper bound"
    assert high.at["entropy", "reading"] == "fails where the upper bound wins"  # secondary, not above 0
    # levels are ordered by their distractors, whatever the models are called
    assert list(readings["model"].unique()) == ["low", "high"]


def test_the_change_with_the_level_is_welchs_interval_and_the_truth_gate_stands_for_the_graded_one():
    out = _outcomes({"low": {"truth": 0.0, "oar_g": 0.0}, "high": {"truth_graded": 0.06, "oar_g": 0.01}})
    trends = decisive.level_trends(out, LEVELS).set_index("method")
    graded = trends.loc["truth_graded"]
    assert graded["low"] == "low" and graded["high"] == "high" and bool(graded["grows"])

    def per_seed(model, method):
        m = out[out["model"] == model].pivot(index="seed", columns="method", values="final_accuracy")
        return (m[method] - m["grpo"]).to_numpy()

    high, low = per_seed("high", "truth_graded"), per_seed("low", "truth")  # the truth gate at the low level
    direct = stats.ttest_ind(high, low, equal_var=False)
    assert graded["change"] == pytest.approx(high.mean() - low.mean())
    assert graded["p"] == pytest.approx(direct.pvalue)
    ci = direct.confidence_interval(0.95)
    assert (graded["ci_low"], graded["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert not bool(trends.loc["oar_g", "grows"])
    frame, md = decisive.decisive_table(decisive.level_readings(paired_differences(out, primary=PRIMARY), LEVELS),
                                        trends.reset_index())
    assert "## The decisive reading" in md and "The graded truth gate is not run on low" in md
    trend_rows = [line for line in md.split("Change with the distractor level")[1].splitlines()
                  if line.startswith("| graded truth gate")]
    assert len(trend_rows) == 1 and " *" in trend_rows[0]  # grows: its interval lies above 0
    assert set(frame["kind"]) == {"level", "trend"}
    single = decisive.level_trends(out[out["model"] == "high"], LEVELS)
    assert single.empty


def test_holm_level_intervals_are_the_t_intervals_at_alpha_over_the_family():
    out = _outcomes({"high": {"truth": 0.02, "truth_graded": 0.06, "oar_g": 0.03}})
    d = paired_differences(out, primary=PRIMARY)
    row = d[(d["method"] == "oar_g") & (d["metric"] == "final_accuracy")].iloc[0]
    m = out.pivot(index="seed", columns="method", values="final_accuracy")
    diffs = (m["oar_g"] - m["grpo"]).to_numpy()
    half = stats.t.ppf(1 - 0.05 / 3 / 2, len(diffs) - 1) * diffs.std(ddof=1) / math.sqrt(len(diffs))
    assert (row["ci_low_holm"], row["ci_high_holm"]) == pytest.approx((diffs.mean() - half, diffs.mean() + half))
    assert row["ci_low_holm"] < row["ci_low"] and row["ci_high_holm"] > row["ci_high"]
    assert d[d["role"] == "secondary"]["ci_low_holm"].isna().all()


def test_the_graded_truth_gate_is_not_run_where_it_equals_the_truth_gate():
    reg = registry(load("studies/decisive.yaml"))
    graded = {r.split("/")[0] for r in reg.groups["main"] if reg.runs[r]["method"] == "truth_graded"}
    assert graded == {"chain_d8"}  # chain_d0 writes no remarks or notes
    assert {r.split("/")[0] for r in reg.groups["main"] if reg.runs[r]["method"] == "truth"} == {"chain_d0", "chain_d8"}
    assert "decisive" in reg.tables
    assert reg.distractor_levels() == {"chain_d0": {"filler": 0, "distractors": 0},
                                       "chain_d8": {"filler": 0, "distractors": 8}}
    only_d0 = deep_merge(load("studies/decisive.yaml"), {"runs": {"main": {"models": ["chain_d0"]}},
                                                 "analysis": {"primary": {"arms": ["truth", "truth_graded"]}}})
    with pytest.raises(ConfigError, match="runs.main.methods"):
        registry(only_d0)
