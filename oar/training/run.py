"""One training run from its resolved settings: dataset, trainer, metrics file, checkpoints, resume.

A run folder (``results/runs/<run_id>/``) holds, when complete:
``model/`` (final model folder), ``metrics.jsonl`` (one line per logged step), ``run.yaml`` (resolved
settings, seed, versions, commit; written by the caller) and ``done`` (written last, by the caller).
``checkpoints/`` holds TRL checkpoints; rerunning the same run resumes from the newest one that reads back
and was saved under the same settings (their fingerprint in its trainer state), and finishes with the same number of
steps; ``metrics.jsonl`` is rebuilt from that checkpoint's
log history so no step is duplicated or lost.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from transformers.trainer_callback import ExportableState

from oar.evaluation.generation import eos_token_ids
from oar.method.metrics import STEP_CREDIT
from oar.prompting import build_prompt, has_chat_template, prompt_messages
from oar.training.grpo_trainer import OARConfig, OARTrainer, correctness_reward
from oar.training.settings import OARSettings, RunSettings, SettingsError, fingerprinted

# TRL log keys -> metrics.jsonl keys (the contract the analysis rules read). Under several processes the
# OAR statistics are over every rank's rows; times and memory are means over ranks, and the *_max keys
# the slowest rank's time and the largest rank's peak (oar.training.grpo_trainer.OARTrainer._log_step_statistics).
METRIC_KEYS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "entropy": "entropy",
    "completions/mean_length": "completion_length",
    "loss": "loss",
    "oar/ess_ratio": "ess_ratio",
    "oar/top_mass": "top_mass",
    "oar/frac_scored": "frac_scored",
    "oar/frac_active": "frac_active",
    "oar/fallback_no_answer": "fallback_no_answer",
    "oar/fallback_nonfinite": "fallback_nonfinite",
    "grading/undecided": "grading_undecided",
    "time/generate_s": "time_generate_s",
    "time/score_s": "time_score_s",
    "time/score_max_s": "time_score_max_s",
    "step_time": "step_time_s",
    "peak_memory_mb": "peak_memory_mb",
    "peak_memory_max_mb": "peak_memory_max_mb",
    "memory/score_peak_mb": "score_peak_memory_mb",
    "memory/score_peak_max_mb": "score_peak_memory_max_mb",
    "learning_rate": "learning_rate",
}
# Written only by runs that log them (oar.log_step_credit): where the step's credit sits among the chain
# task's parsed steps (oar.method.metrics.step_credit_shares).
# With them, the mediator of the step balance's study: weight per last-step decisive token over weight per
# earlier-step decisive token (oar.method.steps.per_token_ratio of the step's mean shares).
STEP_CREDIT_KEYS = {**{f"oar/{name}": name for name in STEP_CREDIT}, "oar/final_to_early_ratio": "final_to_early_ratio"}


def load_problems(path: str | os.PathLike, limit: int | None) -> list[dict[str, str]]:
    """Records ``{id, problem, answer, source}`` of a prepared JSONL file (``oar.data.records``'s format)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SettingsError(f"{path}:{line_number}: invalid JSON ({error.msg})") from None
            for key in ("id", "problem", "answer"):
                if not isinstance(record.get(key), str) or not record[key].strip():
                    raise SettingsError(f"{path}:{line_number}: missing or empty {key!r}")
            records.append(record)
            if limit is not None and len(records) >= limit:
                break
    if not records:
        raise SettingsError(f"{path}: no training problems")
    return records


def training_dataset(records: list[dict[str, str]], tokenizer) -> Dataset:
    """TRL's columns: ``prompt`` (messages for chat models, the plain template otherwise) and ``answer``."""
    chat = has_chat_template(tokenizer)
    return Dataset.from_list(
        [
            {
                "prompt": prompt_messages(r["problem"]) if chat else build_prompt(r["problem"], tokenizer, chat=False),
                "answer": r["answer"],
                "problem_id": r["id"],
            }
            for r in records
        ]
    )


GPU_INSTALL = "make setup-gpu"  # docs/environment.md: the cluster's environment, pyproject's gpu extra


def require_vllm(settings: Mapping[str, Any]) -> None:
    """Stop at once, before any model is loaded, when the settings ask for vLLM and it is not installed."""
    if settings["trainer"]["use_vllm"] and importlib.util.find_spec("vllm") is None:
        raise SettingsError(
            f"settings key 'trainer.use_vllm' is true but vLLM is not installed in this environment "
            f"({sys.prefix}); install the GPU stack with `{GPU_INSTALL}` (docs/environment.md), or set "
            f"trainer.use_vllm: false"
        )


def check_context_length(dataset: Dataset, tokenizer, settings: Mapping[str, Any]) -> None:
    """With ``trainer.vllm_max_model_length`` set, every prompt plus ``max_completion_length`` must fit.

    vLLM rejects a prompt longer than its context and silently cuts a completion where the context
    ends, so a short context would fail or shorten completions mid-run; this fails at start-up instead,
    naming the longest prompt.
    """
    trainer = settings["trainer"]
    context = trainer["vllm_max_model_length"]
    if not trainer["use_vllm"] or context is None:
        return
    longest, where = 0, None
    for row in dataset:
        prompt = row["prompt"]
        if isinstance(prompt, list):  # conversational: rendered as TRL renders it
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
        else:
            ids = tokenizer(prompt)["input_ids"]
        if len(ids) > longest:
            longest, where = len(ids), row["problem_id"]
    if longest + trainer["max_completion_length"] > context:
        raise SettingsError(
            f"settings key 'trainer.vllm_max_model_length' = {context} is too short: problem {where!r} has a "
            f"{longest}-token prompt and 'trainer.max_completion_length' is {trainer['max_completion_length']} "
            f"(needs >= {longest + trainer['max_completion_length']})"
        )


def stop_at_end_of_turn(model, tokenizer) -> list[int]:
    """Make training's generation stop where evaluation's does (:func:`oar.evaluation.generation.eos_token_ids`).

    TRL 1.16 ends a completion at the tokenizer's eos and the model's ``generation_config.eos_token_id``
    (``GRPOTrainer.eos_token_ids``: ``generate``'s stop list, the completion mask and the clipped-ratio
    metric). For a chat-format dataset the template's end-of-turn token is added there; the returned ids
    also go to :func:`build_config` for vLLM, whose engine reads its eos from the model folder instead.
    """
    stops = eos_token_ids(model, tokenizer, chat=has_chat_template(tokenizer))  # as training_dataset
    model.generation_config.eos_token_id = stops
    return stops


def build_config(settings: Mapping[str, Any], checkpoint_dir: Path,
                 stop_token_ids: list[int] | None = None, oar: OARSettings | None = None) -> OARConfig:
    """The trainer's config of a run's resolved settings; ``oar`` is their ``oar`` block where the caller
    has already built it (``train_run``: once a run), else it is built from ``settings``."""
    trainer = dict(settings["trainer"])
    on_gpu = torch.cuda.is_available()
    bf16 = trainer.pop("bf16")
    if trainer["use_vllm"] and stop_token_ids:
        # TRL passes generation_kwargs to vLLM's SamplingParams (colocate and server modes alike).
        trainer["generation_kwargs"] = {"stop_token_ids": list(stop_token_ids)}
    return OARConfig(
        output_dir=str(checkpoint_dir),
        seed=int(settings["seed"]),
        data_seed=int(settings["seed"]),
        # TRL's bf16 defaults to True and fails on CPU: set it from the device.
        bf16=on_gpu if bf16 == "auto" else bool(bf16),
        use_cpu=not on_gpu,
        save_strategy="steps",
        save_only_model=False,
        dataloader_num_workers=0,
        log_completions=False,
        disable_tqdm=False,
        oar_method=settings["method"],
        **OARConfig.oar_fields(OARSettings(**settings["oar"]) if oar is None else oar),
        **trainer,
    )


def metrics_line(log: Mapping[str, Any], step: int) -> dict[str, Any] | None:
    """The metrics.jsonl record of one TRL training log entry (None for non-step entries)."""
    if "reward" not in log:
        return None
    line: dict[str, Any] = {"step": step}
    logged = {**METRIC_KEYS, **{source: target for source, target in STEP_CREDIT_KEYS.items() if source in log}}
    for source, target in logged.items():
        value = log.get(source)
        line[target] = None if value is None or (isinstance(value, float) and value != value) else value
    parts = [line.get(k) for k in ("step_time_s", "time_generate_s", "time_score_s")]
    line["time_update_s"] = None if None in parts else parts[0] - parts[1] - (parts[2] or 0.0)
    return line


class MetricsFile(TrainerCallback):
    """Appends one JSON line per logged training step to ``metrics.jsonl``, flushed at once."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        line = metrics_line(logs, state.global_step)
        if line is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """The resolved settings' SHA-256 (a setting added since at its default left out:
    ``oar.training.settings.fingerprinted``): what a checkpoint was trained under."""
    return hashlib.sha256(json.dumps(fingerprinted(settings), sort_keys=True, default=str).encode()).hexdigest()


class SettingsFingerprint(TrainerCallback, ExportableState):
    """Carries the run's settings fingerprint into every checkpoint's ``trainer_state.json`` (the Trainer
    saves an ExportableState callback's ``state()`` there, in the same write as the step), so that a rerun
    with other settings (Snakemake reruns a run whose settings.yaml changed) never resumes from it."""

    def __init__(self, fingerprint: str):
        self.fingerprint = fingerprint

    def state(self) -> dict:
        return {"args": {"fingerprint": self.fingerprint}, "attributes": {}}


def saved_fingerprint(trainer_state: Mapping[str, Any]) -> str | None:
    stored = trainer_state.get("stateful_callbacks", {}).get(SettingsFingerprint.__name__)
    if isinstance(stored, list):
        stored = stored[0] if stored else None
    return stored.get("args", {}).get("fingerprint") if isinstance(stored, dict) else None


def _torch_file_problem(path: Path) -> str | None:
    """torch.save writes a zip archive whose directory is at its end: a file cut short has none."""
    if not path.is_file() or path.stat().st_size == 0:
        return f"{path.name} is missing or empty"
    return None if zipfile.is_zipfile(path) else f"{path.name} is cut short (no zip directory)"


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors' bytes: its size
    must equal the header's end of data."""
    try:
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        if path.stat().st_size != 8 + header_len + end:
            return f"{path.name} is cut short"
    except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
        return f"{path.name} does not read back ({error.__class__.__name__})"
    return None


def _sharded_problem(folder: Path) -> str | None:
    """A torch.distributed.checkpoint folder (FSDP sharded state) writes its .metadata last."""
    metadata = folder / ".metadata"
    return None if metadata.is_file() and metadata.stat().st_size > 0 else f"{folder.name}/.metadata is missing"


def _weights_problem(checkpoint: Path) -> str | None:
    """The model weights in any layout Trainer.save_model / FSDP write: each present file must read back."""
    found = []
    if (index := checkpoint / "model.safetensors.index.json").exists():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError):
            return f"{index.name} does not read back"
        found += [_safetensors_problem(checkpoint / shard) for shard in shards]
    if (single := checkpoint / "model.safetensors").exists():
        found.append(_safetensors_problem(single))
    # pytorch_model.bin; FSDP's full (pytorch_model_fsdp.bin), local (*_rank<i>.bin) and sharded (folders)
    found += [_torch_file_problem(path) for path in sorted(checkpoint.glob("pytorch_model*.bin"))]
    found += [_sharded_problem(folder) for folder in checkpoint.glob("pytorch_model_fsdp_*") if folder.is_dir()]
    if not found:
        return "no model weights"
    return next((problem for problem in found if problem), None)


