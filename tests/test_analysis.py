"""The analysis (oar.analysis: reading run outputs, each question's statistics and table, the figures) on small
synthetic files."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from oar.analysis import figures
from oar.analysis.accuracy import accuracy_table, aggregate_accuracy, paired_accuracy_differences
from oar.analysis.causal_recall import causal_recall, oracle_sanity, recall_table
from oar.analysis.cost import cost_summary, cost_table
from oar.analysis.credit import credit_summary
from oar.analysis.fidelity import proxy_fidelity
from oar.analysis.grid import grid_table
from oar.analysis.labels import method_label
from oar.analysis.run_outputs import accuracy_frame, read_metrics, training_curves
from oar.analysis.statistics import seed_interval
from oar.analysis.table_file import write_table

BENCH = ["gsm8k_test", "math500"]


def write_summary(path, p1, n=10, ci=(0.1, 0.9), samples=1, unparsable=0, undecided=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {} if undecided is None else {"undecided": undecided}
    path.write_text(json.dumps({"pass@1": p1, "pass@1_ci95": list(ci), "num_problems": n,
                                "samples_per_problem": samples, "unparsable": unparsable, "truncated": 1,
                                "mean_response_tokens": 50.0, **extra}))
    return path


def write_metrics(path, steps, step_time=1.0, ess=1.0, top=0.1, reward=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": s, "reward": reward + 0.1 * s, "reward_std": 0.1, "entropy": 2.0 - 0.1 * s,
                         "completion_length": 60, "loss": 0.0, "ess_ratio": ess, "top_mass": top,
                         "frac_scored": 1.0, "fallback_no_answer": 0, "fallback_nonfinite": 0,
                         "time_generate_s": step_time / 2, "time_score_s": step_time / 4,
                         "time_update_s": step_time / 4, "step_time_s": step_time, "peak_memory_mb": 100})
             for s in range(1, steps + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


RUNS = {
    "m/base": {"model": "m", "method": "base"},
    "m/grpo-seed0": {"model": "m", "method": "grpo", "seed": 0},
    "m/grpo-seed1": {"model": "m", "method": "grpo", "seed": 1},
    "m/oar_p-seed0": {"model": "m", "method": "oar_p", "tau": 0.4, "beta": 2.0, "probe": "as_mean", "seed": 0},
    "m/oar_p-seed1": {"model": "m", "method": "oar_p", "tau": 0.4, "beta": 2.0, "probe": "as_mean", "seed": 1},
}


@pytest.fixture
def acc(tmp_path):
    values = {"m/base": (0.1, 0.2), "m/grpo-seed0": (0.3, 0.5), "m/grpo-seed1": (0.5, 0.7),
              "m/oar_p-seed0": (0.6, 0.6), "m/oar_p-seed1": (0.6, 0.6)}
    summaries = {(run, b): write_summary(tmp_path / run / b / "summary.json", v) for run, vs in values.items()
                 for b, v in zip(BENCH, vs)}
    return accuracy_frame(RUNS, summaries)


def test_seed_interval():
    mean, low, high = seed_interval([0.3, 0.5])
    assert mean == pytest.approx(0.4)
    # t(0.975, 1) = 12.706; sd = 0.1414; half = 12.706 * 0.1414 / sqrt(2) = 1.2706
    assert high - mean == pytest.approx(1.2706, abs=1e-3) and mean - low == pytest.approx(high - mean)
    assert math.isnan(seed_interval([0.3])[1])


def test_aggregate_accuracy_uses_seeds_or_the_bootstrap(acc):
    agg = aggregate_accuracy(acc, BENCH)
    grpo = agg[(agg["method"] == "grpo") & (agg["benchmark"] == "gsm8k_test")].iloc[0]
    assert grpo["mean"] == pytest.approx(0.4) and grpo["n_seeds"] == 2 and grpo["interval"] == "seeds"
    base = agg[(agg["method"] == "base") & (agg["benchmark"] == "math500")].iloc[0]
    assert (base["ci_low"], base["ci_high"]) == (0.1, 0.9) and base["interval"] == "bootstrap over problems"
    avg = agg[(agg["method"] == "grpo") & (agg["benchmark"] == "average")].iloc[0]
    assert avg["mean"] == pytest.approx(0.5)  # seeds' averages 0.4 and 0.6
    # identical seeds: zero-width interval
    oar = agg[(agg["method"] == "oar_p") & (agg["benchmark"] == "average")].iloc[0]
    assert oar["ci_low"] == pytest.approx(0.6) and oar["ci_high"] == pytest.approx(0.6)


def test_main_table_markdown_and_csv(acc, tmp_path):
    frame, md = accuracy_table(acc, BENCH, "Main table", methods=["grpo", "oar_p"])
    assert list(frame["label"]) == ["Base model", "GRPO", "OAR-P"]
    assert frame.loc[1, "gsm8k_test"] == pytest.approx(40.0)
    assert "| Method | GSM8K | MATH500 | Avg. | seeds |" in md
    assert "| GRPO | 40.0 [" in md and "| Base model | 10.0 [10.0, 90.0] (0.0% no answer) |" in md
    write_table(frame, md, tmp_path / "t.csv", tmp_path / "t.md")
    assert pd.read_csv(tmp_path / "t.csv").shape[0] == 3
    assert (tmp_path / "t.md").read_text() == md


def test_accuracy_tables_show_the_unparsable_share_beside_every_accuracy(tmp_path):
    # GSM8K: the base model leaves 4 of 10 responses without an answer, GRPO 1 and 0 over its two seeds
    counts = {"m/base": (4, 2), "m/grpo-seed0": (1, 0), "m/grpo-seed1": (0, 0)}
    summaries = {(run, b): write_summary(tmp_path / run / b / "summary.json", 0.5, unparsable=u)
                 for run, us in counts.items() for b, u in zip(BENCH, us)}
    acc = accuracy_frame({r: RUNS[r] for r in counts}, summaries)
    frame, md = accuracy_table(acc, BENCH, "Main table")
    base, grpo = frame.iloc[0], frame.iloc[1]
    assert (base["gsm8k_test_unparsable"], base["math500_unparsable"]) == (40.0, 20.0)
    assert base["average_unparsable"] == pytest.approx(30.0)
    assert grpo["gsm8k_test_unparsable"] == pytest.approx(5.0)  # the mean over seeds
    assert "| Base model | 50.0 [10.0, 90.0] (40.0% no answer) | 50.0 [10.0, 90.0] (20.0% no answer) |" in md
    assert "(5.0% no answer)" in md and "no final answer" in md
    write_table(frame, md, tmp_path / "t.csv", tmp_path / "t.md")
    assert pd.read_csv(tmp_path / "t.csv")["gsm8k_test_unparsable"].tolist() == [40.0, 5.0]


def test_accuracy_tables_count_undecided_grades(tmp_path):
    # GRPO seed 0: 2 GSM8K responses and 1 MATH500 response the grader's symbolic check left undecided
    counts = {"m/base": (0, 0), "m/grpo-seed0": (2, 1), "m/grpo-seed1": (0, None)}  # None: an older summary
    summaries = {(run, b): write_summary(tmp_path / run / b / "summary.json", 0.5, undecided=u)
                 for run, us in counts.items() for b, u in zip(BENCH, us)}
    acc = accuracy_frame({r: RUNS[r] for r in counts}, summaries)
    frame, md = accuracy_table(acc, BENCH, "Main table")
    grpo = frame.set_index("method").loc["grpo"]
    assert (grpo["gsm8k_test_undecided"], grpo["math500_undecided"], grpo["average_undecided"]) == (2, 1, 3)
    assert "| Base model | 50.0 [10.0, 90.0] (0.0% no answer) |" in md  # none: no mark
    assert "(0.0% no answer) (2 undecided)" in md and "(3 undecided)" in md and "timed out twice" in md
    _, quiet = accuracy_table(acc[acc["run"] == "m/base"], BENCH, "Main table")
    assert "undecided" not in quiet


def test_tables_mark_runs_that_trained_nothing(acc, tmp_path):
    runs = {r: m for r, m in RUNS.items() if r != "m/base"}
    metrics = {r: write_metrics(tmp_path / r / "metrics.jsonl", 4) for r in runs}
    # OAR-P seed 1: every step had zero advantage (all-equal rewards in every group)
    rows = [json.loads(line) for line in metrics["m/oar_p-seed1"].read_text().splitlines()]
    metrics["m/oar_p-seed1"].write_text("".join(json.dumps({**r, "frac_active": 0.0}) + "\n" for r in rows))
    moved = {"tensors": 3, "tensors_changed": 3, "rel_l2_delta": 1e-3}
    weights = {r: moved for r in runs}
    weights["m/grpo-seed1"] = {"tensors": 3, "tensors_changed": 0, "rel_l2_delta": 0.0}  # weights = base
    summary = credit_summary(training_curves(runs, metrics), weights).set_index("run")
    assert summary.loc["m/oar_p-seed1", "steps_with_advantage"] == 0 and not summary.loc["m/oar_p-seed1", "trained"]
    assert summary.loc["m/grpo-seed1", "steps_with_advantage"] == 4  # no frac_active: reward_std > 0 counts
    assert not summary.loc["m/grpo-seed1", "trained"] and summary.loc["m/grpo-seed0", "trained"]
    frame, md = accuracy_table(acc, BENCH, "Main table", credit=summary.reset_index())
    assert list(frame["untrained_runs"]) == [0, 1, 1]
    assert "| GRPO – 1 of 2 seeds UNTRAINED |" in md and "| OAR-P – 1 of 2 seeds UNTRAINED |" in md
    assert "4/4, 0/4" in md and "UNTRAINED: its row measures the base model" in md


def test_method_labels():
    assert method_label("oar_g", 0.0, 2.0, "as_mean", ("tau",)) == "OAR-G (tau 0, boost-only)"
    assert method_label("oar_g", 1.0, 2.0, "as_mean", ("tau",)) == "OAR-G (tau 1, suppress-only)"
    assert method_label("oar_p", 0.4, 2.0, "as_joint", ("probe",)) == "OAR-P (AS-Joint)"


def test_credit_and_cost(tmp_path):
    runs = {r: m for r, m in RUNS.items() if r != "m/base"}
    metrics = {r: write_metrics(tmp_path / r / "metrics.jsonl", 3, step_time=4.0 if "oar_p" in r else 1.0,
                                ess=0.5 if "oar_p" in r else 1.0) for r in runs}
    # a run killed mid-write leaves a torn last line, which is dropped
    with open(metrics["m/grpo-seed1"], "a") as f:
        f.write('{"step": 4, "rew')
    curves = training_curves(runs, metrics)
    assert len(curves) == 12 and set(curves["method"]) == {"grpo", "oar_p"}
    summary = credit_summary(curves)
    oar = summary[summary["run"] == "m/oar_p-seed0"].iloc[0]
    assert oar["ess_ratio_mean"] == 0.5 and oar["steps"] == 3 and oar["reward_final"] == pytest.approx(0.3)
    cost = cost_summary(curves)
    assert cost.set_index("method").loc["oar_p", "ratio_to_grpo"] == pytest.approx(4.0)
    frame, md = cost_table(cost)
    assert "compare across methods" not in md  # nothing known about how the jobs ran: no claim
    assert "ran with 2 thread(s). **Step times compare across methods only if no other job ran beside" in \
        cost_table(cost, train_threads=2)[1]
    assert "4.00x" in md and list(frame["method"]) == ["grpo", "oar_p"]
    assert cost["peak_memory_mb"].tolist() == [100, 100]


def test_cost_takes_the_largest_rank_peak_of_a_multi_process_run(tmp_path):
    path = write_metrics(tmp_path / "m" / "grpo-seed0" / "metrics.jsonl", steps=2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[1].update(peak_memory_mb=150, peak_memory_max_mb=180, score_peak_memory_mb=10, score_peak_memory_max_mb=30)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    curves = training_curves({"m/grpo-seed0": RUNS["m/grpo-seed0"]}, {"m/grpo-seed0": path})
    cost = cost_summary(curves).iloc[0]
    assert cost["peak_memory_mb"] == 180 and cost["score_peak_memory_mb"] == 30


def test_read_metrics_rejects_a_bad_middle_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        read_metrics(path)


def test_causal_recall_and_fidelity():
    oracle = [{"index": 0, "reasoning_len": 10, "causal": [9]},
              {"index": 1, "reasoning_len": 10, "causal": []},
              {"index": 2, "reasoning_len": 20, "causal": [0, 1]}]
    ramp = {"index": 0, "scores": list(range(10))}
    scores = {
        "position": [ramp, {"index": 1, "scores": list(range(10))}, {"index": 2, "scores": list(range(20))}],
        "oar_p": [{"index": 0, "scores": [0] * 9 + [5]}, {"index": 1, "scores": [1] * 10},
                  {"index": 2, "scores": [3, 2] + [0] * 18}],
    }
    result = causal_recall(oracle, scores)
    assert result["empty_oracle"] == 1
    assert result["summary"]["oar_p"]["mean"] == 1.0
    # position: response 0 hits (k = 1, last token), response 2 misses (k = 2, last two tokens)
    assert result["summary"]["position"]["mean"] == 0.5 and result["summary"]["position"]["n"] == 2
    # the trivial orders: response 0's causal token is the last (latest first hits), response 2's the first two
    assert result["baselines"]["latest_first"]["mean"] == 0.5
    assert result["baselines"]["earliest_first"]["mean"] == 0.5
    sanity = result["oracle"]
    assert sanity["positions"] == 40 and sanity["flip_rate"] == pytest.approx(3 / 40)
    frame, md = recall_table(result)
    assert {"chance", "earliest_first", "latest_first"} <= set(frame["scorer"])
    assert "| OAR-P | 1.000 [1.000, 1.000] |" in md and "| earliest tokens first | 0.500" in md
    assert "3 of 40" not in md and "7.5% of 40 reasoning positions" in md

    fid = proxy_fidelity(scores["oar_p"], {"position": scores["position"]})
    s = fid["summary"]["position"]
    assert s["spearman"]["n_undefined"] == 1  # response 1: constant OAR-P scores
    assert s["topk_overlap"]["n"] == 3


def test_oracle_sanity_sees_an_oracle_that_marks_early_tokens():
    # every response: the first half of the positions flip, the second half do not
    oracle = [{"index": i, "reasoning_len": 10, "causal": list(range(5)), "correct": i % 2 == 0,
               "intervention": "pad"} for i in range(4)]
    sanity = oracle_sanity(oracle)
    assert sanity["flip_rate"] == 0.5 and sanity["position_spearman"] < -0.8
    assert (sanity["responses_correct"], sanity["responses_incorrect"], sanity["intervention"]) == (2, 2, "pad")
    recall = causal_recall(oracle, {})
    assert recall["baselines"]["earliest_first"]["mean"] == 1.0 and recall["baselines"]["latest_first"]["mean"] == 0.0


def test_recall_checks_lengths():
    with pytest.raises(ValueError, match="reasoning tokens"):
        causal_recall([{"index": 0, "reasoning_len": 3, "causal": [1]}],
                               {"x": [{"index": 0, "scores": [1, 2]}]})


def test_grid_table_and_figures(tmp_path, acc):
    grid_runs = {f"m/oar_g-{t}-{b}": {"model": "m", "method": "oar_g", "tau": t, "beta": b, "probe": "as_mean",
                                      "seed": 0} for t in (0.2, 0.6) for b in (1.0, 2.0)}
    summaries = {(r, bench): write_summary(tmp_path / "g" / r / bench / "summary.json", meta["tau"] + meta["beta"] / 10)
                 for r, meta in grid_runs.items() for bench in BENCH}
    grid = accuracy_frame(grid_runs, summaries)
    frame, md = grid_table(grid, BENCH)
    assert len(frame) == 4 and "| 0.6 | 70.0 | 80.0 |" in md

    out = tmp_path / "fig"
    figures.grid_heatmap(grid, BENCH, [out / "grid.png", out / "grid.pdf"])
    runs = {r: m for r, m in RUNS.items() if r != "m/base"}
    curves = training_curves(runs, {r: write_metrics(tmp_path / r / "metrics.jsonl", 3) for r in runs})
    figures.training_curves(curves, [out / "curves.png", out / "curves.pdf"])
    figures.cost_bars(cost_summary(curves), [out / "cost.png"])
    figures.recall_bars({"summary": {"oar_p": {"mean": 0.5, "sem": 0.1, "n": 3},
                                     "random": {"mean": 0.1, "sem": None, "n": 3}},
                         "chance": {"mean": 0.1}}, [out / "recall.png"])
    figures.token_heatmap(["a", "b", "\n"], {"oar_p": [0, 1, 2], "entropy": [1, 1, 1]}, [out / "tok.png"],
                          weights=[0.5, 1.0, 1.5])
    for name in ("grid.png", "grid.pdf", "curves.png", "curves.pdf", "cost.png", "recall.png", "tok.png"):
        assert (out / name).stat().st_size > 1000
    assert not list(out.glob(".*"))  # no temporary file left behind


def test_paired_accuracy_differences_pair_seeds_with_grpo(acc):
    diffs = paired_accuracy_differences(acc, BENCH).set_index("method")
    # per-seed averages: GRPO 0.4, 0.6; OAR-P 0.6, 0.6 -> differences 0.2 and 0.0
    row = diffs.loc["oar_p"]
    assert row["n_seeds"] == 2 and row["wins"] == 1 and row["diff_mean"] == pytest.approx(0.1)
    assert row["ci_high"] - row["diff_mean"] == pytest.approx(1.2706, abs=1e-3)
    assert "grpo" not in diffs.index and "base" not in diffs.index
    # a seed GRPO did not run is not paired
    one_seed = acc[acc["run"] != "m/grpo-seed1"]
    assert paired_accuracy_differences(one_seed, BENCH).set_index("method").loc["oar_p", "n_seeds"] == 1


def test_tables_show_the_paired_difference_from_grpo(acc):
    frame, md = accuracy_table(acc, BENCH, "Controls")
    assert "minus GRPO, paired |" in md and "| 10.0 [-117.1, 137.1] (2; 1) |" in md
    assert frame.set_index("method").loc["oar_p", "minus_grpo_mean"] == pytest.approx(10.0)
    assert "same prompts and first rollouts" in md


def test_grid_table_adds_a_paired_matrix_when_grpo_ran(tmp_path, acc):
    grid_runs = {f"m/oar_g-{t}-{b}-seed{s}": {"model": "m", "method": "oar_g", "tau": t, "beta": b,
                                                "probe": "as_mean", "seed": s}
                 for t in (0.2, 0.6) for b in (1.0, 2.0) for s in (0, 1)}
    summaries = {(r, bench): write_summary(tmp_path / "g" / r / bench / "summary.json",
                                           0.5 + 0.1 * meta["seed"] + meta["tau"] / 10)
                 for r, meta in grid_runs.items() for bench in BENCH}
    grid = pd.concat([acc, accuracy_frame(grid_runs, summaries)])
    frame, md = grid_table(grid, BENCH)
    # GRPO's per-seed averages 0.4 and 0.6; tau 0.6 cells 0.56 and 0.66: +16 and +6 points
    assert "Minus GRPO, paired:" in md and "| 0.6 | 11.0 [-52.5, 74.5] (2; 2) |" in md
    assert set(frame["minus_grpo_seeds"]) == {2}
