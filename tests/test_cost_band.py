"""The cost plan as a band (oar.planning.cost_band): the workloads it rests on (workload), the rates no
faster than any H200 row ran and the phases no row measured (rate_limits), the slowest rank's wait
(rank_wait), the calibration checked out of sample (calibration_check), and its errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from oar.planning import calibration_check, cost_plan, gpu_hours, workload
from oar.planning.cost_band import Knobs, Rates, plan_band, rated_step, workloads_of
from oar.planning.hardware import hardware
from oar.planning.memory_plan import PlanError, load_config
from oar.planning.rank_wait import logged_ratio, slowest_rank_factor

CALIBRATION = Path(__file__).resolve().parents[1] / "perf" / "calibration"
# every stored file of the scorers as they run now, 7B and the evened inline rows included
CURRENT = [CALIBRATION / name / "calibration.json" for name in
           ("h200-2026-11-no-cudnn", "h200-2026-11-8192", "h200-2026-11-generate-no-cudnn", "h200-2026-11-inline",
            "h200-2026-11-inline-even", "h200-2026-11-generate-no-cudnn/qwen2.5-7b", "h200-2026-11-8192/qwen2.5-7b")]
# code that no longer runs: scoring with cuDNN's attention kernel; the scorers one response at a time
EARLIER = [[CALIBRATION / "h200-2026-11-stacked" / "calibration.json"],
           sorted((CALIBRATION / "h200-2026-11").glob("calibration_*.json"))]
# the files the paper's plan is calibrated by (docs/cost.md)
PLAN = [CALIBRATION / name / "calibration.json" for name in
        ("h200-2026-11-no-cudnn", "h200-2026-11-generate-no-cudnn", "h200-2026-11-inline-even",
         "h200-2026-11-generate-no-cudnn/qwen2.5-7b", "h200-2026-11-8192/qwen2.5-7b")]


def test_out_of_sample_every_stored_row_is_planned_from_the_others():
    """Each file left out, the plan calibrated by the rest predicts its rows' scoring and update. The
    current code's phases: within 15% in sample; out of sample within 30% at the paper config's 8,192-token
    forwards and at 7B, and within 60% for the 2,048-token rows (left out, no other row has forwards of
    their size, and one size cannot tell the scoring rate from a call's fixed cost: exact OAR-P at 1,024
    tokens is then planned 55% slow). The earlier code's (cuDNN's attention, one response at a time):
    within 20% by their own files, and planned from today's rows up to 84% off (another code path)."""
    errors = calibration_check.check(CURRENT, EARLIER)
    print(calibration_check.table(errors))
    files = {Path(e.file) for e in errors}
    assert files == set(CURRENT) | {p for group in EARLIER for p in group}
    stored = sum(len(json.loads(p.read_text()).get("rows") or json.loads(p.read_text())["methods"]) for p in files)
    assert len({(e.file, e.row) for e in errors}) == stored  # every row of every file
    assert {e.shape for e in errors} == {"qwen2.5-1.5b", "qwen2.5-7b"}
    for e in errors:
        inside, outside = e.errors
        if e.current:
            assert abs(inside) <= 0.15, e
            paper_sized = "8192" in e.file or "generate-no-cudnn" in e.file or "inline" in e.file
            assert abs(outside) <= (0.30 if paper_sized else 0.60), e
        else:
            assert abs(inside) <= 0.20, e
            assert abs(outside) <= 0.90, e
    seven_b_scoring = [e for e in errors if e.shape == "qwen2.5-7b" and e.phase == "scoring"]
    assert seven_b_scoring and all(e.errors[1] > 0.1 for e in seven_b_scoring)  # out of sample, planned slow


@pytest.fixture(scope="module")
def paper_band():
    config = load_config("config/paper.yaml")
    rates = Rates.calibrated(PLAN, hardware("h200"))
    return plan_band(config, rates, workloads_of(config), swings=False), rates