def _optimizer_problem(checkpoint: Path) -> str | None:
    """optimizer.pt; FSDP's full (optimizer.bin), local (*_rank<i>.bin) and sharded (folders); the scheduler."""
    problems = [_torch_file_problem(path) for path in sorted(checkpoint.glob("optimizer*.bin"))]
    problems += [_sharded_problem(folder) for folder in checkpoint.glob("optimizer_*") if folder.is_dir()]
    if (checkpoint / "optimizer.pt").exists() or not problems:
        problems.append(_torch_file_problem(checkpoint / "optimizer.pt"))
    problems.append(_torch_file_problem(checkpoint / "scheduler.pt"))
    return next((problem for problem in problems if problem), None)


def checkpoint_problem(checkpoint: Path, world_size: int, fingerprint: str | None = None) -> str | None:
    """Why a checkpoint cannot be resumed from, or None when everything resume reads reads back.

    The Trainer writes weights, optimizer and scheduler, each process's random state, then
    ``trainer_state.json`` (in place, no write-then-rename), so a kill can leave any of them cut short;
    and under several processes rank 0 may write the trainer state before another rank's random state.
    Resuming from such a checkpoint either fails (``trainer_state.json``, weights) or silently breaks
    reproducibility (a missing random state is only logged by the Trainer)."""
    match = re.fullmatch(r"checkpoint-(\d+)", checkpoint.name)
    if not match:
        return "not a checkpoint folder name"
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError) as error:
        return f"trainer_state.json does not read back ({error.__class__.__name__})"
    if not isinstance(state, dict) or state.get("global_step") != int(match.group(1)):
        return "trainer_state.json does not hold this checkpoint's global_step"
    if fingerprint is not None and saved_fingerprint(state) != fingerprint:
        return "saved under other settings (the settings changed since; a checkpoint carries their fingerprint)"
    rng_files = ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{rank}.pth" for rank in range(world_size)]
    problems = [_weights_problem(checkpoint), _optimizer_problem(checkpoint)]
    problems += [_torch_file_problem(checkpoint / name) for name in rng_files]
    return next((problem for problem in problems if problem), None)


