"""Two-process training on CPU: ``accelerate launch --multi_gpu --num_processes 2`` (gloo) runs train.py to
the end. On a machine without GPUs ``--multi_gpu`` only picks accelerate's torchrun launcher; each process
then finds no CUDA and joins a gloo group. (``--cpu`` or no flag at all starts a single process.)

The launched script is train.py itself, wrapped by a recorder that appends, per rank, what that rank
scored (rows, a digest of its completion ids, the world size, its own credit counts) to a file outside
the run folder. The wrapper also swaps the correctness reward (a random model never answers correctly,
so every advantage would be 0) for a deterministic parity of the completion text, so that ranks hold
different numbers of rows with A != 0 and the logged statistics can be checked against both ranks' rows. With
``kill_after=N`` rank 0 SIGKILLs itself right after checkpoint-N is complete on every rank (the
launcher then stops rank 1), so the rerun must resume.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PER_PROCESS_BATCH = 4

RECORDING_WRAPPER = """
import hashlib, json, os, runpy, signal, sys, zlib
import transformers
from oar.training import grpo_trainer, run

record_dir, kill_after = sys.argv[1], int(sys.argv[2])
sys.argv = sys.argv[3:]  # train.py and its arguments, as if it had been launched directly

def parity_reward(*grading, **more_grading):  # the grading settings are irrelevant to a parity reward
    def parity(completions, **kwargs):
        return [float(zlib.crc32(c[-1]["content"].encode()) % 2) for c in completions]
    return parity
run.correctness_reward = parity_reward

seeds = []
scorer = grpo_trainer.score
def seed_recording(*args, **kwargs):
    seeds.append(kwargs["seed"])
    return scorer(*args, **kwargs)
grpo_trainer.score = seed_recording

score = grpo_trainer.OARTrainer._token_weights
def recording(self, output):
    weights, counts = score(self, output)
    ids = output["completion_ids"].tolist()
    line = {"step": self.state.global_step, "world": self.accelerator.num_processes, "rows": len(ids),
            "completions": hashlib.sha1(repr(ids).encode()).hexdigest(), "counts": counts, "seed": seeds.pop()}
    with open(os.path.join(record_dir, f"rank{self.accelerator.process_index}.jsonl"), "a") as handle:
        handle.write(json.dumps(line) + "\\n")
    return weights, counts
grpo_trainer.OARTrainer._token_weights = recording

save = transformers.Trainer._save_checkpoint
def save_then_die(self, *args, **kwargs):
    save(self, *args, **kwargs)
    if self.state.global_step == kill_after:
        self.accelerator.wait_for_everyone()  # every rank's part of the checkpoint is on disk
        if self.accelerator.is_main_process:
            os.kill(os.getpid(), signal.SIGKILL)
transformers.Trainer._save_checkpoint = save_then_die
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def launch(tmp_path, settings, out, record_dir, kill_after=0):
    wrapper = tmp_path / "recording_train.py"
    wrapper.write_text(RECORDING_WRAPPER)
    accelerate = Path(sys.executable).with_name("accelerate")
    command = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
               str(wrapper), str(record_dir), str(kill_after),
               str(REPO / "workflow_scripts" / "train.py"), "--settings", str(settings), "--out-dir", str(out)]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)


def records(record_dir):
    return {rank: [json.loads(line) for line in (record_dir / f"rank{rank}.jsonl").read_text().splitlines()]
            for rank in (0, 1)}


