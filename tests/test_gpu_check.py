"""bench/gpu_check.py at tiny size on CPU, so the GPU check still runs on the day a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
METHODS = ("grpo", "oar_g", "oar_p")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_gpu_check_refuses_to_run_real_shapes_without_cuda(tmp_path):
    command = [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--work", str(tmp_path / "work")]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--device cuda (the default for --shape qwen2.5-1.5b): no CUDA device is visible" in done.stderr
    assert not (tmp_path / "work").exists()  # stopped before building anything


@pytest.mark.slow
def test_gpu_check_times_every_method_at_forced_length(tmp_path):
    out = tmp_path / "gpu_check.md"
    command = [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--shape", "tiny", "--response-tokens", "12",
               "--batch", "4", "--num-generations", "2", "--steps", "1", "--eval-batch", "4",
               "--work", str(tmp_path / "work"), "--out", str(out)]
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.read_text().splitlines() if line.startswith("| ") and "---" not in line}
    for method in ("grpo", "oar_g", "oar_p"):
        generate, score, update, step, ratio, paper, tokens, scored, peak, predicted = rows[method]
        assert float(step) > 0 and float(peak) > 0 and float(predicted) > 0
        assert paper == {"grpo": "1.0", "oar_g": "1.4", "oar_p": "4.2"}[method]
        assert tokens == "12"  # responses forced to --response-tokens
        assert scored == ("0.00" if method == "grpo" else "1.00")
    assert float(rows["oar_p"][1]) > 0 and float(rows["oar_g"][1]) > 0  # scoring was timed
    assert float(rows["transformers"][3]) > 0  # evaluation tokens/s
    assert "vllm" in rows  # timed where vLLM is importable, else marked not installed
    # the machine-readable record the cost plan calibrates from, and the plan reading it
    record = json.loads((tmp_path / "work" / "calibration.json").read_text())
    assert record["response_tokens"] == 12 and record["batch"] == 4 and set(record["methods"]) == set(METHODS)
    assert record["methods"]["grpo"]["update_s"] > 0 and record["evaluation"]["transformers"]["tokens_per_s"] > 0
    from oar.experiment import cost_plan

    hw = cost_plan.calibrate(tmp_path / "work" / "calibration.json", cost_plan.hardware("h100"))
    assert hw.flops > 0 and hw.bytes_per_s > 0 and "calibrated" in hw.name
