"""Decision rules fixed in advance: one-sided and equivalence tests, the Hodges-Lehmann interval, the
log-rank test, O'Brien-Fleming group-sequential boundaries and the upper-bound test's design and reading."""

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from oar.analysis import sequential, statistics, upper_bound

pytestmark = pytest.mark.quick


# ------------------------------------------------------------------------------ one-sided and TOST


def test_one_sided_t_matches_scipy_and_its_bound_decides():
    d = [0.8, -0.2, 1.5, 0.3, -1.1, 0.9, 0.4, 0.0]
    r = statistics.one_sided_t(d, 1.5, "less")
    ref = stats.ttest_1samp(d, 1.5, alternative="less")
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert r["t"] == pytest.approx(ref.statistic, rel=1e-12)
    # the one-sided upper limit is below the margin exactly when p is below the level
    for level in (0.01, 0.05, 0.2):
        r = statistics.one_sided_t(d, 1.5, "less", level)
        assert (r["bound"] < 1.5) == (r["p"] < level)
    g = statistics.one_sided_t(d, -1.0, "greater")
    assert g["p"] == pytest.approx(stats.ttest_1samp(d, -1.0, alternative="greater").pvalue, rel=1e-12)


def test_tost_is_two_one_sided_tests_and_its_90_interval():
    rng = np.random.default_rng(0)
    d = rng.normal(0.2, 1.0, 40)
    r = statistics.tost(d, 1.0)
    lo = stats.ttest_1samp(d, -1.0, alternative="greater").pvalue
    hi = stats.ttest_1samp(d, 1.0, alternative="less").pvalue
    assert r["p"] == pytest.approx(max(lo, hi), rel=1e-12)
    ci = stats.ttest_1samp(d, 0).confidence_interval(0.90)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert r["equivalent"] == (-1.0 < r["ci_low"] and r["ci_high"] < 1.0)
    # ten noisy seeds cannot show equivalence within a narrow margin: "no difference detected" is not equivalence
    wide = statistics.tost(rng.normal(0.0, 5.0, 10), 1.5)
    assert not wide["equivalent"]
    with pytest.raises(ValueError, match="positive"):
        statistics.tost(d, 0.0)


# ------------------------------------------------------------------------------ Hodges-Lehmann, Wilcoxon


def test_hodges_lehmann_interval_inverts_the_exact_signed_rank_test():
    d = np.array([2.1, -0.7, 3.4, 1.2, 0.5, 4.0, -1.9, 2.6, 0.9, 1.7, 3.1, -0.2])
    hl = statistics.hodges_lehmann(d, 0.95)
    walsh = [(d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d))]
    assert hl["estimate"] == pytest.approx(np.median(walsh))
    assert hl["coverage"] >= 0.95
    eps = 1e-6
    for limit in (hl["ci_low"], hl["ci_high"]):
        inside = limit + eps if limit == hl["ci_low"] else limit - eps
        outside = limit - eps if limit == hl["ci_low"] else limit + eps
        # exact two-sided signed-rank test: not rejected just inside the interval, rejected just outside
        assert stats.wilcoxon(d - inside, method="exact").pvalue > 0.05
        assert stats.wilcoxon(d - outside, method="exact").pvalue <= 0.05
    up = statistics.hodges_lehmann(d, 0.95, side="upper")
    assert up["ci_low"] == -math.inf and up["ci_high"] < hl["ci_high"]
    assert stats.wilcoxon(d - (up["ci_high"] + eps), alternative="less", method="exact").pvalue <= 0.05
    # three values cannot reach 95%: infinite limits, coverage nan
    assert statistics.hodges_lehmann([1.0, 2.0, 3.0])["ci_low"] == -math.inf


def test_wilcoxon_shift_tests_against_the_margin():
    d = [0.1, -0.4, 0.3, 0.0, -0.2, 0.5, -0.1, 0.2, 0.05, -0.3]
    r = statistics.wilcoxon_shift(d, 1.5, "less")
    assert r["p"] == pytest.approx(stats.wilcoxon(np.array(d) - 1.5, alternative="less").pvalue)
    assert r["p"] < 0.01


# ------------------------------------------------------------------------------ log-rank


def test_logrank_matches_scipy_with_censoring():
    a_t, a_e = [12, 18, 18, 22, 25, 40, 40, 15], [True, True, True, True, True, False, False, True]
    b_t, b_e = [20, 28, 30, 33, 40, 40, 40, 26], [True, True, True, True, False, False, False, True]
    r = statistics.logrank(a_t, a_e, b_t, b_e)
    ref = stats.logrank(stats.CensoredData(uncensored=[t for t, e in zip(a_t, a_e) if e],
                                           right=[t for t, e in zip(a_t, a_e) if not e]),
                        stats.CensoredData(uncensored=[t for t, e in zip(b_t, b_e) if e],
                                           right=[t for t, e in zip(b_t, b_e) if not e]))
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert r["observed_a"] > r["expected_a"]  # a reaches the threshold sooner
    assert math.isnan(statistics.logrank([40], [False], [40], [False])["p"])


