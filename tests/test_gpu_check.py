"""perf/gpu_check.py (the GPU preflight): its plan and errors, and a whole run at tiny size on CPU, so the
preflight still runs on the day a GPU is lent. Nothing here ran on a GPU."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = [sys.executable, str(REPO / "perf" / "gpu_check.py")]
ENV = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
TINY = ["--shape", "tiny", "--response-tokens", "12", "--exact-oar-p-tokens", "8", "--batch", "4",
        "--num-generations", "2"]
# the settings the H200 rows were measured at: the 1.5B shape, 8 completions a step, no gradient checkpointing
H200_SETTINGS = ["--shape", "qwen2.5-1.5b", "--batch", "8", "--no-gradient-checkpointing"]


def _run(args, timeout=300):
    return subprocess.run(CHECK + args, capture_output=True, text=True, env=ENV, timeout=timeout, cwd=REPO)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_gpu_check_refuses_to_run_real_shapes_without_cuda(tmp_path):
    done = _run(["--work", str(tmp_path / "work"), "--batch", "8"])
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--device cuda (the default for --shape qwen2.5-7b): no CUDA device is visible" in done.stderr
    assert not (tmp_path / "work").exists()  # stopped before building anything


def _plan(stderr: str) -> tuple[dict, float]:
    rows = {m: (json.loads(lengths), float(s)) for m, lengths, s in
            re.findall(r"^  (\w+): steps of (\[[\d, ]+\]) tokens, ([\d,.]+) s", stderr, re.M)}
    total = float(re.search(r"^  total ([\d,]+) s", stderr, re.M).group(1).replace(",", ""))
    return rows, total


def test_the_h200_rows_settings_are_planned_as_the_h200_ran_them_and_it_says_what_it_sized():
    """The 1.5B check at the settings the H200 rows ran at (8 completions a step, no checkpointing), by
    oar.planning.cost_plan with the H200 rates (gpu_check_plan.CALIBRATION) and the paper config's scorer
    settings (8,192-token forwards, OAR-G's prompt inline in evened micro-batches): GRPO and OAR-G at 1,024
    tokens (two steps each) and exact OAR-P at 256 (two steps) and 1,024 tokens, each row planned within 15%
    of the process time the H200 measured for it at these settings (OAR-G's from the evened inline file;
    without the steady profile the runs added), under 6 minutes in all where the H200 took 6.3; even a
    budget of 5 minutes keeps every row, dropping exact OAR-P's 1,024-token step first and saying so."""
    done = _run(["--plan-only", "--budget-s", "480"] + H200_SETTINGS)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, total = _plan(done.stderr)
    assert {m: lengths for m, (lengths, _) in rows.items()} == {
        "grpo": [1024, 1024], "oar_g": [1024, 1024], "oar_p": [256, 256, 1024]}, done.stderr
    assert 300 < total <= 360 and "skipped" not in done.stderr and "sized" not in done.stderr
    assert "completions a step 8 (--batch); gradient checkpointing False (--gradient-checkpointing)" in done.stderr
    assert "perf/calibration/h200-2026-11-inline-even/calibration.json" in done.stderr
    process_s = {}
    for folder, methods in (("h200-2026-11-generate-no-cudnn", ("grpo", "oar_p")),
                            ("h200-2026-11-inline-even", ("oar_g",))):
        measured = json.loads((REPO / "perf/calibration" / folder / "calibration.json").read_text())
        process_s |= {r["method"]: r["process_s"] - r.get("profiled_repeat_s", 0.0) for r in measured["rows"]
                      if r["method"] in methods}
    assert set(process_s) == {"grpo", "oar_g", "oar_p"}
    for method, seconds in process_s.items():
        assert abs(rows[method][1] - seconds) <= 0.15 * seconds, (method, rows[method][1], seconds)
    smaller = _run(["--plan-only", "--budget-s", "300"] + H200_SETTINGS)
    rows, total = _plan(smaller.stderr)
    assert rows["oar_p"][0] == [256, 256] and total <= 300
    assert "sized from steps of [256, 256, 1024] tokens to [256, 256] to fit the budget" in smaller.stderr


def _make_budget() -> float:
    """GPU_PREFLIGHT_BUDGET, the budget `make gpu-preflight` passes (the Makefile's default)."""
    return float(re.search(r"^GPU_PREFLIGHT_BUDGET \?= (\d+)$", (REPO / "Makefile").read_text(), re.M).group(1))


def test_the_default_check_runs_the_paper_settings_the_7b_exact_oar_p_row_first():
    """By default the check measures the paper config's settings, what the paper's cost plan extrapolates most
    first: the 7B rows at its micro-batch of 16 with gradient checkpointing, exact OAR-P first (most of the
    plan's GPU-hours, and no row has measured it), then in the time the budget leaves the 1.5B rows at its
    micro-batch of 32; where the memory plan does not fit a micro-batch on the GPU, the largest that does,
    said so."""
    done = _run(["--plan-only", "--budget-s", "900", "--gpu-memory-gib", "64"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("qwen2.5-1.5b: completions a step 32 (models.qwen2.5-math-1.5b.trainer.per_device_train_batch_size); "
            "gradient checkpointing True (training.trainer.gradient_checkpointing); G 8") in done.stderr
    assert ("8 completions a step, not the config's per-device micro-batch of 16 "
            "(models.qwen2.5-7b.trainer.per_device_train_batch_size): the memory plan puts 16 at") in done.stderr
    shapes = re.findall(r"^  (qwen[\w.-]+): completions a step", done.stderr, re.M)
    assert shapes == ["qwen2.5-7b", "qwen2.5-1.5b"], done.stderr
    planned = re.findall(r"^  (\w+): steps of", done.stderr, re.M)
    assert planned[:3] == ["oar_p", "grpo", "oar_g"] and planned[3] == "grpo", done.stderr  # 1.5B: GRPO first
    total = float(re.search(r"^  total ([\d,]+) s", done.stderr, re.M).group(1).replace(",", ""))
    assert total <= 900


def test_make_gpu_preflight_fits_about_ten_minutes_of_an_h200_with_the_7b_exact_oar_p_row_first():
    """`make gpu-preflight`'s budget holds the check in about 10 minutes of an H200 at the paper config's
    settings (15 minutes of a lent GPU, start-up included, hold it), and the first row it runs is the 7B
    shape's exact OAR-P: a check cut short still brings back the row the cost plan extrapolates most."""
    budget = _make_budget()
    assert budget <= 600
    done = _run(["--plan-only", "--budget-s", f"{budget:g}", "--try-beyond-plan", "--gpu-memory-gib", "139"])
    assert done.returncode == 0, done.stderr[-3000:]
    total = float(re.search(r"^  total ([\d,]+) s", done.stderr, re.M).group(1).replace(",", ""))
    assert 0.75 * budget <= total <= budget, done.stderr  # uses the budget, within it
    lines = done.stderr.splitlines()
    first_shape = next(i for i, line in enumerate(lines) if ": completions a step" in line)
    assert lines[first_shape].startswith("  qwen2.5-7b: completions a step 16 ")
    assert re.match(r"^  oar_p: steps of \[256, 256", lines[first_shape + 1]), done.stderr
    assert "gradient checkpointing True (training.trainer.gradient_checkpointing)" in lines[first_shape]


def test_budget_sizes_and_skips_rows_and_says_so():
    done = _run(["--plan-only", "--budget-s", "170"] + H200_SETTINGS)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, total = _plan(done.stderr)
    assert total <= 170
    assert rows["oar_g"][0] == [512, 512] and "sized from steps of [1024, 1024] tokens to [512, 512]" in done.stderr
    assert "exact OAR-P at 1,024 tokens: skipped" in done.stderr and "oar_p" not in rows
    done = _run(["--plan-only", "--budget-s", "60"] + H200_SETTINGS)
    assert done.returncode == 0 and "skipped" in done.stderr, done.stderr[-3000:]
    assert _plan(done.stderr)[1] <= 60


def test_budget_too_small_for_one_step_names_the_option():
    done = _run(["--plan-only", "--budget-s", "20"] + H200_SETTINGS)
    assert done.returncode == 2
    assert "--budget-s 20: too small for one row" in done.stderr


def test_an_option_contradicting_the_config_names_the_key():
    """The check measures the paper config's scorer settings: chunk_tokens is 8,192 (the 7B model's, the first
    shape's, from training.oar; the 1.5B model's its own)."""
    done = _run(["--plan-only", "--chunk-tokens", "512"])
    assert done.returncode == 2
    assert "--chunk-tokens 512 contradicts training.oar.chunk_tokens = 8192" in done.stderr
    done = _run(["--plan-only", "--chunk-tokens", "512", "--shape", "qwen2.5-1.5b"])
    assert "--chunk-tokens 512 contradicts models.qwen2.5-math-1.5b.oar.chunk_tokens = 8192" in done.stderr
    done = _run(["--plan-only", "--probe", "lt_logits"])
    assert done.returncode == 2 and "contradicts training.oar.probe = as_mean" in done.stderr
    assert _run(["--plan-only", "--chunk-tokens", "8192"] + H200_SETTINGS).returncode == 0  # agreeing is fine


def test_a_calibration_without_grpo_names_the_field(tmp_path):
    record = json.loads((REPO / "perf/calibration/h200-2026-11/calibration_256.json").read_text())
    record["rows"] = [r for r in record["rows"] if r["method"] != "grpo"]
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    done = _run(["--plan-only", "--calibration", str(path)])
    assert done.returncode == 2 and "no GRPO row (field 'method'" in done.stderr


def _table(path: Path) -> dict:
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if line.startswith("| ") and "---" not in line and cells[0] != "row":
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_gpu_check_times_every_row_at_forced_length(tmp_path):
    work, out = tmp_path / "work", tmp_path / "gpu_check.md"
    done = _run(TINY + ["--work", str(work), "--out", str(out), "--eval", "--eval-batch", "4"], timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = _table(out)
    assert float(rows["transformers"][3]) > 0  # evaluation tokens/s
    assert "vllm" in rows  # timed where vLLM is importable, else marked not installed
    for label, method in (("GRPO at 12 tokens", "grpo"), ("OAR-G at 12 tokens", "oar_g"),
                          ("exact OAR-P at 8 tokens", "oar_p"), ("exact OAR-P at 12 tokens", "oar_p")):
        steady, generate, score, update, step, first, ratio, paper, scored, calls, peak, predicted, *_ = rows[label]
        assert steady == ("1 of 3" if method == "oar_p" else "1 of 2")  # the first step is in no steady figure
        assert float(update) > 0 and float(step) >= float(update) and float(peak) > 0 and float(predicted) > 0
        assert paper == {"grpo": "1.0", "oar_g": "1.4", "oar_p": "4.2"}[method]
        assert scored == ("0.00" if method == "grpo" else "1.00")
        assert (int(calls) > 0) == (method != "grpo")  # model calls counted in the scoring call
    # exact OAR-P's longer length runs after two steps at the shorter: its generation is the first at 12
    assert "(first at this length)" in rows["exact OAR-P at 12 tokens"][1]
    record = json.loads((work / "calibration.json").read_text())
    assert record["complete"] is True and record["vllm_importable"] in (True, False)
    by_row = {r["row"]: r for r in record["rows"]}
    assert set(by_row) == {"grpo-12", "oar_g-12", "oar_p-8", "oar_p-12"}
    assert all(r["completion_length"] == int(r["row"].rsplit("-", 1)[1]) for r in by_row.values())
    assert all(r["generation_backend"] == "transformers" and r["chunk_tokens"] == 8192 for r in by_row.values())
    assert by_row["grpo-12"]["first_generate_s"] > 0 and by_row["oar_p-8"]["prompt_tokens"] > 0
    # per scorer, the profile of one scoring call: synchronisations counted, model calls, top operators
    profiles = record["profiles"]
    assert set(profiles) == {"oar_g-12", "oar_p-8-12"}
    for profile in profiles.values():
        assert profile["model_calls"] > 0 and profile["top"] and profile["synchronisations"] >= 0
        assert set(profile["by_op"]) == {"aten::item", "aten::_local_scalar_dense", "aten::nonzero"}
    # no checkpoint: transformers would save one at max_steps
    assert not [p for p in work.rglob("checkpoint-*")]
    # the record the cost plan calibrates from, and the plan reading it
    from oar.planning.calibration import calibrate
    from oar.planning.hardware import hardware

    hw = calibrate(work / "calibration.json", hardware("h100"))
    assert hw.flops > 0 and hw.decode_backend == "transformers" and "calibrated" in hw.name
    # the paper config scores OAR-G with its prompt inline, whose calls are calibrated apart
    assert by_row["oar_g-12"]["grad_prompt"] == "inline"
    assert {m for m, _, _ in hw.scorer_call_s} == {"oar_g inline", "oar_p"}


@pytest.mark.slow
def test_a_cut_off_check_keeps_its_finished_rows_marked_partial(tmp_path):
    """Killed after its first row: the table and calibration.json hold that row and say they are partial."""
    work = tmp_path / "work"
    process = subprocess.Popen(CHECK + TINY + ["--methods", "grpo", "oar_g", "--work", str(work)], env=ENV, cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not (work / "calibration.json").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    record = json.loads((work / "calibration.json").read_text())
    assert record["complete"] is False and [r["row"] for r in record["rows"]] == ["grpo-12"]
    assert record["rows_planned"] == ["grpo-12", "oar_g-12"]
    assert "**Partial: 1 of 2 planned rows finished**" in (work / "gpu_check.md").read_text()


@pytest.mark.slow
def test_an_outer_time_limit_keeps_the_running_rows_finished_lengths(tmp_path):
    """SIGTERM (SLURM's time limit, `timeout`) while exact OAR-P's process is in its last length: the check
    stops that process, keeps the length whose steps all finished, writes its files marked partial and
    exits 143. On the H200 an outer limit once cost the whole exact OAR-P row, its three steps finished."""
    work = tmp_path / "work"
    args = ["--shape", "tiny", "--response-tokens", "48", "--exact-oar-p-tokens", "8", "--batch", "4",
            "--num-generations", "2", "--methods", "oar_p", "--work", str(work)]
    process = subprocess.Popen(CHECK + args, env=ENV, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        steps = []
        while len(steps) < 2 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            steps = [line for path in work.glob("oar_p-*/steps.jsonl") for line in path.read_text().splitlines()]
        assert len(steps) == 2 and process.poll() is None, "the check ended before its last length"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 143, stderr[-3000:]
    record = json.loads((work / "calibration.json").read_text())
    assert record["complete"] is False and [r["row"] for r in record["rows"]] == ["oar_p-8"]
    assert record["rows"][0]["cut_off"] is True and record["rows"][0]["steady_steps"] == 1
    assert "stopped by SIGTERM (an outer time limit) in oar_p-8-48, 1 of its lengths finished" in \
        (work / "gpu_check.md").read_text()


def test_a_row_cut_off_keeps_the_lengths_whose_steps_finished(tmp_path):
    """A process cut off in its last step (exact OAR-P's step at 1,024 tokens after two at 256): the
    256-token length, whose steps all finished, is a result marked cut off; the 1,024 one is not."""
    sys.path.insert(0, str(REPO / "perf"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "perf"))
    row = gpu_check.Row("oar_p", [256, 256, 1024])
    out = tmp_path / row.name
    out.mkdir()
    logged = [{"time_generate_s": 14.6 - 8 * i, "time_score_s": 105.6 - 94 * i, "completion_length": 256.0,
               "frac_scored": 1.0, "score_peak_memory_mb": 4642.0 + 5923 * i} for i in range(2)]
    timed = [{"step": i + 1, "tokens": 256, "step_s": 121.0 - 103 * i, "update_s": 0.86 - 0.65 * i,
              "peak_mb": 14796.0 + 3393 * i, "score_forwards": 157, "prompt_tokens": 93.0 + 2 * i} for i in range(2)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logged))
    (out / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in timed))
    results = gpu_check.row_results(row, out, 301.0, complete=False)
    assert list(results) == ["oar_p-256"]
    r = results["oar_p-256"]
    assert r["cut_off"] is True and r["steady_steps"] == 1 and r["score_s"] == pytest.approx(11.6)
    assert r["update_s"] == pytest.approx(0.21) and r["first_step_s"] == 121.0
    with pytest.raises(RuntimeError, match="2 steps logged and 2 timed, expected 3"):
        gpu_check.row_results(row, out, 301.0)  # a process that exited without its last step is an error


@pytest.mark.slow
def test_attention_ab_times_each_scorer_with_the_other_kernels_too(tmp_path):
    """--attention-ab adds, for each scorer, a row with the other choice of oar.scoring_attention (torch's
    own kernels beside the default no_cudnn), timed but not profiled, each row saying which it ran."""
    work = tmp_path / "work"
    done = _run(TINY + ["--methods", "grpo", "oar_g", "--attention-ab", "--work", str(work)], timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = _table(work / "gpu_check.md")
    assert {"GRPO at 12 tokens", "OAR-G at 12 tokens", "OAR-G (torch_default attention) at 12 tokens"} <= set(rows)
    record = json.loads((work / "calibration.json").read_text())
    kernels = {r["row"]: r["scoring_attention"] for r in record["rows"]}
    assert kernels == {"grpo-12": "no_cudnn", "oar_g-12": "no_cudnn", "oar_g-torch_default-12": "torch_default"}
    assert set(record["profiles"]) == {"oar_g-12"}
    assert "scoring_attention no_cudnn (config/schema.yaml's default of training.oar.scoring_attention)" in \
        (work / "gpu_check.md").read_text()


def test_profile_steady_profiles_the_last_steps_scoring_call_again_out_of_its_timing(tmp_path):
    """--profile-steady oar_g repeats OAR-G's last scoring call, warm, under the profiler: the record and
    the table carry that profile (the same model calls as the timed call), and the repeat is in neither
    the step's update nor its step time."""
    work = tmp_path / "work"
    done = _run(TINY + ["--methods", "oar_g", "--profile-steady", "oar_g", "--work", str(work)], timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads((work / "calibration.json").read_text())
    (row,) = record["rows"]
    steady = record["steady_profiles"]["oar_g-12"]
    assert steady["model_calls"] == row["score_forwards"] > 0 and steady["top"]
    assert "steady_profile" not in row and set(record["profiles"]) == {"oar_g-12"}
    assert "oar_g-12, steady (the last step's call repeated)" in (work / "gpu_check.md").read_text()
    (first, last) = [json.loads(line) for line in (work / "oar_g-12" / "steps.jsonl").read_text().splitlines()]
    assert "profiled_repeat_s" not in first and last["profiled_repeat_s"] >= steady["seconds"]
    timed = [json.loads(line) for line in (work / "oar_g-12" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["step_s"] == pytest.approx(timed["time_generate_s"] + timed["time_score_s"] + last["update_s"],
                                           rel=0.25, abs=0.2)


def test_try_beyond_plan_gives_the_last_row_back_the_length_the_budget_dropped():
    """--try-beyond-plan: the plan is unchanged (exact OAR-P sized to two steps at 256 tokens), and its
    process then runs the 1,024-token step it dropped in whatever time the budget has left."""
    done = _run(["--plan-only", "--budget-s", "300", "--try-beyond-plan"] + H200_SETTINGS)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, total = _plan(done.stderr)
    assert rows["oar_p"][0] == [256, 256] and total <= 300
    assert "oar_p: then steps of [1024] tokens beyond the plan" in done.stderr


def test_a_step_tried_beyond_the_plan_is_a_result_when_it_finished_and_missing_when_cut_off(tmp_path):
    sys.path.insert(0, str(REPO / "perf"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "perf"))
    row = gpu_check.Row("oar_p", [256, 256], wanted=[256, 256, 1024])
    row.try_dropped_lengths()
    assert row.tried == [1024] and row.run_lengths == [256, 256, 1024] and row.name == "oar_p-256-1024"
    assert row.planned_parts() == [("oar_p-256", 256)] and row.parts()[-1] == ("oar_p-1024", 1024)
    out = tmp_path / row.name
    out.mkdir()
    logged = [{"time_generate_s": 10.0, "time_score_s": 2.0, "completion_length": float(t), "frac_scored": 1.0,
               "score_peak_memory_mb": 4000.0} for t in row.run_lengths]
    timed = [{"step": i + 1, "tokens": t, "step_s": 13.0, "update_s": 0.3, "peak_mb": 15000.0,
              "score_forwards": 40, "prompt_tokens": 93.0} for i, t in enumerate(row.run_lengths)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logged))
    (out / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in timed))
    results = gpu_check.row_results(row, out, 100.0)
    assert results["oar_p-1024"]["beyond_plan"] is True and "beyond_plan" not in results["oar_p-256"]
    assert results["oar_p-1024"]["generate_first_at_length"] is True
    # cut off in the tried step: the planned length is kept, the tried one is missing
    (out / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logged[:2]))
    (out / "steps.jsonl").write_text("".join(json.dumps(x) + "\n" for x in timed[:2]))
    assert list(gpu_check.row_results(row, out, 100.0, complete=False)) == ["oar_p-256"]
    # a row sized by halving its lengths has no dropped tail to try
    halved = gpu_check.Row("oar_g", [512, 512], wanted=[1024, 1024])
    halved.try_dropped_lengths()
    assert halved.tried == []


def test_oar_g_variants_bench_times_every_variant_beside_the_update_on_a_cpu(tmp_path):
    """perf/oar_g_variants.py (OAR-G's scoring call against the update, its variants interleaved) runs at
    tiny size on a CPU, so it runs on the day a GPU is lent: every variant timed, the phases of one
    profiled call named."""
    out = tmp_path / "variants.json"
    done = subprocess.run([sys.executable, str(REPO / "perf" / "oar_g_variants.py"), "--shape", "tiny", "--device",
                           "cpu", "--response-tokens", "48", "--batch", "4", "--chunk-tokens", "128", "--repeats", "2",
                           "--phases", "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["median_s"]) == {"update", "oar_g", "oar_g, evened micro-batches", "oar_g, one micro-batch",
                                       "oar_g, torch's attention kernels", "oar_g, prompt inline",
                                       "oar_g, prompt inline, filled in turn",
                                       "oar_g, prompt inline, one micro-batch"}
    assert all(len(t) == 2 and min(t) > 0 for t in result["seconds"].values())
    assert result["over_update"]["update"] == 1.0
    assert {"clean_forward", "noisy_forward", "prefix"} <= set(result["phase_device_s"])
    # the inline prompt runs no prompt apart
    assert {"clean_forward", "noisy_forward"} <= set(result["phase_device_s_inline"])
    assert "prefix" not in result["phase_device_s_inline"]
    assert "| oar_g, one micro-batch |" in done.stdout