def readable_checkpoints(checkpoint_dir: Path, world_size: int,
                         fingerprint: str | None = None) -> tuple[list[Path], dict[Path, str]]:
    """(checkpoints that read back, oldest first; every other checkpoint folder with why it does not).
    With ``fingerprint``, a checkpoint saved under other settings does not count as readable.

    Every process reaches the same verdicts: they read the same files, and removing a bad checkpoint
    (rank 0) can only make it worse."""
    found, bad = [], {}
    for path in checkpoint_dir.glob("checkpoint-*"):
        problem = checkpoint_problem(path, world_size, fingerprint)
        if problem is None:
            found.append((int(path.name.split("-")[1]), path))
        elif re.fullmatch(r"checkpoint-\d+", path.name):
            bad[path] = problem
    return [path for _, path in sorted(found)], bad


def rebuild_metrics(metrics_path: Path, checkpoint: Path | None) -> None:
    """Rewrite metrics.jsonl from a checkpoint's log history (empty when starting from scratch)."""
    lines = []
    if checkpoint is not None:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        for entry in state.get("log_history", []):
            line = metrics_line(entry, int(entry.get("step", 0)))
            if line is not None:
                lines.append(json.dumps(line) + "\n")
    metrics_path.write_text("".join(lines), encoding="utf-8")