# ------------------------------------------------------------------------------ O'Brien-Fleming


def test_lan_demets_obrien_fleming_boundaries_match_published_values():
    # one-sided 0.025 (Jennison & Turnbull; gsDesign's sfLDOF): three and five equally spaced looks
    assert sequential.obf_boundaries([1 / 3, 2 / 3, 1], 0.025) == pytest.approx([3.7103, 2.5114, 1.9930], abs=2e-4)
    assert sequential.obf_boundaries([0.2, 0.4, 0.6, 0.8, 1], 0.025) == pytest.approx(
        [4.8769, 3.3570, 2.6803, 2.2898, 2.0310], abs=2e-4)


def test_classic_obrien_fleming_constants_match_published_values():
    # O'Brien and Fleming's C_B(K, 0.05), two-sided: 1.977 (K 2), 2.004 (K 3), 2.040 (K 5)
    for k, c in ((2, 1.977), (3, 2.004), (5, 2.040)):
        t = [(i + 1) / k for i in range(k)]
        bounds = sequential.obf_boundaries(t, 0.025, "classic")
        assert bounds[-1] == pytest.approx(c, abs=1.5e-3)
        assert bounds[0] == pytest.approx(bounds[-1] / math.sqrt(t[0]), rel=1e-9)


def test_boundaries_spend_alpha_as_declared_and_power_agrees_with_simulation():
    fractions = [1 / 3, 2 / 3, 1]
    bounds = sequential.obf_boundaries(fractions, 0.05)
    cross = sequential.crossing_probabilities(bounds, fractions)
    spent = [sequential.spending_obf(t, 0.05) for t in fractions]
    assert np.cumsum(cross) == pytest.approx(spent, abs=1e-7)
    # Monte Carlo of the Brownian motion at the looks, with a drift
    rng = np.random.default_rng(1)
    drift = 2.5
    inc = rng.normal(0, 1, (200_000, 3)) * np.sqrt(np.diff([0, *fractions])) + drift * np.diff([0, *fractions])
    z = np.cumsum(inc, axis=1) / np.sqrt(fractions)
    crossed = (z >= np.asarray(bounds)).any(axis=1).mean()
    assert sequential.power(bounds, fractions, drift) == pytest.approx(crossed, abs=4e-3)
    with pytest.raises(ValueError, match="increase"):
        sequential.obf_boundaries([0.5, 0.4, 1.0], 0.05)


def test_conditional_power_agrees_with_a_simulation_from_the_interim_look():
    fractions = [1 / 3, 2 / 3, 1]
    bounds = sequential.obf_boundaries(fractions, 0.05)
    rng = np.random.default_rng(4)
    for z, drift in [(0.35, 0.0), (0.35, 1.5), (1.8, 2.5), (-1.0, 3.0)]:
        # paths that stood at z at the first look, with the drift's mean increments afterwards
        steps = np.diff(fractions)
        inc = rng.normal(0, 1, (200_000, 2)) * np.sqrt(steps) + drift * steps
        s = z * math.sqrt(fractions[0]) + np.cumsum(inc, axis=1)
        crossed = (s / np.sqrt(fractions[1:]) >= np.asarray(bounds[1:])).any(axis=1).mean()
        assert sequential.conditional_power(bounds, fractions, 0, z, drift) == pytest.approx(crossed, abs=4e-3)
    # from the second look only the last remains: a single normal tail
    cp = sequential.conditional_power(bounds, fractions, 1, 1.0, 2.0)
    start = 1.0 * math.sqrt(2 / 3)
    assert cp == pytest.approx(stats.norm.sf((bounds[2] - start - 2.0 / 3) / math.sqrt(1 / 3)), abs=1e-6)
    with pytest.raises(ValueError, match="later look"):
        sequential.conditional_power(bounds, fractions, 2, 0.0, 0.0)


