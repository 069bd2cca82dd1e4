"""trainer.report_to reaches transformers' Trainer: off by default, TensorBoard (offline) when asked."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from oar.experiment.runs import Registry
from oar.training.run import build_config, train_run
from oar.training.settings import resolve_settings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
TRAINER_KEYS = tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"])
HAS_TENSORBOARD = (importlib.util.find_spec("tensorboard") is not None
                   or importlib.util.find_spec("tensorboardX") is not None)


def settings(tmp_path: Path, model: str = "unused", **trainer) -> dict:
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)}) + "\n"
                                  for i in range(4)))
    return {"run_id": "grpo-report-to", "method": "grpo", "model": model, "train_file": str(train_file),
            "trainer": {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2,
                        "max_completion_length": 4, "save_steps": 1000, **trainer}}


def test_no_tracker_by_default_and_the_configured_ones_otherwise(tmp_path):
    assert build_config(resolve_settings(settings(tmp_path)), tmp_path).report_to == []
    assert build_config(resolve_settings(settings(tmp_path, report_to="tensorboard")),
                        tmp_path).report_to == ["tensorboard"]
    both = build_config(resolve_settings(settings(tmp_path, report_to=["tensorboard", "wandb"])), tmp_path)
    assert both.report_to == ["tensorboard", "wandb"]


def test_the_workflow_config_passes_it_to_every_run():
    validate = pytest.importorskip("snakemake.utils").validate
    config = yaml.safe_load((ROOT / "tests" / "data" / "workflow_tiny.yaml").read_text())
    plain = copy.deepcopy(config)
    validate(plain, str(SCHEMA))
    assert all("report_to" not in run["trainer"] for run in Registry(plain, TRAINER_KEYS).runs.values())
    config["training"]["trainer"]["report_to"] = "tensorboard"
    validate(config, str(SCHEMA))
    runs = Registry(config, TRAINER_KEYS).runs
    assert runs and all(run["trainer"]["report_to"] == "tensorboard" for run in runs.values())


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard is not installed")
def test_tensorboard_writes_event_files_offline(tiny_model_dir, tmp_path):
    train_run(settings(tmp_path, str(tiny_model_dir), report_to="tensorboard"), tmp_path / "run")
    events = list((tmp_path / "run" / "checkpoints" / "runs").rglob("events.out.tfevents.*"))
    assert events and all(path.stat().st_size > 0 for path in events)


@pytest.mark.skipif(HAS_TENSORBOARD, reason="tensorboard is installed")
def test_tensorboard_without_the_package_stops_before_training(tiny_model_dir, tmp_path):
    with pytest.raises(RuntimeError, match="tensorboard"):
        train_run(settings(tmp_path, str(tiny_model_dir), report_to="tensorboard"), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").read_text()
