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
    # The engine holds exactly the trained weights (in its own dtype, bf16: TRL leaves vLLM's dtype on auto)...
    assert result["weight_mismatch"] == 0.0, result["engine_dtype"]
    # ...and generates with them: log-probabilities within bf16 rounding of the trained model's, far from
    # the untrained model's, and the same greedy tokens.
    assert result["max_logprob_diff_trained"] < 0.02
    assert result["max_logprob_diff_untrained"] > 10 * result["max_logprob_diff_trained"]
    assert result["greedy_same"] == result["prompts"]
