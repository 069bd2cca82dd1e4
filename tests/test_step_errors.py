"""The step-error pattern of the mechanism test: counting each step's wrong `=` and sloppy `~` in a run's
evaluation responses, the declared test family over paired seeds (checked against scipy), its config
checks, and its section of the mechanism report written from a results tree."""

import json
import math
import random

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from oar.analysis import step_errors
from oar.data import chains

SEEDS = list(range(200, 210))
ARMS = ("grpo", "truth_final", "truth_early", "truth", "oar_g", "oar_g_rescue")


def _response(p: chains.ChainProblem, wrong=(), sloppy=()) -> str:
    """A response to ``p`` in the task's grammar with the given steps (1-based) written wrong after `=` or
    sloppy with `~`; later steps go on from the written value."""
    parts, value = [], p.start
    for k, (op, operand) in enumerate(p.ops, 1):
        result = chains.apply(value, op, operand)
        relation = "~" if k in sloppy else "="
        if k in wrong or k in sloppy:
            result += 1
        parts.append(f"{value} {op} {operand} {relation} {result}.")
        value = result
    return " ".join(parts + [chains.FINAL.format(answer=value)])


# ------------------------------------------------------------------------------------ counting


def test_a_run_counts_each_steps_wrong_and_sloppy_share_over_the_responses_that_reach_it():
    p = chains.problem("test", 0, 5)
    responses = [
        _response(p),
        _response(p, wrong=(1, 5)),
        _response(p, wrong=(5,), sloppy=(2,)),
        # the conclusion ends the reasoning: an equation written after it is not a step
        _response(p, sloppy=(3,)) + " 2 + 2 = 5.",
        # three steps only: steps 4 and 5 are shared over the four responses that wrote them
        ". ".join(_response(p, wrong=(2,)).split(". ")[:3]) + ".",
    ]
    assert step_errors.response_step_errors(responses[2], 5) == [None, "sloppy", None, None, "wrong"]
    assert step_errors.response_step_errors(responses[4], 5) == [None, "wrong", None]
    row = step_errors.run_shares(responses, 5)
    assert row["responses"] == 5
    wrong = [1 / 5, 1 / 5, 0, 0, 2 / 4]
    sloppy = [0, 1 / 5, 1 / 5, 0, 0]
    assert [row[f"wrong_{k}"] for k in range(1, 6)] == pytest.approx(wrong)
    assert [row[f"sloppy_{k}"] for k in range(1, 6)] == pytest.approx(sloppy)
    assert row["wrong_earlier"] == pytest.approx(np.mean(wrong[:4]))
    assert row["wrong_last"] == pytest.approx(0.5)
    assert row["wrong_all"] == pytest.approx(np.mean(wrong))
    assert row["wrong_last_minus_earlier"] == pytest.approx(0.5 - np.mean(wrong[:4]))
    assert row["sloppy_all"] == pytest.approx(np.mean(sloppy))
    # equations past the task's steps are not counted; a step no response wrote is undefined
    assert step_errors.run_shares([_response(p, wrong=(5,))], 4)["wrong_last"] == 0
    short = step_errors.run_shares([_response(chains.problem("test", 0, 2), wrong=(1,))], 5)
    assert short["wrong_1"] == 1 and math.isnan(short["wrong_5"]) and math.isnan(short["wrong_all"])


def test_the_chain_generators_solutions_count_their_sloppy_steps_and_no_wrong_ones():
    rng = random.Random(3)
    solved = [chains.solution(chains.problem("test", i, 5), rng, error_rate=0.3, distractors=8) for i in range(200)]
    texts = [text for text, _ in solved]
    row = step_errors.run_shares(texts, 5)
    assert all(row[f"wrong_{k}"] == 0 for k in range(1, 6))  # the generator's only errors are sloppy
    assert sum(row[f"sloppy_{k}"] * 200 for k in range(1, 6)) == pytest.approx(sum(t.count(" ~ ") for t in texts))
    assert row["sloppy_all"] == pytest.approx(0.3, abs=0.05)


def _write_eval(root, run, responses, bench="chain5_test"):
    folder = root / "eval" / run / bench
    folder.mkdir(parents=True)
    (folder / "samples.jsonl").write_text("".join(json.dumps({"problem_id": i, "response": r}) + "\n"
                                                  for i, r in enumerate(responses)))
    (folder / "summary.json").write_text(json.dumps({"pass@1": 0.5, "num_problems": len(responses),
                                                     "samples_per_problem": 1}))
    return folder / "summary.json"