def train_run(settings: Mapping[str, Any] | RunSettings, out_dir: str | os.PathLike) -> Path:
    """Train one run into ``out_dir`` (resuming if it has checkpoints); returns the final model folder.

    ``settings``: the run's settings, a mapping resolved here, or a ``RunSettings`` its caller resolved
    (``workflow_scripts/train.py``): they are resolved once a run."""
    run = settings if isinstance(settings, RunSettings) else RunSettings.of(settings)
    settings = asdict(run)  # what resolve_settings gives: the mapping the checkpoints' fingerprint is of
    require_vllm(settings)
    out = Path(out_dir)
    checkpoint_dir = out / "checkpoints"
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"

    # A checkpoint cut off mid-save (a kill, preemption, a node failure) or saved under other settings is
    # never resumed from: the newest one that reads back and was trained under these settings is, and the
    # others are removed (they would also block later reruns).
    fingerprint = settings_fingerprint(settings)
    readable, unreadable = readable_checkpoints(checkpoint_dir, world_size(), fingerprint)
    resume = readable[-1] if readable else None
    if is_main_process():
        for path, problem in sorted(unreadable.items()):
            print(f"removing checkpoint {path}: {problem}", flush=True)
            shutil.rmtree(path)
        rebuild_metrics(metrics_path, resume)
        if resume is not None:
            print(f"resuming {settings['run_id']} from {resume}", flush=True)

    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=getattr(torch, settings["model_dtype"]))
    dataset = training_dataset(load_problems(settings["train_file"], settings["train_limit"]), tokenizer)
    check_context_length(dataset, tokenizer, settings)
    config = build_config(settings, checkpoint_dir, stop_at_end_of_turn(model, tokenizer), oar=run.oar)
    trainer = OARTrainer(
        model=model,
        reward_funcs=correctness_reward(bool(settings["oar"]["fallback_last_number"]),
                                        answer_statement=bool(settings["oar"]["answer_statement"])),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[MetricsFile(metrics_path), SettingsFingerprint(fingerprint)],
    )
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    # transformers stops "at step 0" with a warning when one step's batch needs more problems than the
    # training set has; a run that trained fewer steps than asked must not look finished
    steps, wanted = trainer.state.global_step, config.max_steps
    if steps < wanted:
        raise SettingsError(
            f"run {settings['run_id']}: trained {steps} of trainer.max_steps {wanted} steps: the training set "
            f"({len(dataset)} problems, train_limit {settings['train_limit']}) ran out before one step's batch "
            f"(trainer.per_device_train_batch_size {config.per_device_train_batch_size} x "
            f"trainer.gradient_accumulation_steps {config.gradient_accumulation_steps} completions per process, "
            f"{config.num_generations} per problem); use more problems or a smaller batch"
        )

    final = out / "model"
    staging = out / ".model.partial"
    if is_main_process():
        shutil.rmtree(staging, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(staging))  # collective under FSDP/DeepSpeed: every rank calls it
    if is_main_process():
        tokenizer.save_pretrained(str(staging))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
    trainer.accelerator.wait_for_everyone()
    return final


