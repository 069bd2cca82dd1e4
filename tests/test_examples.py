"""The examples a TRL user starts from run as written (examples/): OAR in a TRL script, and a scorer of
one's own registered and trained with, on the tiny model, as scripts in a process of their own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(script: str, tiny_model_dir: Path, out: Path, *extra: str, python: str = sys.executable,
                cwd: Path | None = None) -> str:
    proc = subprocess.run([python, str(ROOT / "examples" / script), "--model", str(tiny_model_dir),
                           "--max-steps", "2", "--output-dir", str(out), *extra],
                          capture_output=True, text=True, timeout=600, cwd=cwd or out.parent,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(out.parent), "HF_HUB_OFFLINE": "1",
                               "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def step_metrics(stdout: str) -> list[dict]:
    """The example's line a step: reward, the share of responses scored, the weights' ESS ratio."""
    return [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{'step'")]


def scored_and_reshaped(steps: list[dict]) -> bool:
    """Some step scored responses and gave them weights other than 1 (ESS ratio below 1)."""
    return any(s["oar/frac_scored"] and s["oar/ess_ratio"] is not None and 0 < s["oar/ess_ratio"] < 1 for s in steps)


@pytest.mark.parametrize("script, method", [("train_with_trl.py", "oar_g"), ("own_scorer.py", "surprise")])
def test_the_example_trains_and_writes_oars_model_card(tiny_model_dir, tmp_path, script, method):
    out = tmp_path / "out"
    steps = step_metrics(run_example(script, tiny_model_dir, out))
    assert [s["step"] for s in steps] == [1, 2] and scored_and_reshaped(steps), steps
    card = (out / "README.md").read_text()
    assert f"**Method: `{method}`**" in card and "2601.07408" in card
    assert (out / "model.safetensors").exists()


@pytest.mark.timeout(1200)
def test_the_shipped_policy_example_learns_the_chain_task_from_the_checked_file(tmp_path):
    """The shipped chain_f1 on the testbed's chains with the grader's reward: groups differ (a reward strictly
    between 0 and 1), OAR scores and reshapes them, and the policy it trained from is the shipped file."""
    from oar.models import frozen

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "train_from_shipped_policy.py"), "--max-steps", "2",
                           "--prompts-per-step", "4", "--output-dir", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
                               "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    steps = step_metrics(proc.stdout)
    assert [s["step"] for s in steps] == [1, 2] and scored_and_reshaped(steps), steps
    assert all(0 < s["reward"] < 1 for s in steps), steps
    assert frozen.sha256_file(out / "policy" / "model.safetensors") == frozen.weights_sha256("chain_f1")
    assert "**Method: `oar_g`**" in (out / "README.md").read_text()


def test_the_examples_are_a_few_dozen_lines():
    for script in ("train_with_trl.py", "own_scorer.py", "train_from_shipped_policy.py"):
        lines = (ROOT / "examples" / script).read_text().splitlines()
        assert len(lines) <= 80, (script, len(lines))


def test_oartrainers_docstring_example_trains(tiny_model_dir, tmp_path, monkeypatch):
    """The `Example:` of OARTrainer's docstring, as written, on the tiny model for one short step."""
    import inspect
    import re

    from oar.training.grpo_trainer import OARTrainer

    example = re.search(r"Example:\n\n```python\n(.*?)```", inspect.getdoc(OARTrainer), re.S).group(1)
    shown = 'args=OARConfig(output_dir="Qwen2.5-0.5B-OAR", '
    assert '"Qwen/Qwen2.5-0.5B-Instruct"' in example and shown in example
    small = (f'args=OARConfig(output_dir="{tmp_path / "out"}", max_steps=1, per_device_train_batch_size=4, '
             'num_generations=4, max_completion_length=8, use_cpu=True, report_to="none", ')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {}
    exec(example.replace('"Qwen/Qwen2.5-0.5B-Instruct"', repr(str(tiny_model_dir))).replace(shown, small), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 1 and trainer.args.oar_method == "oar_g"
    assert trainer.state.log_history[0]["oar/frac_scored"] is not None