def test_no_phase_runs_faster_than_any_row_and_the_7b_oar_p_row_comes_first(paper_band):
    """Every update and scoring phase of the paper's central plan runs at most as fast as the fastest H200
    row of its kind; exact OAR-P at 7B, which no row measured, is marked so, the most GPU-hours first, with
    the preflight row that would measure it; the high end prices it at the slowest long-forward OAR-P row."""
    from oar.planning.cost_band import extrapolated_phases

    band, rates = paper_band
    fastest = {kind: max(m.rate for m in rates.found if m.kind == kind) for kind in ("update", "scoring")}
    for _, (_, _, step, _) in band.plans["central"].runs.items():
        assert step.update_flops / step.update <= fastest["update"] * 1.0001
        if step.scoring:
            assert step.scoring_flops / step.scoring <= fastest["scoring"] * 1.0001
    phases = extrapolated_phases(band.plans["central"])
    model, phase, why, rate, to_measure, runs, hours = phases[0]
    assert (model, phase, runs) == ("qwen2.5-7b", "scoring (oar_p)", 10) and "shape qwen2.5-7b" in why
    assert "--shape qwen2.5-7b --methods oar_p" in to_measure
    assert any(p[1] == "update" and "FSDP" in p[2] for p in phases)  # the 7B updates' collectives
    high = {run: step for run, (_, _, step, _) in band.plans["high"].runs.items()}
    seven_b_oar_p = next(s for r, s in high.items() if r.startswith("qwen2.5-7b/oar_p"))
    slowest_long = min(m.rate for m in rates.found if m.scorer == "oar_p" and m.work > 20e12)
    assert seven_b_oar_p.scoring_flops / seven_b_oar_p.scoring <= slowest_long * 1.0001 * 1.3  # the wait on top


def test_the_band_rises_and_the_workloads_rest_on_their_sources(paper_band):
    band, _ = paper_band
    totals = [sum(gpu_hours.target_hours(band.plans[s])["all"][1:]) for s in ("low", "central", "high")]
    assert totals[0] < totals[1] < totals[2]
    seven_b = band.workloads["qwen2.5-7b"]
    # SimpleRL-Zoo's Qwen2.5-7B: 665-1,020 tokens of the 7B runs' 3,072
    assert seven_b.completion_fill.low == pytest.approx(665 / 3072) and seven_b.completion_fill.high == pytest.approx(
        1020 / 3072)
    one_b = band.workloads["qwen2.5-math-1.5b"]
    assert one_b.completion_fill.high == 1.0  # the 1.5B curves pass its 1,024-token limit
    assert 0.4 < one_b.scored_share.low < one_b.scored_share.central < one_b.scored_share.high < 0.6
    assert any("(a proxy for this model)" in line for line in seven_b.sources)


def test_a_multi_rank_step_waits_for_the_slowest_rank():
    """The 7B runs' scoring at the mean rank's work, times E[max]/E[mean] of whole groups scored: 16
    groups on each of 4 ranks, 1.26 at a share of 0.5."""
    config = load_config("config/paper.yaml")
    from oar.experiment.runs import Registry
    from oar.planning.memory_plan import _trainer_keys, model_config
    from oar.planning.shapes import shape_of

    registry = Registry(config, config["training"]["trainer"].keys() | _trainer_keys())
    run = next(r for r in registry.runs if r.startswith("qwen2.5-7b/oar_g"))
    settings = registry.runs[run]
    shape = shape_of(model_config("Qwen/Qwen2.5-7B"))
    point = workload.Band(0.5, 0.5, 0.5)
    loads = {"qwen2.5-7b": workload.Workload(point, workload.Band(0.3, 0.3, 0.3), ())}
    rates = Rates(hardware("h200"))
    waits, alone = (rated_step(rates, loads, Knobs(rank_wait=wait), 256, "qwen2.5-7b", shape, settings, 4)
                    for wait in (True, False))
    assert waits.scoring / alone.scoring == pytest.approx(slowest_rank_factor(16, 0.5, 4))
    assert waits.scoring / alone.scoring == pytest.approx(1.255, abs=0.001)


def test_slowest_rank_factor_is_the_expected_maximum_of_whole_groups():
    """Against a simulation of whole groups scored on each rank, with and without a fixed time a call."""
    rng = random.Random(0)
    for groups, share, ranks, fixed in ((16, 0.5, 4, 0.0), (16, 0.25, 4, 0.0), (4, 0.5, 2, 0.0), (4, 0.5, 2, 1.4)):
        def time(k):
            return fixed + k if k else 0.0

        most = mean = 0.0
        for _ in range(40000):
            scored = [sum(rng.random() < share for _ in range(groups)) for _ in range(ranks)]
            most += max(time(k) for k in scored)
            mean += sum(time(k) for k in scored) / ranks
        assert slowest_rank_factor(groups, share, ranks, fixed) == pytest.approx(most / mean, rel=0.01)
    assert slowest_rank_factor(16, 1.0, 4) == slowest_rank_factor(16, 0.3, 1) == 1.0
    assert logged_ratio([{"time_score_s": 1.0, "time_score_max_s": 1.5}, {"time_score_s": 3.0,
                                                                          "time_score_max_s": 3.0}]) == 1.125


