"""GRPO and OAR-G steps with vLLM colocated in the trainer, on CPU, and the weight sync checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("method", ["grpo", "oar_g"])
def test_colocated_vllm_trains_and_generates_with_the_trained_weights(method, vllm_model_dir, tmp_path):
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("colocate_step.py")), method,
                           str(vllm_model_dir), str(tmp_path / "run")],
                          capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(REPO)}, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(result)
    assert result["steps"] == [1, 2]
    assert 1 in result["syncs_at_steps"]  # TRL itself synced step 1's update before step 2's generation
    if method == "oar_g":
        assert result["frac_scored"] == [1.0, 1.0]
    # The sync is judged by what the engine computes (on every CPU and on CUDA alike): before the final
    # sync the engine (step 1's weights) and the trained model (step 2's) disagree on fixed sequences;
    # after it they agree within bf16 rounding (TRL leaves vLLM's dtype on auto: bf16 for an fp32 model).
    assert result["engine_dtype"] == "torch.bfloat16"
    assert result["logprob_diff_after_sync"] < 0.02
    assert result["logprob_diff_before_sync"] > 10 * result["logprob_diff_after_sync"]
    assert result["logprob_diff_sampled"] < 0.02  # and generation samples from the synced weights
