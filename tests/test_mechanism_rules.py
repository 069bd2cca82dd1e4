"""Declared contrasts of the mechanism runs: Holm over the family with equivalence only by TOST, the rescue
with its placebo and overturn rule, the mediator and step-credit tables, the dose-response, and the table
job that writes them."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oar.analysis import statistics
from test_decision_rules import _config, _outcomes, _registry, _upper_bound_config

pytestmark = pytest.mark.quick

# ------------------------------------------------------------------------------ declared contrasts (mechanism)


def _arms(effects, seeds, sd=0.01, seed=5):
    rng = np.random.default_rng(seed)
    rows = []
    for s in seeds:
        base = 0.5 + rng.normal(0, 0.03)
        for method, effect in effects.items():
            rows.append({"model": "chain_d8", "method": method, "seed": s,
                         "final_accuracy": base + effect + rng.normal(0, sd)})
    return pd.DataFrame(rows)


def test_declared_contrasts_holm_over_the_family_and_equivalence_only_by_tost():
    from oar.analysis import mechanism

    design = _config("studies/mechanism.yaml")["analysis"]["mechanism"]
    seeds = list(range(200, 210))
    # the mechanism as hypothesised: last step only -10 points, earlier only 0, both 0; OAR-G -8, rescued 0
    mechanism_holds = {"grpo": 0.0, "truth_final": -0.10, "truth_early": 0.0, "truth": 0.0, "oar_g": -0.08,
                       "oar_g_rescue": 0.0}
    outcomes = _arms(mechanism_holds, seeds)
    frame = mechanism.read_contrasts(outcomes, design, seeds)
    assert list(frame["p_holm"]) == pytest.approx(statistics.holm(list(frame["p"])))
    by = frame.set_index("name")
    assert by.loc["last step only costs", "decided"] and by.loc["earlier credit recovers", "decided"]
    assert by.loc["earlier steps only is harmless", "decided"]  # TOST within 3 points at SD 1.4 points
    assert by.loc["interaction", "mean"] == pytest.approx(0.10, abs=0.02)
    assert by.loc["rescue recovers", "decided"] and by.loc["rescued scorer is harmless", "decided"]
    assert len(frame) == 6
    _, md = mechanism.mechanism_table(frame, design)
    assert "decided: equivalent within ±3.0" in md
    assert "decided: below 0.0" in md and "decided: above 0.0" in md  # a margin left out is 0, not a frame's nan
    # noisy seeds: the same means, but no equivalence can be shown, and the table claims none
    noisy = mechanism.read_contrasts(_arms(mechanism_holds, seeds, sd=0.06), design, seeds)
    _, md = mechanism.mechanism_table(noisy, design)
    assert not noisy.set_index("name").loc["earlier steps only is harmless", "decided"]
    assert "not shown equivalent" in md and "decided: equivalent" not in md
    # a missing run stops the reading, naming it
    with pytest.raises(ValueError, match="chain_d8/truth_early seed 204"):
        mechanism.read_contrasts(outcomes[~((outcomes["method"] == "truth_early") & (outcomes["seed"] == 204))],
                                 design, seeds)


def _rescue_design():
    return {"model": "chain_d8", "alpha": 0.05,
            "contrasts": [{"name": "rescue recovers", "plus": ["oar_g_rescue"], "minus": ["oar_g"], "test": "greater"},
                          {"name": "rescue beats its placebo", "plus": ["oar_g_rescue"], "minus": ["oar_g_placebo"],
                           "test": "greater"}],
            "placebo": {"method": "oar_g_placebo", "rescue": "oar_g_rescue"},
            "overturn": {"contrast": "rescue recovers", "upper_below": 0.02,
                         "placebo_contrast": "rescue beats its placebo"},
            "derailment": {"below_base": 0.0}}


def test_the_rescue_table_reads_wilcoxon_derailment_and_the_declared_overturn_rule():
    from oar.analysis import mechanism

    design, seeds = _rescue_design(), list(range(400, 430))
    arms = ["oar_g", "oar_g_rescue", "oar_g_placebo"]
    # the mechanism holds: the rescue recovers 6 points, the placebo nothing
    holds = mechanism.read_contrasts(_arms({"oar_g": 0.0, "oar_g_rescue": 0.06, "oar_g_placebo": 0.0}, seeds), design,
                                     seeds)
    assert list(holds["wilcoxon_p_holm"]) == pytest.approx(statistics.holm(list(holds["wilcoxon_p"])))
    assert holds["decided"].all() and holds["wilcoxon_decided"].all()
    assert mechanism.overturn_verdict(holds, design["overturn"]) == "stands"
    outcomes = _arms({"oar_g": 0.0, "oar_g_rescue": 0.06, "oar_g_placebo": 0.0}, seeds)
    derailed = mechanism.derailment(outcomes, design, seeds, base_accuracy=0.5)
    expected = {arm: int(((outcomes["method"] == arm) & (outcomes["final_accuracy"] < 0.5)).sum()) for arm in arms}
    assert dict(zip(derailed["method"], derailed["derailed"])) == expected and set(derailed["runs"]) == {30}
    _, md = mechanism.mechanism_table(holds, design, derailed=derailed)
    assert "| decided: above 0.0 |" in md and "(agrees)" in md and "**Verdict: stands** (both contrasts decided)." in md
    assert "oar_g_rescue " + f"{expected['oar_g_rescue']}/30" in md
    # the placebo recovers as much as the rescue: overturned, whatever the rescue's own test says
    same = mechanism.read_contrasts(_arms({"oar_g": 0.0, "oar_g_rescue": 0.06, "oar_g_placebo": 0.065}, seeds),
                                    design, seeds)
    assert mechanism.overturn_verdict(same, design["overturn"]) == "overturned"
    # a rescue whose interval excludes gains of 2 points: overturned
    nothing = mechanism.read_contrasts(_arms({"oar_g": 0.0, "oar_g_rescue": -0.01, "oar_g_placebo": -0.03}, seeds),
                                       design, seeds)
    assert nothing.set_index("name").loc["rescue recovers", "ci_high"] < 0.02
    assert mechanism.overturn_verdict(nothing, design["overturn"]) == "overturned"


def test_a_placebo_that_would_hold_the_last_steps_tokens_is_refused_naming_the_key():
    from oar.analysis import mechanism

    methods = ["oar_g", "oar_g_rescue", "oar_g_placebo"]
    assert mechanism.check_design(_rescue_design(), methods, ["chain_d8"]) == []
    for method in ("oar_g_rescue", "truth_final"):
        design = {**_rescue_design(), "placebo": {"method": method, "rescue": "oar_g_rescue"}}
        problems = mechanism.check_design(design, methods, ["chain_d8"])
        assert problems[0][0] == "analysis.mechanism.placebo.method" and "never those tokens" in problems[0][1]
    design = {**_rescue_design(), "placebo": {"method": "oar_g_placebo", "rescue": "truth_final"}}
    assert mechanism.check_design(design, methods, ["chain_d8"])[0][0] == "analysis.mechanism.placebo.rescue"
    design = {**_rescue_design(), "overturn": {**_rescue_design()["overturn"], "contrast": "nope"}}
    assert mechanism.check_design(design, methods, ["chain_d8"])[0][0] == "analysis.mechanism.overturn.contrast"


def test_the_mediator_table_reads_each_arms_logged_step_credit_from_its_curves():
    """Step-credit shares logged per training step reach the per-seed outcomes as each run's mean over
    its steps, and the mechanism table reports them per arm over the declared seeds; runs that did not
    log them leave both without them."""
    from oar.analysis import mechanism
    from oar.analysis.outcomes import per_seed_outcomes

    design = _config("studies/mechanism.yaml")["analysis"]["mechanism"]
    seeds = [200, 201, 202]
    final_share = {"grpo": 0.10, "truth_final": 0.30, "truth_early": 0.05, "truth": 0.20, "oar_g": 0.25,
                   "oar_g_rescue": 0.08}
    curves, acc = [], []
    for method, share in final_share.items():
        for seed in seeds:
            run = f"chain_d8/{method}-seed{seed}"
            acc.append({"run": run, "benchmark": "chain_test", "pass@1": 0.5})
            for step in (1, 2):
                curves.append({"run": run, "model": "chain_d8", "method": method, "seed": seed, "step": step,
                               "reward": 0.5, "final_step_weight_share": share + (0.02 if step == 2 else 0.0),
                               "early_steps_weight_share": 0.2, "final_step_token_share": 0.1,
                               "early_steps_token_share": 0.2})
    outcomes = per_seed_outcomes(pd.DataFrame(acc), pd.DataFrame(curves), "chain_test", threshold=0.9)
    assert (outcomes.set_index("run").loc["chain_d8/truth_final-seed201", "final_step_weight_share"]
            == pytest.approx(0.31))
    weights = mechanism.mediator(outcomes, design, seeds).set_index("method")
    assert weights.loc["truth_final", "final_step_weight_share"] == pytest.approx(0.31)
    assert weights.loc["grpo", "n_seeds"] == 3
    frame = mechanism.read_contrasts(outcomes, design, seeds)
    _, md = mechanism.mechanism_table(frame, design, weights=mechanism.mediator(outcomes, design, seeds))
    assert "the mediator" in md and "| truth_final | 3 | 31.0 [31.0, 31.0] | 10.0 |" in md

    plain = per_seed_outcomes(pd.DataFrame(acc), pd.DataFrame(curves).drop(columns=[
        "final_step_weight_share", "early_steps_weight_share", "final_step_token_share", "early_steps_token_share"]),
        "chain_test", threshold=0.9)
    assert "final_step_weight_share" not in plain and mechanism.mediator(plain, design, seeds).empty


def test_the_step_credit_table_reads_each_arms_shares_over_its_runs_and_names_silent_runs():
    from oar.analysis.step_credit import step_credit_table

    rows = []
    for seed, share in ((400, 0.30), (401, 0.40), (402, 0.50)):
        for step, bump in ((1, 0.0), (2, 0.02)):
            rows.append({"run": f"chain_d8/oar_p-seed{seed}", "model": "chain_d8", "method": "oar_p", "seed": seed,
                         "step": step, "final_step_weight_share": share + bump, "early_steps_weight_share": 0.1,
                         "final_step_token_share": 0.023, "early_steps_token_share": 0.091})
    frame, md = step_credit_table(pd.DataFrame(rows))
    r = frame.set_index("method").loc["oar_p"]
    assert r["n_seeds"] == 3 and r["final_step_weight_share"] == pytest.approx(0.41)
    half = statistics.t_half_width(statistics.seed_sd([0.31, 0.41, 0.51]), 3)
    assert r["final_step_weight_share_high"] == pytest.approx(0.41 + half)
    assert "| chain_d8 | oar_p | 3 | 41.0 [" in md and "| 2.3 |" in md
    silent = pd.DataFrame(rows).assign(final_step_weight_share=lambda f: f["final_step_weight_share"].where(
        f["seed"] != 401))
    with pytest.raises(ValueError, match="runs without a logged step credit: \\['chain_d8/oar_p-seed401'\\]"):
        step_credit_table(silent)
    with pytest.raises(ValueError, match="did not log oar.log_step_credit"):
        step_credit_table(pd.DataFrame(rows).drop(columns=["early_steps_weight_share"]))


def test_the_ratio_regression_recovers_a_known_slope_pooled_and_within_arms():
    from oar.analysis.step_credit import per_token_ratio, ratio_regression, ratio_regression_text

    rng = np.random.default_rng(3)
    rows = []
    for arm, offset in (("a", 0.0), ("b", 0.05)):
        for seed in range(20):
            ratio = 2 ** rng.uniform(-1, 3)  # the per-token ratio this run logged
            rows.append({"method": arm, "seed": seed, "final_step_token_share": 0.02, "early_steps_token_share": 0.10,
                         "final_step_weight_share": 0.02 * ratio, "early_steps_weight_share": 0.10,
                         "final_accuracy": 0.5 + offset - 0.04 * math.log2(ratio) + rng.normal(0, 0.002)})
    frame = pd.DataFrame(rows)
    assert per_token_ratio(frame.iloc[:1]).iloc[0] == pytest.approx(
        2 ** math.log2(frame["final_step_weight_share"][0] / 0.02))
    pooled, within = ratio_regression(frame, ["a", "b"])
    assert within["slope"] == pytest.approx(-0.04, abs=0.002) and within["ci_low"] < -0.04 < within["ci_high"]
    assert within["runs"] == 40 and within["p"] < 1e-6 and within["r2"] > 0.99
    assert pooled["slope"] == pytest.approx(-0.04, abs=0.01)  # the arms' offset is not tied to the ratio here
    assert "within arms: -4.0 points per doubling" in ratio_regression_text([pooled, within])


def _mechanism_config(contrasts=None, **over):
    from oar.experiment.runs import deep_merge

    cfg = deep_merge(_config("studies/decisive.yaml"), _config("studies/mechanism.yaml"))
    if contrasts is not None:
        cfg["analysis"]["mechanism"]["contrasts"] = contrasts
    return deep_merge(cfg, {"analysis": {"mechanism": over}} if over else {})


def test_the_mechanism_config_plans_the_2x2_and_bad_contrasts_name_their_key():
    from oar.experiment.config_error import ConfigError

    reg = _registry(_mechanism_config())
    assert {reg.runs[r]["method"] for r in reg.groups["main"]} == {"grpo", "truth_final", "truth_early", "truth",
                                                                   "oar_g", "oar_g_rescue"}
    assert "mechanism" in reg.tables and len(reg.groups["main"]) == 60
    # every arm logs the mediator; the plain and rescued OAR-G are different runs
    assert all(reg.runs[r]["oar"]["log_step_credit"] for r in reg.groups["main"])
    assert len({r for r in reg.groups["main"] if "oar_g" in r}) == 20
    bad = {
        "analysis.mechanism.contrasts[0].margin": [{"name": "a", "plus": ["truth"], "minus": ["grpo"],
                                                    "test": "equivalent"}],
        "analysis.mechanism.contrasts[0].plus": [{"name": "a", "plus": ["oar_p"], "minus": ["grpo"], "test": "less"}],
        "analysis.mechanism.contrasts[0].minus": [{"name": "a", "plus": ["truth", "grpo"], "minus": ["grpo"],
                                                   "test": "less"}],
    }
    for key, contrasts in bad.items():
        with pytest.raises(ConfigError) as e:
            _registry(_mechanism_config(contrasts))
        assert e.value.key == key
    with pytest.raises(ConfigError) as e:
        _registry(_mechanism_config(alpha=0.5))
    assert e.value.key == "analysis.mechanism.alpha"


# ------------------------------------------------------------------------------ the workflow's table job


def _tables_job():
    """The workflow's table script, loaded as a module (its build() is the table rule's work)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("tables_job", root / "workflow_scripts" / "tables.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def test_the_table_job_reads_the_upper_bound_test_and_says_where_its_rules_were_declared(tmp_path):
    from pathlib import Path
    from types import SimpleNamespace

    root = Path(__file__).resolve().parents[1]
    job = _tables_job()
    reg = _registry(_upper_bound_config())
    seeds = reg.upper_bound["seeds"]
    outcomes = _outcomes(list(np.random.default_rng(2).normal(-0.01, 0.03, 20)), seeds[:20])
    outcomes.to_csv(tmp_path / "outcomes.csv", index=False)
    pd.DataFrame([{"model": "chain_d8", "method": "base", "benchmark": "chain5_test", "pass@1": 0.42,
                   "mean_response_tokens": 122}]).to_csv(tmp_path / "accuracy.csv", index=False)
    pd.DataFrame([{"run": r, "step": 1, "reward": 0.3} for r in outcomes["run"]]).to_csv(tmp_path / "curves.csv",
                                                                                          index=False)
    design = {k: v for k, v in _upper_bound_config()["analysis"]["upper_bound"].items()}
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(name="upper_bound"),
        input=SimpleNamespace(outcomes=tmp_path / "outcomes.csv", accuracy=tmp_path / "accuracy.csv",
                              curves=tmp_path / "curves.csv"),
        params=SimpleNamespace(designs={"upper_bound": reg.upper_bound}, paired_benchmark="chain5_test",
                               configfiles=[str(root / "config" / "studies" / "decisive.yaml"),
                                            str(root / "config" / "studies" / "upper-bound.yaml")],
                               decision_rules={"analysis.primary": None, "analysis.upper_bound": design},
                               decided_runs=[tmp_path / "runs" / r / "run.yaml" for r in outcomes["run"]]))
    frame, md = job.build(smk)
    assert "20 of 60 declared seeds run" in md and "(42.0%)" in md
    assert (frame["kind"] == "look").sum() == 3
    note = job.declared(smk)
    # the design is declared by a commit of config/studies/upper-bound.yaml, or the note says why not
    assert "`analysis.upper_bound` in `upper-bound.yaml`" in note
    assert "declared in commit" in note or "no commit declares it" in note
    # the runs' own records: none here, and the note says so rather than passing them
    assert "Runs read: 40; none records the commit it was made at, so no rule can be checked" in note