def test_read_looks_stops_at_the_first_crossing():
    rng = np.random.default_rng(3)
    clearly_below = list(rng.normal(-1.0, 1.0, 60) / 100)  # gains of -1 point, SD 1: stops at the first look
    rows = sequential.read_looks(clearly_below, [20, 40, 60], 0.015, 0.05)
    assert rows[0]["status"].startswith("stopped") and rows[0]["upper"] < 0.015
    assert rows[1]["status"].startswith("not read") and "mean" not in rows[1]
    at_margin = list(rng.normal(0.015, 0.03, 60))  # a true gain of the margin: nothing stops, final says so
    rows = sequential.read_looks(at_margin, [20, 40, 60], 0.015, 0.05)
    assert [r["status"] for r in rows][-1] in ("final: gain of the margin not excluded", "not read: stopped earlier")
    partial = sequential.read_looks(at_margin[:25], [20, 40, 60], 0.015, 0.05)
    assert partial[1]["status"] == "not reached" and partial[2]["status"] == "not reached"
    # the look's rejection and its repeated confidence limit agree; the sensitivity analysis is at the same level
    r = partial[0]
    assert r["rejects"] == (r["upper"] < 0.015)
    assert r["hl_upper"] >= r["hl_estimate"]


# ------------------------------------------------------------------------------ the upper-bound test


def _design(**over):
    d = {"model": "chain_d8", "arm": "truth_graded", "baseline": "grpo", "metric": "final_accuracy",
         "margin": 0.015, "alpha": 0.05, "looks": [20, 40, 60], "spending": "lan_demets",
         "pilot_seeds": list(range(10)),
         "derailment": {"exclude": None, "outcome": {"below_base": 0.0}},
         "planning": {"sds": [0.0308, 0.055], "assumed_gain": 0.0, "minutes_per_pair": 14.0, "cores": 2,
                      "max_hours": 4}}
    d.update(over)
    return d


MAIN = {"models": ["chain_d8"], "methods": ["grpo", "truth_graded"], "seeds": list(range(100, 160))}


def test_the_declared_design_checks_clean_and_bad_input_names_its_key():
    assert upper_bound.check_design(_design(), MAIN) == []
    cases = {
        "analysis.upper_bound.margin": _design(margin=1.5),
        "analysis.upper_bound.alpha": _design(alpha=0.5),
        "analysis.upper_bound.spending": _design(spending="pocock"),
        "analysis.upper_bound.pilot_seeds": _design(pilot_seeds=[0, 100]),
    }
    for key, design in cases.items():
        assert key in [k for k, _ in upper_bound.check_design(design, MAIN)], key
    for looks in ([40, 20, 60], [2, 40, 60], [20, 40, 70]):
        assert "analysis.upper_bound.looks" in [k for k, _ in upper_bound.check_design(_design(looks=looks), MAIN)]
    post = {"exclude": {"metric": "loss", "step": 1, "below": 0.0}, "outcome": {"below_base": 0.0}}
    keys = [k for k, _ in upper_bound.check_design(_design(derailment=post), MAIN)]
    assert "analysis.upper_bound.derailment.exclude.metric" in keys
    late = {"exclude": {"metric": "reward", "step": 10, "below": 0.1}, "outcome": {"below_base": 0.0}}
    assert "analysis.upper_bound.derailment.exclude.step" in [
        k for k, _ in upper_bound.check_design(_design(derailment=late), MAIN)]
    three = dict(MAIN, methods=["grpo", "truth_graded", "truth"])
    assert "analysis.upper_bound.arm" in [k for k, _ in upper_bound.check_design(_design(), three)]


def _outcomes(diffs, seeds, base=0.5, method_acc=None):
    rows = []
    for s, d in zip(seeds, diffs):
        rows.append({"model": "chain_d8", "method": "grpo", "seed": s, "final_accuracy": base,
                     "run": f"chain_d8/grpo-seed{s}"})
        rows.append({"model": "chain_d8", "method": "truth_graded", "seed": s, "final_accuracy": base + d,
                     "run": f"chain_d8/truth_graded-seed{s}"})
    return pd.DataFrame(rows)


def test_reading_synthetic_seeds_at_each_look():
    seeds = list(range(100, 160))
    rng = np.random.default_rng(7)
    diffs = list(rng.normal(-0.005, 0.03, 60))
    # the first look's seeds only (an interim run): one look read, the rest not reached
    r = upper_bound.read_upper_bound(_outcomes(diffs[:20], seeds[:20]), _design(), seeds, 0.45)
    assert r["seeds_run"] == 20 and r["looks"][0]["pairs"] == 20
    later = "not reached" if r["looks"][0]["status"] == "continue" else "not read: stopped earlier"
    assert [x["status"] for x in r["looks"][1:]] == [later, later]
    direct = statistics.one_sided_t(diffs[:20], 0.015, "less", r["looks"][0]["nominal_alpha"])
    assert r["looks"][0]["p"] == pytest.approx(direct["p"])
    full = upper_bound.read_upper_bound(_outcomes(diffs, seeds), _design(), seeds, 0.45)
    assert any(x["status"].startswith(("stopped", "final")) for x in full["looks"])


