"""The tests and corrections of oar.analysis.statistics against known values and direct computations,
and the paired-differences table built on them (primary family, Holm, MDE, censored steps)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oar.analysis import statistics
from oar.analysis.outcomes import per_seed_outcomes
from oar.analysis.paired import paired_differences, paired_table

pytestmark = pytest.mark.quick


def test_holm_on_a_known_example():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03, 2 x 0.03 = 0.06, 1 x 0.04 = 0.04 -> running max 0.06
    assert statistics.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert statistics.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    out = statistics.holm([0.02, math.nan, 0.04])  # nan neither adjusted nor counted
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_mde_matches_a_direct_computation_and_the_noncentral_t_power():
    sd, n = 0.04, 10
    direct = (stats.t.ppf(0.975, 9) + stats.t.ppf(0.8, 9)) * sd / math.sqrt(n)
    assert statistics.mde(sd, n) == pytest.approx(direct)
    # the power of a paired t-test at that effect is about 80% (the formula is the usual approximation)
    crit = stats.t.ppf(0.975, 9)
    power = stats.nct.sf(crit, 9, direct / (sd / math.sqrt(n)))
    assert 0.75 < power < 0.85
    assert statistics.mde(sd, n, alpha=0.05 / 3) > statistics.mde(sd, n)  # Holm's strictest level needs more
    assert math.isnan(statistics.mde(sd, 1))


def test_paired_t_matches_scipy():
    d = [0.03, -0.01, 0.02, 0.05, 0.01]
    t = statistics.paired_t(d)
    assert t["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    assert t["sd"] == pytest.approx(np.std(d, ddof=1))
    assert t["ci_low"] < t["mean"] < t["ci_high"]


def test_binomial_se():
    assert statistics.binomial_se(0.5, 100, 4) == pytest.approx(math.sqrt(0.25 / 400))
    assert math.isnan(statistics.binomial_se(0.5, 0, 4))


def test_kaplan_meier_with_a_censored_run():
    # reached at 2, 4, 6; one run censored at 5 (never reached in its 5 steps)
    km = statistics.kaplan_meier([2, 4, 6, 5], [True, True, True, False])
    # S: 1 -> 3/4 at 2 -> 3/4 * 2/3 = 1/2 at 4: the median is 4
    assert km["median"] == 4 and km["reached"] == 3 and km["n"] == 4
    # area: 1 x 2 + 0.75 x 2 + 0.5 x 1 (4..5) + 0.5 x 1 (5..6, the censored run leaves) = 4.5
    assert km["rmst"] == pytest.approx(4.5)
    never = statistics.kaplan_meier([10, 10, 10], [False, False, False])
    assert math.isnan(never["median"]) and never["reached"] == 0


def test_blocked_trend_recovers_a_slope_under_seed_offsets():
    strength, values, blocks = [], [], []
    for seed, offset in enumerate([0.0, 0.1, -0.05, 0.2]):
        for x, noise in zip([1.0, 2.0, 4.0], [0.001, -0.002, 0.001]):
            strength.append(x)
            values.append(offset - 0.02 * x + noise)
            blocks.append(seed)
    t = statistics.blocked_trend(strength, values, blocks)
    assert t["slope"] == pytest.approx(-0.02, abs=0.002) and t["p"] < 0.001 and t["blocks"] == 4
    flat = statistics.blocked_trend(strength, [v + 0.02 * x for v, x in zip(values, strength)], blocks)
    assert flat["p"] > 0.05


def _outcomes(effects: dict[str, float], seeds=range(10), censor: str | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    acc, curves = [], []
    for seed in seeds:
        noise = rng.normal(0, 0.02, len(effects) + 1)
        for (method, effect), e in zip({"grpo": 0.0, **effects}.items(), noise):
            run = f"m/{method}-seed{seed}"
            acc.append({"run": run, "model": "m", "method": method, "seed": seed, "benchmark": "t",
                        "pass@1": 0.4 + effect + e})
            slope = 0.0 if method == censor else 0.05
            curves += [{"run": run, "model": "m", "method": method, "seed": seed, "step": k,
                        "reward": 0.3 + slope * k} for k in range(1, 11)]
    return per_seed_outcomes(pd.DataFrame(acc), pd.DataFrame(curves), "t", threshold=0.6, window=1)


PRIMARY = {"baseline": "grpo", "arms": ["oar_p", "oar_g"], "metric": "final_accuracy", "min_seeds": 10}


def test_primary_rows_carry_holm_and_secondary_rows_do_not():
    d = paired_differences(_outcomes({"oar_p": 0.05, "oar_g": 0.0, "entropy": 0.03}), primary=PRIMARY)
    primary = d[d["role"] == "primary"].set_index("method")
    assert set(primary.index) == {"oar_p", "oar_g"} and set(primary["metric"]) == {"final_accuracy"}
    assert list(primary["p_holm"]) == pytest.approx(statistics.holm(list(primary["p"])))
    assert (primary["family_size"] == 2).all()
    assert primary.at["oar_p", "mde_holm"] == pytest.approx(
        statistics.mde(primary.at["oar_p", "sd_diff"], 10, alpha=0.025))
    secondary = d[d["role"] == "secondary"]
    assert secondary["p_holm"].isna().all() and "entropy" in set(secondary["method"])
    assert (d[d["metric"] == "reward_auc"]["role"] == "secondary").all()
    frame, md = paired_table(d, "0.6", primary=PRIMARY, not_run=["bi-level minus boost-only"])
    assert {"p", "p_holm", "sd_diff", "mde", "mde_holm", "role"} <= set(frame.columns)
    assert "| Holm p |" in md and "MDE 80% (Holm)" in md and "secondary (exploratory)" in md
    assert "a family of 2" in md and "bi-level minus boost-only: not run" in md
    assert "underpowered" not in md
    _, md5 = paired_table(d, "0.6", primary={**PRIMARY, "min_seeds": 5})
    assert "underpowered" in md5


def test_a_run_that_never_reaches_the_threshold_is_censored_not_averaged():
    out = _outcomes({"oar_g": 0.0}, seeds=range(4), censor="oar_g")
    assert not out[out["method"] == "oar_g"]["reached"].any()
    assert out[out["method"] == "oar_g"]["steps_to_threshold"].isna().all()
    d = paired_differences(out).set_index("metric")
    s = d.loc["steps_to_threshold"]
    assert s["method_reached"] == 0 and s["baseline_reached"] == 4
    assert math.isnan(s["method_mean"]) and math.isnan(s["ci_low"])  # no median within 10 steps, no interval
    _, md = paired_table(d.reset_index(), "0.6")
    assert "0/4 vs 4/4" in md and "> 10 vs 6" in md


def _accuracy(variants: dict[tuple, float], seeds=range(4), slope_noise=(0.002, -0.001, 0.0, 0.001)) -> pd.DataFrame:
    """(method, tau, beta) -> accuracy; one run per seed, a seed offset shared by every variant."""
    rows = []
    for seed in seeds:
        for (method, tau, beta), value in variants.items():
            rows.append({"run": f"m/{method}-{tau}-{beta}-{seed}", "model": "m", "method": method, "tau": tau,
                         "beta": beta, "probe": None, "seed": seed, "benchmark": "t",
                         "pass@1": value + 0.03 * seed + slope_noise[seed] * (tau or 0),
                         "ci_low": 0.0, "ci_high": 1.0, "num_problems": 100, "samples_per_problem": 4})
    return pd.DataFrame(rows)


def test_gating_table_tests_the_bi_level_gate_against_boost_only_directly():
    from oar.analysis.accuracy import accuracy_table
    from oar.analysis.gating import gate_comparisons

    acc = _accuracy({("grpo", None, None): 0.5, ("oar_g", 0.0, 2.0): 0.48, ("oar_g", 0.4, 2.0): 0.52,
                     ("oar_g", 1.0, 2.0): 0.45})
    tests = gate_comparisons(acc, ["t"]).set_index("comparison")
    boost = tests.loc["bi-level (tau 0.4) minus boost-only (tau 0)"]
    assert boost["diff_mean"] == pytest.approx(0.04, abs=0.002) and boost["n_seeds"] == 4 and boost["p"] < 0.01
    assert tests.loc["bi-level (tau 0.4) minus suppress-only (tau 1)", "diff_mean"] == pytest.approx(0.07, abs=0.002)
    frame, md = accuracy_table(acc, ["t"], "Gating", show=("tau",), gate_tests=True)
    assert "### Bi-level gate against boost-only and suppress-only" in md
    assert "bi-level (tau 0.4) minus boost-only (tau 0)" in md
    # every accuracy table: both noise sources and the paired p and MDE
    assert "seed SD / eval SE" in md and "| p | MDE 80% |" in md
    assert {"minus_grpo_p", "minus_grpo_mde", "average_seed_sd", "average_eval_se"} <= set(frame.columns)
    grpo = frame[frame["method"] == "grpo"].iloc[0]
    assert grpo["average_seed_sd"] == pytest.approx(100 * np.std([0.5 + 0.03 * s for s in range(4)], ddof=1))
    mean_se = np.mean([statistics.binomial_se(0.5 + 0.03 * s, 100, 4) for s in range(4)])
    assert grpo["average_eval_se"] == pytest.approx(100 * mean_se)
    row = frame[(frame["method"] == "oar_g") & (frame["tau"] == 1.0)].iloc[0]
    d = [0.45 + 0.03 * s + (0.002, -0.001, 0.0, 0.001)[s] - 0.5 - 0.03 * s for s in range(4)]
    assert row["minus_grpo_mde"] == pytest.approx(100 * statistics.mde(np.std(d, ddof=1), 4))
    _, without = accuracy_table(acc[acc["tau"] != 0.0], ["t"], "Gating", show=("tau",), gate_tests=True)
    assert "minus boost-only" not in without and "minus suppress-only" in without


def test_grid_table_tests_the_trend_over_reshaping_strength():
    from oar.analysis.grid import grid_table, strength_trends

    # accuracy falls 2 points per doubling of beta and does not depend on tau
    variants = {("oar_g", tau, beta): 0.55 - 0.02 * math.log2(beta) for tau in (0.2, 0.4) for beta in (1.0, 2.0, 4.0)}
    acc = _accuracy({("grpo", None, None): 0.5, **variants}, slope_noise=(0.0, 0.0, 0.0, 0.0))
    acc["pass@1"] += np.random.default_rng(1).normal(0, 0.003, len(acc))
    trends = strength_trends(acc, ["t"]).set_index("strength")
    beta = trends.loc["log2(beta), per doubling"]
    assert beta["slope"] == pytest.approx(-0.02, abs=0.004) and beta["p"] < 0.001 and beta["blocks"] == 8
    assert trends.loc["tau, per unit", "p"] > 0.01
    _, md = grid_table(acc, ["t"])
    assert "### Trend over reshaping strength" in md and "log2(beta), per doubling" in md
    assert "p (raw) and MDE 80%" in md and "; MDE " in md


def test_length_sweep_figure_draws_censored_steps(tmp_path):
    from oar.analysis import figures

    rows = [{"model": model, "method": method, "seed": seed, "final_accuracy": 0.5, "steps": 10,
             "steps_to_threshold": 4.0 if method == "grpo" else math.nan, "reached": method == "grpo"}
            for model in ("a", "b") for method in ("grpo", "oar_g") for seed in range(3)]
    paths = [tmp_path / "sweep.png"]
    figures.length_sweep(pd.DataFrame(rows), paths)
    assert paths[0].stat().st_size > 1000


def test_clustered_mean_by_hand():
    # clusters a: 1, 0 and b: 1, 1 -> mean 3/4; sums 1 and 2 against 1.5 each: var = 2/1 * (0.25 + 0.25) / 16
    out = statistics.clustered_mean([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    half = stats.t.ppf(0.975, 1) * math.sqrt(2 * 0.5 / 16)
    assert out["mean"] == 0.75 and out["clusters"] == 2 and out["n"] == 4
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((0.75 - half, 0.75 + half))
    # one item per cluster: the ordinary t-interval of the mean
    values = [0.2, 0.9, 0.4, 0.7, 0.1]
    plain = statistics.spread(values)
    one_each = statistics.clustered_mean(values, list(range(5)))
    assert (one_each["ci_low"], one_each["ci_high"]) == pytest.approx((plain["ci_low"], plain["ci_high"]))
    assert statistics.clustered_mean([math.nan, 1.0], [0, 1])["n_undefined"] == 1