def test_runs_are_read_from_the_samples_beside_their_summaries_and_the_bench_prints_them(tmp_path, capsys,
                                                                                        monkeypatch):
    import importlib.util
    import sys
    from pathlib import Path

    p = chains.problem("test", 1, 5)
    a = _write_eval(tmp_path, "chain_d8/grpo-seed0", [_response(p), _response(p, wrong=(2,))])
    b = _write_eval(tmp_path, "chain_d8/oar_g-tau0.4-beta2.0-as_mean-seed0", [_response(p, sloppy=(5,))])
    samples = step_errors.samples_by_run([a, b])
    assert samples == {"chain_d8/grpo-seed0": a.with_name("samples.jsonl"),
                       "chain_d8/oar_g-tau0.4-beta2.0-as_mean-seed0": b.with_name("samples.jsonl")}
    meta = {"chain_d8/grpo-seed0": {"model": "chain_d8", "method": "grpo", "seed": 0},
            "chain_d8/oar_g-tau0.4-beta2.0-as_mean-seed0": {"model": "chain_d8", "method": "oar_g", "seed": 0}}
    frame = step_errors.step_error_frame(samples, meta, 5).set_index("method")
    assert frame.loc["grpo", "wrong_2"] == 0.5 and frame.loc["oar_g", "sloppy_last"] == 1
    with pytest.raises(ValueError, match="no metadata .* chain_d8/grpo-seed0"):
        step_errors.step_error_frame(samples, {}, 5)
    a.with_name("samples.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="chain_d8/grpo-seed0"):
        step_errors.samples_by_run([a])

    # the documented command (docs/results.md) still prints the per-step table
    script = Path(__file__).resolve().parents[1] / "perf" / "step_errors.py"
    spec = importlib.util.spec_from_file_location("perf_step_errors", script)
    command = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(command)
    monkeypatch.setattr(sys, "argv", ["step_errors.py", "--results", str(tmp_path), "--models", "chain_d8"])
    command.main()
    out = capsys.readouterr().out
    assert "| oar_g | 1 | 0.0 (0.0) | 0.0 (0.0) | 0.0 (0.0) | 0.0 (0.0) | 0.0 (100.0) | 0.0 | 20.0 |" in out


# ------------------------------------------------------------------------------------ the test family


def _config(name):
    from pathlib import Path

    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / name).read_text())


def _design():
    return {**_config("studies/mechanism.yaml")["analysis"]["mechanism"], "seeds": SEEDS}