def test_a_missing_run_before_a_later_seed_stops_the_reading_naming_it():
    seeds = list(range(100, 160))
    frame = _outcomes([0.0] * 25, seeds[:25])
    frame = frame[~((frame["seed"] == 107) & (frame["method"] == "truth_graded"))]
    with pytest.raises(ValueError, match="chain_d8/truth_graded seed 107"):
        upper_bound.read_upper_bound(frame, _design(), seeds, 0.45)


def test_derailment_outcome_per_arm_and_pre_update_exclusion():
    seeds = list(range(100, 160))
    frame = _outcomes([0.0] * 60, seeds)
    frame.loc[(frame["seed"] == 101) & (frame["method"] == "truth_graded"), "final_accuracy"] = 0.2
    frame.loc[(frame["seed"] == 102), "final_accuracy"] = 0.3  # both arms derail
    r = upper_bound.read_upper_bound(frame, _design(), seeds, 0.45)
    assert r["derailment"]["truth_graded"] == 2 and r["derailment"]["grpo"] == 1
    assert r["derailment"]["arm_only"] == 1 and r["derailment"]["p_mcnemar"] == pytest.approx(1.0)
    # an exclusion rule on the first step's reward: seed 103's rollouts before any update earned nothing
    curves = pd.DataFrame([{"run": run, "step": 1, "reward": 0.0 if "seed103" in run else 0.3}
                           for run in frame["run"]])
    design = _design(derailment={"exclude": {"metric": "reward", "step": 1, "below": 0.05},
                                 "outcome": {"below_base": 0.0}})
    r = upper_bound.read_upper_bound(frame, design, seeds, 0.45, curves)
    assert [p["seed"] for p in r["pairs"] if p["excluded"]] == [103]
    # 59 pairs left: the final look falls at 59 and spends what is left; the interim boundaries are the planned
    assert r["looks"][-1]["pairs"] == 59 and r["looks"][-1]["fraction"] == 1.0
    assert r["looks"][0]["boundary_z"] == pytest.approx(upper_bound.plan(_design())["boundaries_z"][0])


def test_plan_states_power_and_time_against_the_budget():
    p = upper_bound.plan(_design())
    assert p["boundaries_z"] == pytest.approx([3.200, 2.141, 1.695], abs=2e-3)
    assert p["scenarios"][0]["power"] > p["scenarios"][1]["power"]  # a larger SD, less power
    assert p["hours_at_look"] == pytest.approx([20 * 7 / 60, 40 * 7 / 60, 60 * 7 / 60])
    assert p["pairs_in_budget"] == 34


# ------------------------------------------------------------------------------ the declared config


def _registry(cfg):
    from validated_registry import validated_registry

    return validated_registry(cfg)


def _config(name):
    from pathlib import Path

    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / name).read_text())


def _upper_bound_config(**design):
    from oar.experiment.runs import deep_merge

    return deep_merge(deep_merge(_config("studies/decisive.yaml"), _config("studies/upper-bound.yaml")),
                      {"analysis": {"upper_bound": design}} if design else {})


def test_the_upper_bound_config_plans_two_arms_on_fresh_seeds_and_its_table():
    reg = _registry(_upper_bound_config())
    runs = reg.groups["main"]
    assert len(runs) == 120 and {reg.runs[r]["method"] for r in runs} == {"grpo", "truth_graded"}
    assert {reg.runs[r]["seed"] for r in runs} == set(range(100, 160))
    assert "upper_bound" in reg.tables and "decisive" not in reg.tables
    assert reg.upper_bound["seeds"] == list(range(100, 160))
    interim = _registry(_upper_bound_config(through_look="1"))  # as Snakemake's --config passes it
    assert len(interim.groups["main"]) == 40 and interim.upper_bound["seeds"] == list(range(100, 160))
    # the interim runs are the full design's: the same run ids
    assert set(interim.groups["main"]) <= set(runs)


@pytest.mark.parametrize("design,key", [
    ({"margin": 0.5}, "analysis.upper_bound.margin"),
    ({"alpha": 0.3}, "analysis.upper_bound.alpha"),
    ({"looks": [40, 20, 60]}, "analysis.upper_bound.looks"),
    ({"looks": [20, 40]}, "analysis.upper_bound.looks"),
    ({"pilot_seeds": [0, 159]}, "analysis.upper_bound.pilot_seeds"),
    ({"derailment": {"exclude": {"metric": "ess_ratio", "step": 1, "below": 0.5}}},
     "analysis.upper_bound.derailment.exclude.metric"),
    ({"derailment": {"exclude": {"metric": "reward", "step": 2, "below": 0.1}}},
     "analysis.upper_bound.derailment.exclude.step"),
    ({"through_look": 4}, "analysis.upper_bound.through_look"),
])
def test_bad_upper_bound_input_stops_before_any_job_naming_the_key(design, key):
    from oar.experiment.config_error import ConfigError

    with pytest.raises(ConfigError) as e:
        _registry(_upper_bound_config(**design))
    assert e.value.key == key


