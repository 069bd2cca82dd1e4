"""``workflow_scripts/evaluate.py --backend vllm`` end to end on a few problems."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]


def test_evaluate_script_runs_the_vllm_backend(vllm_model_dir, problems, tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": f"b/{i}", "problem": p, "answer": str(i)}) + "\n"
                             for i, p in enumerate(problems[:4])))
    out = tmp_path / "eval"
    command = [sys.executable, str(REPO / "workflow_scripts" / "evaluate.py"), "--model", str(vllm_model_dir),
               "--benchmark-file", str(bench), "--out-dir", str(out), "--backend", "vllm", "--dtype", "float32",
               "--max-new-tokens", "16", "--n", "2", "--temperature", "0.6", "--top-p", "0.95", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": str(REPO)},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8 and {s["sample_index"] for s in samples} == {0, 1}
    assert all(0 < s["num_tokens"] <= 16 for s in samples)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_problems"] == 4 and summary["num_samples"] == 8
    config = json.loads((out / "eval_config.json").read_text())
    assert config["backend"] == "vllm"