def _frame(effects, sd=0.01, seed=7, steps=5):
    """Per-run step-error shares: GRPO's per seed, plus each arm's (earlier, last) excess and noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in SEEDS:
        base = 0.12 + rng.normal(0, 0.02, steps)
        for method in ARMS:
            earlier, last = effects.get(method, (0.0, 0.0))
            wrong = base + np.r_[[earlier] * (steps - 1), [last]] + rng.normal(0, sd, steps)
            row = {"run": f"chain_d8/{method}-seed{s}", "model": "chain_d8", "method": method, "seed": s,
                   **{f"wrong_{k + 1}": w for k, w in enumerate(wrong)},
                   **{f"sloppy_{k + 1}": 0.03 for k in range(steps)}}
            for kind in ("wrong", "sloppy"):
                shares = [row[f"{kind}_{k}"] for k in range(1, steps + 1)]
                row.update({f"{kind}_earlier": np.mean(shares[:-1]), f"{kind}_last": shares[-1],
                            f"{kind}_all": np.mean(shares)})
                row[f"{kind}_last_minus_earlier"] = row[f"{kind}_last"] - row[f"{kind}_earlier"]
            rows.append(row)
    return pd.DataFrame(rows)


# the reading as hypothesised: the losing arms err more at every step, most at the last; the others as GRPO
HOLDS = {"truth_final": (0.06, 0.08), "oar_g": (0.05, 0.05)}


def _holm(p):
    order = np.argsort(p)
    adjusted, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def test_the_declared_family_matches_scipy_and_holm():
    design = _design()
    frame = _frame(HOLDS)
    tests = step_errors.read_tests(frame, design, SEEDS).set_index("name")
    declared = design["step_errors"]["tests"]
    assert list(tests.index) == [t["name"] for t in declared] and (tests["family_size"] == 7).all()
    by = frame.set_index(["method", "seed"])
    expected_p, expected_w = [], []
    for t in declared:
        column = f"wrong_{t['outcome']}"
        d = np.array([by.loc[(t["arm"], s), column] - by.loc[("grpo", s), column] for s in SEEDS])
        r = tests.loc[t["name"]]
        assert r["mean"] == pytest.approx(d.mean())
        ci = stats.ttest_1samp(d, 0).confidence_interval(0.95)
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high))
        if t["test"] == "equivalent":
            m = t["margin"]
            p = max(stats.ttest_1samp(d, -m, alternative="greater").pvalue,
                    stats.ttest_1samp(d, m, alternative="less").pvalue)
            w = max(stats.wilcoxon(d + m, alternative="greater").pvalue,
                    stats.wilcoxon(d - m, alternative="less").pvalue)
            ci90 = stats.ttest_1samp(d, 0).confidence_interval(0.90)
            assert (r["tost_low"], r["tost_high"]) == pytest.approx((ci90.low, ci90.high))
        else:
            p = stats.ttest_1samp(d, 0, alternative=t["test"]).pvalue
            w = stats.wilcoxon(d, alternative=t["test"]).pvalue
        assert r["p"] == pytest.approx(p, rel=1e-9) and r["p_signed_rank"] == pytest.approx(w, rel=1e-9)
        expected_p.append(p)
        expected_w.append(w)
    assert list(tests["p_holm"]) == pytest.approx(list(_holm(np.array(expected_p))))
    assert list(tests["p_signed_rank_holm"]) == pytest.approx(list(_holm(np.array(expected_w))))
    # as hypothesised, with per-step noise of 1 point: the losing arms' earlier-step excess is decided,
    # and the other arms are shown to err as GRPO within 2 points
    assert tests.loc["final-step gate errs before the last step", "decided"]
    assert tests.loc["OAR-G errs before the last step", "decided"]
    assert tests.loc["truth gate errs as GRPO", "decided"] and tests.loc["rescued OAR-G errs as GRPO", "decided"]
    assert tests.loc["final-step gate's excess at the last step", "mean"] == pytest.approx(0.02, abs=0.01)
    assert not tests.loc["OAR-G's excess at the last step", "decided"]


def test_the_report_section_shows_each_arms_steps_and_claims_equivalence_only_by_tost():
    design = _design()
    tests, md = step_errors.step_error_report(_frame(HOLDS), design, SEEDS, 5)
    assert "## Where the arms write wrong arithmetic on chain_d8, step by step" in md
    assert "| arm | seeds | step 1 | step 2 | step 3 | step 4 | step 5 | steps 1-4 | all steps |" in md
    assert md.count("| truth_final | 10 |") == 2  # the wrong and the sloppy table
    assert "| oar_g_rescue | 10 | 3.0 [3.0, 3.0] |" in md  # the sloppy table
    assert "truth_final - grpo | steps 1-4 | greater |" in md
    assert "step 5 minus steps 1-4 | two-sided |" in md
    assert "decided: equivalent within ±2.0" in md and "a family of its own" in md
    assert "decided: above 0.0" in md  # a margin left out is 0
    # noisy seeds: no equivalence shown, and none claimed
    noisy = step_errors.read_tests(_frame(HOLDS, sd=0.06), design, SEEDS)
    _, md = step_errors.step_error_report(_frame(HOLDS, sd=0.06), design, SEEDS, 5)
    assert not noisy.set_index("name").loc["truth gate errs as GRPO", "decided"]
    assert "not shown equivalent (no claim either way)" in md and "decided: equivalent" not in md


def test_a_missing_or_undefined_run_stops_the_reading_naming_it():
    design = _design()
    frame = _frame(HOLDS)
    gone = frame[~((frame["method"] == "truth_early") & (frame["seed"] == 204))]
    with pytest.raises(ValueError, match="declared runs missing: chain_d8/truth_early seed 204"):
        step_errors.read_tests(gone, design, SEEDS)
    frame.loc[(frame["method"] == "oar_g") & (frame["seed"] == 201), "wrong_earlier"] = math.nan
    with pytest.raises(ValueError, match="wrong_earlier is undefined .* chain_d8/oar_g seed 201"):
        step_errors.read_tests(frame, design, SEEDS)


# ------------------------------------------------------------------------------------ the config


def _mechanism_config(step_errors_design):
    from oar.experiment.runs import deep_merge

    cfg = deep_merge(_config("studies/decisive.yaml"), _config("studies/mechanism.yaml"))
    cfg["analysis"]["mechanism"]["step_errors"] = step_errors_design
    return cfg


def _registry(cfg):
    from validated_registry import validated_registry

    return validated_registry(cfg)


def _with(test=None, **over):
    design = {**_config("studies/mechanism.yaml")["analysis"]["mechanism"]["step_errors"], **over}
    if test is not None:
        design["tests"] = [{"name": "a", "arm": "truth_final", "outcome": "earlier", "test": "greater", **test}]
    return design


@pytest.mark.parametrize("design,key", [
    (_with(baseline="oar_p"), "analysis.mechanism.step_errors.baseline"),
    (_with(alpha=0.5), "analysis.mechanism.step_errors.alpha"),
    (_with({"arm": "oar_p"}), "analysis.mechanism.step_errors.tests[0].arm"),
    (_with({"arm": "grpo"}), "analysis.mechanism.step_errors.tests[0].arm"),
    (_with({"test": "equivalent"}), "analysis.mechanism.step_errors.tests[0].margin"),
    (_with({"test": "equivalent", "margin": 0.3}), "analysis.mechanism.step_errors.tests[0].margin"),
])
def test_a_bad_step_error_design_stops_naming_its_key(design, key):
    from oar.experiment.config_error import ConfigError

    with pytest.raises(ConfigError) as e:
        _registry(_mechanism_config(design))
    assert e.value.key == key


def test_the_declared_design_loads_and_what_the_schema_cannot_say_is_checked():
    reg = _registry(_mechanism_config(_with()))
    assert [t["arm"] for t in reg.mechanism["step_errors"]["tests"]] == [
        "truth_final", "truth_final", "oar_g", "oar_g", "truth", "truth_early", "oar_g_rescue"]
    assert reg.mechanism["seeds"] == SEEDS
    methods = list(ARMS)
    assert step_errors.check_design(None, methods, None, "gsm8k_test") == []
    assert step_errors.check_design(_with(), methods, None, "gsm8k_test")[0][0] == "analysis.mechanism.step_errors"
    problems = dict(step_errors.check_design(_with({"outcome": "middle"}), methods, 5, "chain5_test"))
    assert "analysis.mechanism.step_errors.tests[0].outcome" in problems
    repeated = _with()
    repeated["tests"] = repeated["tests"][:1] * 2
    assert step_errors.check_design(repeated, methods, 5, "chain5_test")[0][0] == "analysis.mechanism.step_errors.tests"


# ------------------------------------------------------------------------------------ the workflow's table job


def test_the_mechanism_table_job_writes_the_step_error_section_from_a_results_tree(tmp_path):
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("tables_job", root / "workflow_scripts" / "tables.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    reg = _registry(_mechanism_config(_with()))
    design = reg.mechanism
    problems = chains.split("test", 20, 5)
    rng = np.random.default_rng(0)
    outcomes, summaries = [], []
    for run in reg.groups["main"]:
        method, seed = reg.runs[run]["method"], reg.runs[run]["seed"]
        outcomes.append({"run": run, "model": "chain_d8", "method": method, "seed": seed,
                         "final_accuracy": 0.5 + rng.normal(0, 0.02)})
        # the final-step gate errs at step 2 in 4 responses of 20 and at step 5 in 6; every other arm in 1 and 1
        errs = (4, 6) if method == "truth_final" else (1, 1)
        responses = [_response(p, wrong=tuple(k for k, n in ((2, errs[0]), (5, errs[1])) if i < n))
                     for i, p in enumerate(problems)]
        summaries.append(_write_eval(tmp_path, run, responses))
    pd.DataFrame(outcomes).to_csv(tmp_path / "outcomes.csv", index=False)
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(name="mechanism"),
        input=SimpleNamespace(outcomes=tmp_path / "outcomes.csv", summaries=[str(s) for s in summaries]),
        params=SimpleNamespace(designs={"mechanism": design, "dose_response": None}, paired_benchmark="chain5_test"))
    frame, md = job.build(smk)
    assert "## Declared contrasts on chain_d8" in md and "## Where the arms write wrong arithmetic" in md
    errors = frame[frame["kind"] == "step error"].set_index("name")
    assert len(errors) == 7 and (frame["kind"] == "contrast").sum() == 6
    # steps 1-4: (4/20 at step 2) / 4 steps = 5% against GRPO's 1.25%, on every seed alike
    assert errors.loc["final-step gate errs before the last step", "mean"] == pytest.approx(0.05 - 0.0125)
    assert errors.loc["final-step gate's excess at the last step", "mean"] == pytest.approx(0.25 - 0.0375)
    assert "| truth_final | 10 | 0.0 [0.0, 0.0] | 20.0 [20.0, 20.0] |" in md