def test_a_primary_family_beside_the_upper_bound_test_is_refused():
    from oar.experiment.config_error import ConfigError
    from oar.experiment.runs import deep_merge

    cfg = deep_merge(_upper_bound_config(), {"analysis": {"primary": {"arms": ["truth_graded"]}}})
    with pytest.raises(ConfigError, match="analysis.primary"):
        _registry(cfg)


# ------------------------------------------------------------------------------ Holm's family as declared


def test_the_registry_declares_holms_family_and_a_missing_run_stops_the_table():
    from oar.analysis.paired import paired_differences

    reg = _registry(_config("studies/decisive.yaml"))
    family = {tuple(x) for x in reg.primary["family"]}
    # the graded gate is not run without notes: seven comparisons, as the decisive run declared
    assert len(family) == 7 and ("chain_d0", "truth_graded") not in family
    assert reg.primary["seeds"] == list(range(10))
    rng = np.random.default_rng(0)
    rows = []
    for model in ("chain_d0", "chain_d8"):
        for method in ("grpo", "truth", "truth_graded", "oar_p", "oar_g"):
            if model == "chain_d0" and method == "truth_graded":
                continue
            for seed in range(10):
                rows.append({"model": model, "method": method, "seed": seed, "threshold": 0.3,
                             "final_accuracy": 0.5 + rng.normal(0, 0.03), "reward_auc": 0.3,
                             "steps_to_threshold": 10.0, "reached": True, "steps": 40})
    outcomes = pd.DataFrame(rows)
    full = paired_differences(outcomes, primary=reg.primary)
    assert int(full["family_size"].dropna().iloc[0]) == 7
    # an interim table with OAR-P's runs on chain_d8 missing would apply Holm over six: it stops instead
    partial = outcomes[~((outcomes["model"] == "chain_d8") & (outcomes["method"] == "oar_p"))]
    with pytest.raises(ValueError, match="chain_d8/oar_p: no paired runs"):
        paired_differences(partial, primary=reg.primary)
    fewer = outcomes[~((outcomes["model"] == "chain_d0") & (outcomes["method"] == "oar_g") & (outcomes["seed"] == 3))]
    with pytest.raises(ValueError, match="chain_d0/oar_g: 9 of the 10 declared seeds"):
        paired_differences(fewer, primary=reg.primary)


# ------------------------------------------------------------------------------ where a rule was declared


def _git(repo, *args):
    import subprocess

    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": __import__("os").environ["PATH"]})
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def test_the_declaring_commit_is_the_one_that_gave_the_rule_its_present_value(tmp_path):
    import shutil

    from oar.analysis import provenance

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    cfg = tmp_path / "run.yaml"
    _git(tmp_path, "init", "-q")
    cfg.write_text("analysis:\n  primary: {arms: [truth]}\n")
    _git(tmp_path, "add", "run.yaml")
    _git(tmp_path, "commit", "-qm", "first")
    cfg.write_text("analysis:\n  primary: {arms: [truth, oar_g]}\n")
    _git(tmp_path, "add", "run.yaml")
    declaring = _git(tmp_path, "commit", "-qm", "the rule")
    cfg.write_text("# a comment\nanalysis:\n  primary: {arms: [truth, oar_g]}\n")
    _git(tmp_path, "add", "run.yaml")
    later = _git(tmp_path, "commit", "-qm", "a comment")
    value = {"arms": ["truth", "oar_g"]}
    d = provenance.declaration("analysis.primary", value, [cfg])
    assert d["status"] == "committed" and d["commit"] == declaring != later
    assert declaring[:12] in provenance.declarations_text([d])
    # changed and not committed: no commit declares it
    cfg.write_text("analysis:\n  primary: {arms: [oar_g]}\n")
    assert provenance.declaration("analysis.primary", {"arms": ["oar_g"]}, [cfg])["status"] == "uncommitted"
    # a value no config file holds came from the command line
    assert provenance.declaration("analysis.primary", {"arms": ["x"]}, [cfg])["status"] == "set on the command line"


