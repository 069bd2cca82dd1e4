"""Paired-seed statistics of the main comparison (oar.analysis.outcomes, oar.analysis.paired): per-seed outcomes
from accuracy and
training curves, each method minus the baseline with a 95% interval, and the table built from them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from oar.analysis.outcomes import base_accuracy, per_seed_outcomes, steps_to_threshold, threshold_rule
from oar.analysis.paired import paired_differences, paired_table

pytestmark = pytest.mark.quick


def test_steps_to_threshold_uses_the_trailing_mean():
    assert steps_to_threshold([0.1, 0.9, 0.1, 0.9, 0.9, 0.9], 0.6, window=3) == 4.0
    assert steps_to_threshold([0.7], 0.6, window=5) == 1.0
    assert math.isnan(steps_to_threshold([0.1, 0.2], 0.6))


def _frames(effect: float, seeds=range(5)):
    acc, curves = [], []
    for seed in seeds:
        for method, shift in (("grpo", 0.0), ("oar_g", effect)):
            run = f"m/{method}-seed{seed}"
            acc.append({"run": run, "model": "m", "method": method, "seed": seed, "benchmark": "chain_test",
                        "pass@1": 0.4 + 0.01 * seed + shift})
            for step in range(1, 11):
                curves.append({"run": run, "model": "m", "method": method, "seed": seed, "step": step,
                               "reward": min(1.0, 0.3 + 0.05 * step + shift + 0.01 * seed)})
    return pd.DataFrame(acc), pd.DataFrame(curves)


def test_a_constant_paired_effect_is_decided_with_a_zero_width_interval():
    acc, curves = _frames(0.1)
    outcomes = per_seed_outcomes(acc, curves, "chain_test", threshold=0.6, window=1)
    d = paired_differences(outcomes).set_index("metric")
    assert d.at["final_accuracy", "diff_mean"] == pytest.approx(0.1)
    assert d.at["final_accuracy", "ci_low"] == pytest.approx(0.1) and d.at["final_accuracy", "decided"]
    assert d.at["reward_auc", "diff_mean"] == pytest.approx(0.1)
    # censored data: the difference of the Kaplan-Meier medians, with no interval and never decided
    assert d.at["steps_to_threshold", "diff_mean"] == pytest.approx(-2.0)  # 0.6 reached 2 steps earlier
    assert math.isnan(d.at["steps_to_threshold", "ci_low"]) and not d.at["steps_to_threshold", "decided"]
    assert d.at["steps_to_threshold", "method_reached"] == 5
    assert d.at["final_accuracy", "wins"] == 5 and d.at["final_accuracy", "n_seeds"] == 5
    assert d.at["final_accuracy", "p"] < 1e-9 and d.at["final_accuracy", "role"] == "secondary"
    frame, md = paired_table(d.reset_index(), threshold_rule(0.6, None))
    assert "OAR-G" in md and "10.0 [10.0, 10.0] *" in md and "5/5 vs 5/5" in md
    assert "minus GRPO (reward threshold 0.600)" in md and "reaches 0.6;" in md
    assert "No primary comparisons declared" in md
    assert "starting reward (mean first-step reward of its runs) + 0.08" in threshold_rule(None, 0.08)


def test_noise_around_zero_is_not_decided():
    acc, curves = _frames(0.0)
    acc.loc[acc["method"] == "oar_g", "pass@1"] += [0.03, -0.02, 0.01, -0.03, 0.02]
    d = paired_differences(per_seed_outcomes(acc, curves, "chain_test", 0.6)).set_index("metric")
    assert d.at["final_accuracy", "ci_low"] < 0 < d.at["final_accuracy", "ci_high"]
    assert not d.at["final_accuracy", "decided"]


def test_only_seeds_both_methods_ran_are_paired_and_a_run_without_accuracy_is_an_error():
    acc, curves = _frames(0.1)
    drop = (acc["method"] == "grpo") & (acc["seed"] == 4)
    acc2, curves2 = acc[~drop], curves[~((curves["method"] == "grpo") & (curves["seed"] == 4))]
    d = paired_differences(per_seed_outcomes(acc2, curves2, "chain_test", 0.6))
    assert set(d["n_seeds"]) == {4}
    with pytest.raises(ValueError, match="no chain_test accuracy"):
        per_seed_outcomes(acc2, curves, "chain_test", 0.6)


def test_base_accuracy_reads_the_untrained_rows_of_one_benchmark():
    acc = pd.DataFrame([
        {"model": "a", "method": "base", "benchmark": "chain_test", "pass@1": 0.3},
        {"model": "a", "method": "base", "benchmark": "other", "pass@1": 0.9},
        {"model": "a", "method": "grpo", "benchmark": "chain_test", "pass@1": 0.5},
        {"model": "b", "method": "base", "benchmark": "chain_test", "pass@1": 0.2},
    ])
    assert base_accuracy(acc, "chain_test") == {"a": 0.3, "b": 0.2}


def test_length_sweep_table_reports_each_method_and_length():
    from oar.analysis.length_sweep import length_sweep_table

    rows = []
    for model, shift in (("chain_f0", 0.0), ("chain_f2", -0.1)):
        for seed in range(3):
            rows.append({"model": model, "method": "grpo", "seed": seed, "final_accuracy": 0.5 + shift + 0.01 * seed,
                         "steps_to_threshold": 10 + seed, "reached": True, "steps": 20})
            rows.append({"model": model, "method": "oar_g", "seed": seed, "final_accuracy": 0.55 + shift,
                         "steps_to_threshold": math.nan, "reached": False, "steps": 20})
    frame, md = length_sweep_table(pd.DataFrame(rows), "0.42", base={"chain_f0": 0.3, "chain_f2": 0.25},
                                   lengths={"chain_f0": 40.2, "chain_f2": 66.0})
    f = frame.set_index(["model", "method"])
    assert f.loc[("chain_f2", "grpo"), "accuracy"] == pytest.approx(41.0)
    assert f.loc[("chain_f0", "grpo"), "steps_median_km"] == pytest.approx(11.0)  # 10, 11, 12: median 11
    assert f.loc[("chain_f0", "oar_g"), "reached"] == 0
    assert math.isnan(f.loc[("chain_f0", "oar_g"), "steps_median_km"])  # never reached: no median, not 21
    assert "| chain_f0: accuracy, % | chain_f2: accuracy, % |" in md
    assert "| Base model | 30.0 | 25.0 | – | – |" in md and "| response tokens (base policy) | 40 | 66 |" in md
    assert "| OAR-G | 55.0 [55.0, 55.0] (3) | 45.0 [45.0, 45.0] (3) | > 20; 20.0 (0/3) |" in md
    assert "reaches 0.42" in md


def test_a_relative_threshold_is_the_starting_reward_plus_the_gain():
    from oar.analysis.outcomes import reward_thresholds

    rows = []
    for model, start in (("short", 0.2), ("long", 0.4)):
        for method in ("grpo", "oar_g"):
            for seed in (0, 1):
                # seed s starts at start + 0.02 s for both methods (same first rollouts), then rises 0.05 a step
                rows += [{"run": f"{model}/{method}-{seed}", "model": model, "method": method, "seed": seed,
                          "step": k, "reward": start + 0.02 * seed + 0.05 * (k - 1) * (1 if method == "grpo" else 0.5)}
                         for k in range(1, 11)]
    curves = pd.DataFrame(rows)
    t = reward_thresholds(curves, None, 0.1)
    assert t["short"] == pytest.approx(0.21 + 0.1) and t["long"] == pytest.approx(0.41 + 0.1)
    assert reward_thresholds(curves, 0.6, None) == {"short": 0.6, "long": 0.6}
    with pytest.raises(ValueError, match="exactly one"):
        reward_thresholds(curves, 0.6, 0.1)
    acc = pd.DataFrame([{"run": r, "benchmark": "chain_test", "pass@1": 0.5} for r in curves["run"].unique()])
    out = per_seed_outcomes(acc, curves, "chain_test", None, window=1, gain=0.1)
    # GRPO gains 0.05 a step: seed 0 of "short" (start 0.20) passes 0.31 at step 4; OAR-G (0.025 a step) at step 6
    got = out.set_index("run")["steps_to_threshold"]
    assert got["short/grpo-0"] == 4 and got["short/oar_g-0"] == 6 and set(out["threshold"].round(3)) == {0.31, 0.51}
    d = paired_differences(out)
    assert set(d["threshold"].round(3)) == {0.31, 0.51}