def test_two_processes_train_oar_g_to_the_end_and_resume(tiny_model_dir, tmp_path):
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)}) + "\n"
                                  for i in range(8)))
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({
        "run_id": "oar_g-two-processes", "method": "oar_g", "model": str(tiny_model_dir),
        "train_file": str(train_file), "oar": {"score_all": True},
        "trainer": {"max_steps": 4, "save_steps": 2, "max_completion_length": 8, "num_generations": 2,
                    "per_device_train_batch_size": PER_PROCESS_BATCH},
    }))
    out = tmp_path / "run"

    # First launch: killed right after checkpoint-2.
    first = tmp_path / "first"
    first.mkdir()
    killed = launch(tmp_path, settings, out, first, kill_after=2)
    assert killed.returncode != 0, killed.stdout[-2000:] + killed.stderr[-4000:]
    assert (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").exists(), killed.stderr[-4000:]
    assert not (out / "checkpoints" / "checkpoint-4").exists() and not (out / "done").exists()
    # Each rank scored its own completions: its per-process share, distinct from the other rank's.
    ranks = records(first)
    for rank in (0, 1):
        assert [r["step"] for r in ranks[rank]][:2] == [0, 1]
        assert all(r["world"] == 2 and r["rows"] == PER_PROCESS_BATCH and r["counts"]["scored"] == PER_PROCESS_BATCH
                   for r in ranks[rank])
    assert all(a["completions"] != b["completions"] for a, b in zip(ranks[0], ranks[1]))
    # ...with its own noise: rank 0 the seed a one-process run scores step s with (seed 0: s), rank 1 another
    assert [r["seed"] for r in ranks[0]] == [r["step"] for r in ranks[0]]
    assert [r["seed"] for r in ranks[1]] == [r["step"] + (1 << 20) for r in ranks[1]]
    first_records = ranks

    # Second launch: resumes from checkpoint-2 and trains steps 3 and 4 only.
    second = tmp_path / "second"
    second.mkdir()
    resumed = launch(tmp_path, settings, out, second)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-4000:]
    assert "resuming oar_g-two-processes from" in resumed.stdout + resumed.stderr
    ranks = records(second)
    assert [r["step"] for r in ranks[0]] == [r["step"] for r in ranks[1]] == [2, 3]
    by_step = {r["step"]: (r["counts"], other["counts"])
               for rank0, rank1 in ((first_records[0][:2], first_records[1][:2]), (ranks[0], ranks[1]))
               for r, other in zip(rank0, rank1)}

    # Only rank 0 wrote the run's files: one line per step, nothing duplicated, nothing else in the folder.
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "done", "metrics.jsonl", "model", "run.yaml",
                                                   "weights_delta.json"]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert all(line["frac_scored"] == 1.0 and 0 < line["time_score_s"] <= line["time_score_max_s"] for line in lines)
    assert all(0 < line["peak_memory_mb"] <= line["peak_memory_max_mb"] for line in lines)
    # Each logged statistic is over both ranks' rows (scored at the step before the logged one).
    rank0_alone = []
    for line in lines:
        counts = by_step[line["step"] - 1]
        total = {key: counts[0][key] + counts[1][key] for key in counts[0]}
        assert line["frac_active"] == pytest.approx(total["active"] / total["rows"])
        assert line["fallback_no_answer"] == total["no_answer"]
        for name, key in (("ess_ratio", "ess"), ("top_mass", "top_mass")):
            if total[f"{key}_rows"]:
                assert line[name] == pytest.approx(total[f"{key}_sum"] / total[f"{key}_rows"]), (line, counts)
            else:
                assert line[name] is None
        mine = counts[0]
        rank0_alone.append((mine["active"] / mine["rows"],
                            mine["ess_sum"] / mine["ess_rows"] if mine["ess_rows"] else None))
    # ...which is not what rank 0's rows alone give (so the check above could tell the two apart).
    assert rank0_alone != [(line["frac_active"], line["ess_ratio"]) for line in lines]
    for step in (2, 4):
        checkpoint = out / "checkpoints" / f"checkpoint-{step}"
        assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
        # the model and optimizer once (rank 0), the RNG state of each rank
        assert {"model.safetensors", "optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"} <= {
            p.name for p in checkpoint.iterdir()}
    assert (out / "model" / "model.safetensors").exists() and (out / "model" / "tokenizer.json").exists()
    run = yaml.safe_load((out / "run.yaml").read_text())
    assert run["settings"]["method"] == "oar_g"
    shutil.rmtree(out / "checkpoints")  # the test's tmp folder is kept by pytest; these are the bulk