def test_training_curves_carry_the_step_credit_only_where_a_run_logged_it(tmp_path):
    import json

    from oar.analysis.run_outputs import training_curves

    meta = {"model": "chain_d8", "method": "grpo", "seed": 0}
    plain, logged = tmp_path / "plain.jsonl", tmp_path / "logged.jsonl"
    plain.write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    logged.write_text(json.dumps({"step": 1, "reward": 0.5, "final_step_weight_share": 0.3}) + "\n")
    assert "final_step_weight_share" not in training_curves({"a": meta}, {"a": plain})
    both = training_curves({"a": meta, "b": meta}, {"a": plain, "b": logged}).set_index("run")
    assert both.loc["b", "final_step_weight_share"] == 0.3 and np.isnan(both.loc["a", "final_step_weight_share"])


# ------------------------------------------------------------------------------ the dose-response (mechanism)


def _dose_design(ratios=(0.5, 1.0, 2.0, 4.0), seeds=(200, 201, 202), alternative="less"):
    runs = [{"ratio": r, "seed": s, "run": f"chain_d8/truth_dose-ratio{r}-seed{s}"} for r in ratios for s in seeds]
    return {"model": "chain_d8", "method": "truth_dose", "alternative": alternative, "alpha": 0.05,
            "ratios": list(ratios), "seeds": list(seeds), "runs": runs, "hypothesis": "more on the last step costs"}