def test_a_rule_completed_by_a_merge_is_declared_by_the_merge(tmp_path):
    """Two branches each change the file and a merge joins them: the present value first exists at the
    merge, and a side branch's commit (listed by date among the mainline's in a plain log) must not hide it."""
    import shutil

    from oar.analysis import provenance

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    cfg = tmp_path / "run.yaml"
    _git(tmp_path, "init", "-q", "-b", "main")
    cfg.write_text("analysis:\n  mechanism: {contrasts: [a]}\n\n\nruns: {}\n")
    _git(tmp_path, "add", "run.yaml")
    _git(tmp_path, "commit", "-qm", "first")
    _git(tmp_path, "checkout", "-qb", "side")
    cfg.write_text("analysis:\n  mechanism: {contrasts: [a]}\n\n\nruns: {dose: [1, 2]}\n")
    _git(tmp_path, "commit", "-qam", "the dose, on a branch")
    _git(tmp_path, "checkout", "-q", "main")
    cfg.write_text("analysis:\n  mechanism: {contrasts: [a], step_errors: [b]}\n\n\nruns: {}\n")
    step_errors = _git(tmp_path, "commit", "-qam", "the step errors, on the mainline")
    merge = _git(tmp_path, "merge", "-q", "--no-edit", "side")  # _git returns the new HEAD
    assert "dose" in cfg.read_text() and "step_errors" in cfg.read_text()  # merged without a conflict
    d = provenance.declaration("analysis.mechanism", {"contrasts": ["a"], "step_errors": ["b"]}, [cfg])
    assert d["status"] == "committed" and d["commit"] == step_errors
    d = provenance.declaration("runs.dose", [1, 2], [cfg])
    assert d["status"] == "committed" and d["commit"] == merge


def test_each_run_is_checked_against_the_declaring_commit(tmp_path):
    import shutil

    from oar.analysis import provenance

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    cfg = repo / "run.yaml"
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    before = _git(repo, "commit", "-qm", "code before the rule")
    cfg.write_text("analysis:\n  primary: {arms: [truth]}\n")
    _git(repo, "add", "run.yaml")
    declaring = _git(repo, "commit", "-qm", "the rule")
    (repo / "code.py").write_text("x = 2\n")
    _git(repo, "add", "code.py")
    after = _git(repo, "commit", "-qm", "code after the rule")

    def run_file(name, commit, dirty=False):
        path = tmp_path / name / "run.yaml"
        path.parent.mkdir()
        path.write_text(yaml.safe_dump({"settings": {}, "provenance": {"git": {"commit": commit, "dirty": dirty}}}))
        return path

    d = provenance.declaration("analysis.primary", {"arms": ["truth"]}, [cfg])
    assert d["commit"] == declaring
    made_after = [run_file("a1", after), run_file("a2", declaring), run_file("a3", after, dirty=True)]
    text = provenance.runs_text([d], made_after)
    assert f"Runs read: 3, made at commits {after[:12]} (2), {declaring[:12]} (1); 1 of them with uncommitted" in text
    assert "`analysis.primary`: declared before all 3 runs" in text and "not declared in advance" not in text
    # a run made before the rule was committed: the rule was not declared in advance of it
    text = provenance.runs_text([d], [*made_after, run_file("b", before)])
    assert f"**not declared in advance of 1 of the 4 runs** (made at commits that neither descend from " \
           f"{declaring[:12]} nor hold the rule: {before[:12]} (1))" in text
    # a commit this repository does not have, and a run without a record, are said, not passed
    text = provenance.runs_text([d], [*made_after, run_file("c", "f" * 40), run_file("u", "unknown"),
                                      tmp_path / "missing" / "run.yaml"])
    assert "declared before the 3 runs it can be checked against" in text
    assert "cannot be checked for 1 runs" in text and "2 record no commit" in text


def test_a_run_made_on_the_branch_that_declared_the_rule_counts_as_after_it(tmp_path):
    """A design declared on a side branch and run there before the merge: the mainline's declaring commit is
    the merge, which the runs' commit does not descend from, but their own tree held the rule."""
    import shutil

    from oar.analysis import provenance

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    cfg = repo / "run.yaml"
    _git(repo, "init", "-q", "-b", "main")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-qm", "code")
    _git(repo, "checkout", "-qb", "side")
    cfg.write_text("analysis:\n  mechanism: {contrasts: [a]}\n")
    _git(repo, "add", "run.yaml")
    on_branch = _git(repo, "commit", "-qm", "the design, on a branch")
    _git(repo, "checkout", "-q", "main")
    (repo / "code.py").write_text("x = 2\n")
    before = _git(repo, "commit", "-qam", "code on the mainline, without the design")
    merge = _git(repo, "merge", "-q", "--no-edit", "side")
    d = provenance.declaration("analysis.mechanism", {"contrasts": ["a"]}, [cfg])
    assert d["commit"] == merge

    def run_file(name, commit):
        path = tmp_path / name / "run.yaml"
        path.parent.mkdir()
        path.write_text(yaml.safe_dump({"settings": {}, "provenance": {"git": {"commit": commit, "dirty": False}}}))
        return path

    runs = [run_file("branch", on_branch), run_file("merged", merge)]
    assert provenance.runs_not_after(d, runs) == []
    assert "declared before all 2 runs" in provenance.runs_text([d], runs)
    late = run_file("mainline", before)  # the mainline before the merge: no design in its tree
    assert provenance.runs_not_after(d, [*runs, late]) == [(str(late), before)]