def weights_delta(base_dir: str | os.PathLike, trained_dir: str | os.PathLike) -> dict[str, Any]:
    """How far a trained model folder's weights moved from its base model folder's.

    Compares every tensor of the ``*.safetensors`` files by name (in float64, one tensor at a time, so
    memory stays at one tensor): ``tensors_changed`` counts tensors with any element changed;
    ``rel_l2`` is ||trained - base|| / ||base|| over all shared tensors. A run whose every advantage was
    zero ends with ``tensors_changed == 0``: it trained nothing.
    """
    from safetensors import safe_open

    def tensors(folder: Path) -> dict[str, Path]:
        found = {}
        for file in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                found.update({name: file for name in handle.keys()})
        if not found:
            raise FileNotFoundError(f"{folder}: no *.safetensors weights")
        return found

    base, trained = tensors(Path(base_dir)), tensors(Path(trained_dir))
    shared = sorted(set(base) & set(trained))
    changed, diff_sq, base_sq, max_abs = 0, 0.0, 0.0, 0.0
    for name in shared:
        with safe_open(str(base[name]), framework="pt") as b, safe_open(str(trained[name]), framework="pt") as t:
            before, after = b.get_tensor(name).double(), t.get_tensor(name).double()
        delta = after - before
        if delta.any():
            changed += 1
            max_abs = max(max_abs, delta.abs().max().item())
        diff_sq += delta.pow(2).sum().item()
        base_sq += before.pow(2).sum().item()
    return {
        "tensors": len(shared),
        "tensors_changed": changed,
        "max_abs_delta": max_abs,
        "rel_l2_delta": (diff_sq ** 0.5) / (base_sq ** 0.5) if base_sq > 0 else float("nan"),
        "only_in_base": len(set(base) - set(trained)),
        "only_in_trained": len(set(trained) - set(base)),
    }


def world_size() -> int:
    """Processes of this run under ``accelerate launch`` / ``torchrun`` (which set WORLD_SIZE), else 1."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 under ``accelerate launch`` / ``torchrun`` (which set RANK), or a single process."""
    return int(os.environ.get("RANK", "0")) == 0