def _dose_accuracy(design, values):
    """values: seed -> accuracies in the order of the design's ratios."""
    return pd.DataFrame([{"run": r["run"], "benchmark": "chain5_test",
                          "pass@1": values[r["seed"]][design["ratios"].index(r["ratio"])]} for r in design["runs"]])


def test_the_dose_slopes_t_test_and_page_trend_match_a_hand_computation_and_scipy():
    from oar.analysis import dose_response

    design = _dose_design()
    values = {200: [0.52, 0.50, 0.48, 0.46],   # exactly -0.02 a doubling
              201: [0.50, 0.51, 0.45, 0.44],
              202: [0.47, 0.48, 0.47, 0.41]}
    reading = dose_response.read_dose_response(_dose_accuracy(design, values), design, "chain5_test")
    # by hand: x = log2 r = -1, 0, 1, 2, centred -1.5, -0.5, 0.5, 1.5 (sum of squares 5)
    by_hand = {s: sum(c * y for c, y in zip((-1.5, -0.5, 0.5, 1.5), v)) / 5.0 for s, v in values.items()}
    assert by_hand[200] == pytest.approx(-0.02)
    slopes = reading["slopes"]
    for s, v in values.items():
        assert slopes[s] == pytest.approx(by_hand[s], rel=1e-12)
        assert slopes[s] == pytest.approx(stats.linregress([-1, 0, 1, 2], v).slope, rel=1e-12)
    test = reading["slope"]
    ref = stats.ttest_1samp(list(by_hand.values()), 0.0, alternative="less")
    assert (test["t"], test["p"]) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-10)
    ci = stats.ttest_1samp(list(by_hand.values()), 0.0).confidence_interval(0.95)
    assert (test["ci_low"], test["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert test["mean"] == pytest.approx(np.mean(list(by_hand.values()))) and test["n"] == 3
    # Page's L for a falling order: ranks within each seed (ties averaged), weighted 4, 3, 2, 1 from r = 0.5
    ranks = [[4, 3, 2, 1], [3, 4, 2, 1], [2.5, 4, 2.5, 1]]
    rank_sums = np.sum(ranks, axis=0)
    assert reading["page"]["L"] == pytest.approx(float(np.dot([4, 3, 2, 1], rank_sums)))
    page = stats.page_trend_test(np.array([values[s] for s in (200, 201, 202)])[:, ::-1])
    assert reading["page"]["p"] == pytest.approx(page.pvalue) and reading["page"]["method"] == page.method
    # the levels: mean accuracy over seeds at each ratio, with its t-interval
    level = reading["levels"].set_index("ratio").loc[4.0]
    assert level["mean"] == pytest.approx(np.mean([0.46, 0.44, 0.41])) and level["n_seeds"] == 3
    # a rising dose read against its own declared direction
    rising = dose_response.read_dose_response(
        _dose_accuracy(design, {s: v[::-1] for s, v in values.items()}), {**design, "alternative": "greater"},
        "chain5_test")
    assert rising["slope"]["p"] == pytest.approx(test["p"]) and rising["page"]["p"] == pytest.approx(page.pvalue)
    two = dose_response.read_dose_response(_dose_accuracy(design, values), {**design, "alternative": "two-sided"},
                                           "chain5_test")
    assert two["slope"]["p"] == pytest.approx(stats.ttest_1samp(list(by_hand.values()), 0.0).pvalue)


def test_the_dose_reading_stops_naming_a_missing_run_and_its_section_says_what_was_decided():
    from oar.analysis import dose_response

    design = _dose_design(ratios=(0.5, 1.0, 2.0, 4.0, 8.0), seeds=tuple(range(200, 210)))
    rng = np.random.default_rng(3)
    x = np.log2(design["ratios"])
    values = {s: list(0.52 - 0.02 * x + rng.normal(0, 0.01, len(x))) for s in design["seeds"]}
    accuracy = _dose_accuracy(design, values)
    with pytest.raises(ValueError, match=r"chain_d8/truth_dose-ratio4.0-seed203 \(ratio 4, seed 203\)"):
        dose_response.read_dose_response(accuracy[accuracy["run"] != "chain_d8/truth_dose-ratio4.0-seed203"], design,
                                         "chain5_test")
    curves = pd.DataFrame([{"run": r["run"], "step": step, "final_step_weight_share": 0.05 * r["ratio"] + 0.01 * step,
                            "final_step_token_share": 0.04} for r in design["runs"] for step in (1, 2)])
    reading = dose_response.read_dose_response(accuracy, design, "chain5_test", curves)
    assert reading["levels"].set_index("ratio").loc[2.0, "final_step_weight_share"] == pytest.approx(0.115)
    reference = dose_response.reference_arm(
        pd.DataFrame([{"model": "chain_d8", "method": "grpo", "seed": s, "final_accuracy": 0.55}
                      for s in design["seeds"]]), design, "grpo")
    frame, md = dose_response.dose_response_section(reading, design, reference)
    assert "decided: accuracy falls as the last step's weight grows" in md
    assert "| sensitivity: agrees (p < 0.05) |" in md  # Page's L decides the same way
    assert "| 2 | 1 | 10 | 50.2 [49.8, 50.6] | 11.5 [11.5, 11.5] | 4.0 |" in md  # with the manipulation check
    assert "| GRPO (same seeds) |  | 10 | 55.0 [55.0, 55.0] |" in md and "shown for scale, not tested" in md
    assert "Hypothesis (declared): more on the last step costs" in md
    assert list(frame["kind"]) == ["level"] * 5 + ["slope", "page"]
    assert frame.set_index("kind").loc["slope", "mean"] == pytest.approx(-0.02, abs=0.005)
    # a flat dose: nothing decided, no weight logged, no reference
    flat = {s: list(0.5 + rng.normal(0, 0.01, len(x))) for s in design["seeds"]}
    _, md = dose_response.dose_response_section(
        dose_response.read_dose_response(_dose_accuracy(design, flat), design, "chain5_test"), design)
    assert "| slope of accuracy on log2 r" in md and "not decided" in md and "weight, %" not in md
    assert "sensitivity: agrees (p >= 0.05)" in md or "sensitivity: disagrees (p < 0.05)" in md


def test_the_mechanism_config_plans_the_dose_runs_and_bad_designs_name_their_key():
    from oar.experiment.config_error import ConfigError
    from oar.experiment.runs import deep_merge

    reg = _registry(_mechanism_config())
    design = reg.dose_response
    assert design["ratios"] == [0.5, 1.0, 2.0, 4.0, 8.0] and design["seeds"] == list(range(200, 210))
    assert design["alternative"] == "less" and len(design["runs"]) == 50
    dose = reg.groups["dose"]
    assert len(dose) == 50 and len(set(dose) - set(reg.groups["main"])) == 40  # ratio 1: the truth arm's runs
    assert {r["run"] for r in design["runs"] if r["ratio"] == 1.0} == {
        r for r in reg.groups["main"] if reg.runs[r]["method"] == "truth"}
    assert {reg.runs[r]["oar"].get("final_step_ratio") for r in dose} == {0.5, None, 2.0, 4.0, 8.0}
    assert all(reg.runs[r]["oar"]["log_step_credit"] for r in dose)  # the manipulation check is logged
    assert "mechanism" in reg.tables

    def error(over):
        with pytest.raises(ConfigError) as e:
            _registry(deep_merge(_mechanism_config(), over))
        return e.value.key

    assert error({"analysis": {"dose_response": {"model": "chain_d0"}}}) == "analysis.dose_response.model"
    assert error({"analysis": {"dose_response": {"alpha": 0.5}}}) == "analysis.dose_response.alpha"
    assert error({"runs": {"dose": {"ratios": [1, 2]}}}) == "runs.dose.ratios"  # no trend on two levels
    assert error({"runs": {"dose": {"seeds": [200]}}}) == "runs.dose.seeds"
    assert error({"runs": {"dose": {"benchmarks": ["chain_test"]}}, "data": {"chain_test": {}},
                  "evaluation": {"benchmarks": ["chain5_test", "chain_test"]}}) == "runs.dose.benchmarks"
    assert error({"analysis": {"mechanism": None}}) == "analysis.dose_response"
    without_runs = _mechanism_config()
    del without_runs["runs"]["dose"]
    with pytest.raises(ConfigError) as e:
        _registry(without_runs)
    assert e.value.key == "runs.dose"


def test_the_table_job_writes_the_dose_response_into_the_mechanism_table(tmp_path):
    from types import SimpleNamespace

    job = _tables_job()
    reg = _registry(_mechanism_config())
    seeds = reg.mechanism["seeds"]
    effects = {"grpo": 0.0, "truth_final": -0.10, "truth_early": 0.0, "truth": 0.0, "oar_g": -0.08,
               "oar_g_rescue": 0.0}
    _arms(effects, seeds).to_csv(tmp_path / "outcomes.csv", index=False)
    rng = np.random.default_rng(4)
    pd.DataFrame([{"run": r["run"], "benchmark": "chain5_test",
                   "pass@1": 0.5 - 0.02 * math.log2(r["ratio"]) + rng.normal(0, 0.01)}
                  for r in reg.dose_response["runs"]]).to_csv(tmp_path / "dose_accuracy.csv", index=False)
    pd.DataFrame([{"run": r["run"], "step": 1, "final_step_weight_share": 0.05 * r["ratio"],
                   "final_step_token_share": 0.04} for r in reg.dose_response["runs"]]).to_csv(
        tmp_path / "dose_curves.csv", index=False)
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(name="mechanism"),
        input=SimpleNamespace(outcomes=tmp_path / "outcomes.csv", dose_accuracy=tmp_path / "dose_accuracy.csv",
                              dose_curves=tmp_path / "dose_curves.csv"),
        # the step-error section reads evaluation samples this tree lacks (tests/test_step_errors.py has it)
        params=SimpleNamespace(designs={"mechanism": {**reg.mechanism, "step_errors": None},
                                         "dose_response": reg.dose_response},
                               paired_benchmark="chain5_test", baseline="grpo"))
    frame, md = job.build(smk)
    assert md.index("## Declared contrasts") < md.index("## Dose-response: the last step's weight on chain_d8")
    assert "decided: accuracy falls as the last step's weight grows" in md and "| GRPO (same seeds) |" in md
    assert list(frame["kind"].value_counts().sort_index().items()) == [("contrast", 6), ("level", 5), ("page", 1),
                                                                      ("slope", 1)]