def test_the_scored_share_of_groups_under_a_beta_spread_of_pass_rates():
    """The closed forms against a numerical integral; the concentration fitted to pass@1 and pass@8
    gives them back."""
    from scipy import integrate, stats

    for mean, k in ((0.628, 0.84), (0.3, 5.0)):
        density = stats.beta(mean * k, (1 - mean) * k).pdf
        wrong = integrate.quad(lambda p: (1 - p) ** 8 * density(p), 0, 1, limit=200)[0]
        right = integrate.quad(lambda p: p ** 8 * density(p), 0, 1, limit=200)[0]
        assert workload.mixed_share(mean, k, 8) == pytest.approx(1 - wrong - right, rel=1e-4)
    k = workload.fit_concentration(0.628, 0.870, 8)
    assert workload.all_alike(0.628, k, 8)[1] == pytest.approx(0.13, rel=1e-6)
    assert workload.mixed_share(0.628, k, 8) == pytest.approx(0.524, abs=0.001)


def test_a_length_curve_is_read_over_the_runs_steps_and_clipped_at_the_limit():
    curve = workload.LengthCurve("made", "m", "s", "c", ((0, 100), (10, 300)), ("x",))
    assert curve.at(5) == 200 and curve.at(50) == 300
    assert curve.run_mean(20, 1000) == pytest.approx((sum(100 + 20 * s for s in range(10)) + 10 * 300) / 20)
    assert curve.run_mean(20, 150) == pytest.approx((100 + 120 + 140 + 17 * 150) / 20)
    assert curve.span(250) == (100, 250)


def test_a_runs_logged_workload_stands_for_its_model(tiny_model_dir, tmp_path):
    """A real (tiny) run of workflow_scripts/train.py, its metrics.jsonl and run.yaml: its logged
    frac_scored and completion lengths are the workload of its model."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_script", Path(__file__).resolve().parents[1]
                                                  / "workflow_scripts" / "train.py")
    train_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_script)
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)}) + "\n"
                                  for i in range(4)))
    settings = {"run_id": "tiny/oar_g-measured", "method": "oar_g", "model": str(tiny_model_dir),
                "train_file": str(train_file), "oar": {"score_all": True},
                "trainer": {"max_steps": 3, "num_generations": 2, "per_device_train_batch_size": 2,
                            "max_completion_length": 8, "save_steps": 1000}}
    train_script.main(settings, tmp_path / "run")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = workload.measured_workloads([tmp_path / "run" / "metrics.jsonl"])
    assert set(measured) == {"tiny"}
    fills = [line["completion_length"] / 8 for line in lines[1:]]
    assert measured["tiny"].completion_fill.central == pytest.approx(sum(fills) / len(fills))
    assert measured["tiny"].scored_share == workload.Band(1.0, 1.0, 1.0)
    broken = tmp_path / "broken" / "metrics.jsonl"
    broken.parent.mkdir()
    broken.write_text((tmp_path / "run" / "metrics.jsonl").read_text())
    with pytest.raises(PlanError, match=r"--metrics .*broken/metrics.jsonl: no readable run.yaml"):
        workload.measured_workloads([broken])


def test_bad_input_stops_with_one_line_naming_it(tiny_model_dir, tmp_path, capsys):
    """A calibration of a shape no rule carries to a planned model's (the paper's 1.5B model swapped for
    a tiny Llama), a band whose low end exceeds its high end, a share outside (0, 1]."""
    import yaml

    config = yaml.safe_load(Path("config/paper.yaml").read_text())
    config["models"]["qwen2.5-math-1.5b"]["source"] = str(tiny_model_dir)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert cost_plan.main(["--config", str(tmp_path / "config.yaml"), "--hardware", "h200", "--calibration",
                           str(PLAN[0]), "--no-swings"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h200-2026-11-no-cudnn/calibration.json (qwen2.5-1.5b): no rule carries" in err
    assert "model qwen2.5-math-1.5b's shape (hidden 64, 2 layers)" in err
    for flag, values, message in (("--scored-share", ["0.6", "0.5", "0.4"], "the low end 0.6 exceeds the high end 0.4"),
                                  ("--scored-share", ["1.5"], "a scored share of 1.5 is not in (0, 1]"),
                                  ("--scored-share", ["0"], "a scored share of 0 is not in (0, 1]"),
                                  ("--completion-fill", ["0.9", "0.5", "0.6"],
                                   "the low end 0.9 exceeds the high end 0.6"),
                                  ("--scored-share", ["0.2", "0.5"], "give three figures")):
        assert cost_plan.main(["--config", "config/paper.yaml", flag, *values, "--no-swings"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cost plan: {flag}: {message}" in err, err
    with pytest.raises(PlanError, match="figures must rise"):
        workload.Band(0.5, 0.4, 0.6)