def test_the_runs_line_says_which_cpu_kernels_the_runs_were_made_with(tmp_path):
    """Runs made pinned and unpinned add in other orders: the line under a table says which kernels its
    runs used, and says so loudly where they differ."""
    from oar.analysis import provenance

    def run_file(name, level, capability="AVX512"):
        path = tmp_path / name / "run.yaml"
        path.parent.mkdir()
        kernels = {"capability": capability, "mkl_branch": "OFF", "OAR_CPU_KERNELS": level}
        path.write_text(yaml.safe_dump({"settings": {}, "provenance": {"git": {"commit": "a" * 40, "dirty": False},
                                                                       "cpu_kernels": kernels}}))
        return path

    unpinned = [run_file(f"u{i}", None) for i in range(3)]
    assert "; CPU kernels unpinned at AVX512 (3)." in provenance.runs_text([], unpinned)
    pinned = run_file("p", "avx2", "AVX2")
    text = provenance.runs_text([], [*unpinned, pinned])
    assert "; **CPU kernels differ between runs**: unpinned at AVX512 (3), pinned to avx2 (1)." in text
    text = provenance.runs_text([], [*unpinned, tmp_path / "missing" / "run.yaml"])
    assert "; CPU kernels unpinned at AVX512 (3) (1 record none)." in text


def test_without_git_the_declaration_says_so(tmp_path, monkeypatch):
    from oar.analysis import provenance

    cfg = tmp_path / "run.yaml"
    cfg.write_text("analysis:\n  primary: {arms: [truth]}\n")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    d = provenance.declaration("analysis.primary", {"arms": ["truth"]}, [cfg])
    assert d["status"] == "no git record" and d["note"] == "git is not available"
    assert "no commit declares it" in provenance.declarations_text([d])


def test_the_upper_bound_table_reads_each_look_and_the_derailment_outcome():
    seeds = list(range(100, 160))
    rng = np.random.default_rng(11)
    frame = _outcomes(list(rng.normal(0.0, 0.03, 40)), seeds[:40])
    frame.loc[(frame["seed"] == 104) & (frame["method"] == "grpo"), "final_accuracy"] = 0.1
    reading = upper_bound.read_upper_bound(frame, _design(), seeds, 0.45)
    _, md = upper_bound.upper_bound_table(reading, _design(), upper_bound.plan(_design()), "DECLARED\n")
    assert "40 of 60 declared seeds run" in md and "not reached" in md
    assert "GRPO | 1/40 | 2%" in md
    assert "3.200 (0.0007)" in md and "34 pairs fit in 4 hours" in md
    assert md.rstrip().endswith("DECLARED")


def test_a_continuing_test_states_its_power_at_the_measured_sd_and_its_conditional_power():
    seeds = list(range(100, 160))
    rng = np.random.default_rng(12)
    noisy = rng.normal(0.0, 0.11, 20)
    noisy = noisy - noisy.mean() + 0.005  # mean +0.5 points, SD about 11 (a derailing testbed)
    reading = upper_bound.read_upper_bound(_outcomes(list(noisy), seeds[:20]), _design(), seeds, 0.45)
    ahead = reading["outlook"]
    assert reading["looks"][0]["status"] == "continue" and ahead["look"] == 1
    bounds = [r["boundary_z"] for r in reading["looks"]]
    fractions = [1 / 3, 2 / 3, 1]
    sd = reading["looks"][0]["sd"]
    assert ahead["power_at_sd"] == pytest.approx(sequential.power(bounds, fractions, 0.015 / sd * math.sqrt(60)))
    z = (0.015 - 0.005) / (sd / math.sqrt(20))
    cond = {c["gain_from"]: c["power"] for c in ahead["conditional"]}
    assert cond["measured"] == pytest.approx(
        sequential.conditional_power(bounds, fractions, 0, z, (0.015 - 0.005) / sd * math.sqrt(60)))
    # at SD 11 the design the pilot's SD 3 planned has little power left, and less given a positive gain
    assert cond["measured"] < cond["assumed"] < ahead["power_at_sd"] < 0.5
    _, md = upper_bound.upper_bound_table(reading, _design(), upper_bound.plan(_design()))
    assert f"power {ahead['power_at_sd']:.2f} at a true gain of 0.0 points (planned: 0.98 at SD 3.08" in md
    assert "No futility rule is declared" in md
    # a test that stopped, or has read no look, has nothing ahead
    clear = list(rng.normal(-0.01, 0.01, 20))
    assert upper_bound.read_upper_bound(_outcomes(clear, seeds[:20]), _design(), seeds, 0.45)["outlook"] is None
    assert upper_bound.outlook([{"look": 1, "pairs": 20, "boundary_z": 3.2, "fraction": 1 / 3,
                                 "status": "not reached"}], _design()) is None


def test_an_undecided_final_look_states_the_gains_the_design_could_have_decided():
    """A null result is read beside its power: at the final look's SD, the design's power at the assumed
    gain and the true gain at which that power is 0.80; a test that stopped, or goes on, has none."""
    seeds = list(range(100, 160))
    rng = np.random.default_rng(13)
    diffs = rng.normal(0.0, 0.03, 60)
    diffs = diffs - diffs.mean() + 0.011  # mean +1.1 points: the margin of +1.5 not excluded at 60 pairs
    reading = upper_bound.read_upper_bound(_outcomes(list(diffs), seeds), _design(), seeds, 0.45)
    assert reading["looks"][-1]["status"] == "final: gain of the margin not excluded"
    final = reading["final_power"]
    bounds = [r["boundary_z"] for r in reading["looks"]]
    fractions = [1 / 3, 2 / 3, 1]
    sd = reading["looks"][-1]["sd"]
    assert final["sd"] == sd and final["pairs"] == 60
    assert final["power_at_assumed"] == pytest.approx(sequential.power(bounds, fractions, 0.015 / sd * math.sqrt(60)))
    gain = final["gain_at_target"]
    assert 0.0 < gain < 0.015
    assert sequential.power(bounds, fractions, (0.015 - gain) / sd * math.sqrt(60)) == pytest.approx(0.80, abs=1e-4)
    _, md = upper_bound.upper_bound_table(reading, _design(), upper_bound.plan(_design()))
    assert (f"The test ended undecided. At the SD measured at the final look ({100 * sd:.2f} points over 60 pairs)"
            in md)
    assert f"{final['power_at_assumed']:.2f} at a true gain of 0.0 points and 0.80 at a true gain of " \
           f"{100 * gain:+.2f} points" in md
    # stopped below the margin, or still going on: nothing to read a null beside
    clear = list(rng.normal(-0.01, 0.01, 60))
    assert upper_bound.read_upper_bound(_outcomes(clear, seeds), _design(), seeds, 0.45)["final_power"] is None
    going = upper_bound.read_upper_bound(_outcomes(list(diffs[:40]), seeds[:40]), _design(), seeds, 0.45)
    assert going["looks"][1]["status"] == "continue" and going["final_power"] is None
    assert "ended undecided" not in upper_bound.upper_bound_table(going, _design())[1]


def test_a_declared_futility_statement_says_at_its_look_whether_it_applies():
    """Non-binding futility at look 1: it applies when the conditional power at the measured gain is below
    the declared level; at another look it is not read; a look at or after the last is refused."""
    seeds = list(range(100, 160))
    rng = np.random.default_rng(12)
    noisy = rng.normal(0.0, 0.11, 20)
    noisy = noisy - noisy.mean() + 0.005
    design = {**_design(), "futility": {"look": 1, "conditional_power_below": 0.10}}
    reading = upper_bound.read_upper_bound(_outcomes(list(noisy), seeds[:20]), design, seeds, 0.45)
    measured = {c["gain_from"]: c["power"] for c in reading["outlook"]["conditional"]}["measured"]
    assert reading["outlook"]["futile"] == (measured < 0.10)
    _, md = upper_bound.upper_bound_table(reading, design)
    assert ("Futility (declared, non-binding)" in md) == (measured < 0.10)
    strict = {**design, "futility": {"look": 1, "conditional_power_below": 0.99}}
    _, md = upper_bound.upper_bound_table(upper_bound.read_upper_bound(_outcomes(list(noisy), seeds[:20]), strict,
                                                                       seeds, 0.45), strict)
    assert "**Futility (declared, non-binding): the conditional power at the gain measured so far is below 0.99" in md
    lenient = {**design, "futility": {"look": 1, "conditional_power_below": 1e-9}}
    _, md = upper_bound.upper_bound_table(upper_bound.read_upper_bound(_outcomes(list(noisy), seeds[:20]), lenient,
                                                                       seeds, 0.45), lenient)
    assert "does not apply: continuing is the declared design" in md
    main = {"models": ["chain_d8"], "methods": ["grpo", "truth_graded"], "seeds": seeds}
    late = {**_design(), "futility": {"look": 3, "conditional_power_below": 0.1}}
    assert ("analysis.upper_bound.futility.look", "3: futility is read at a look before the last (1-2)") in \
        upper_bound.check_design(late, main)
