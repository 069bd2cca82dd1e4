"""The command-line options of workflow jobs, from a validated config: what becomes a job's flags.

:func:`cli` spells keyword options as shell flags; :class:`JobOptions` (held by
:class:`oar.experiment.runs.Registry` as ``jobs``) gives the options of each kind of job that takes more
than its files: preparing a dataset, evaluating a model on a benchmark, and the training launcher.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

EVAL_KEYS = ("limit", "max_new_tokens", "backend", "batch_size", "dtype", "chat", "seed", "n_boot",
             "gpu_memory_utilization", "enforce_eager", "max_model_len")
VLLM_ONLY_KEYS = ("gpu_memory_utilization", "enforce_eager", "max_model_len")  # left out of transformers command lines


def cli(**options: Any) -> str:
    """'--key value ...' (shell-quoted) from keyword options; None and False are left out, True is a
    bare flag, a list gives several values."""
    out: list[str] = []
    for key, value in options.items():
        opt = f"--{key.replace('_', '-')}"
        if value is None or value is False:
            continue
        if value is True:
            out.append(opt)
        elif isinstance(value, (list, tuple)):
            out += [opt, *map(str, value)]
        else:
            out += [opt, str(value)]
    return " ".join(shlex.quote(x) for x in out)


class JobOptions:
    """Options of the jobs of a validated workflow config. ``data_file`` names a dataset's prepared file
    and ``grading`` gives the grader's fallbacks (the run registry's)."""

    def __init__(self, config: Mapping, data_file: Callable[[str], str], grading: Callable[[], dict]):
        self.config = config
        self.benchmarks = list(config["evaluation"]["benchmarks"])
        self.data_file = data_file
        self.grading = grading

    def eval_settings(self, model: str, benchmark: str) -> dict:
        """Evaluation options of one model on one benchmark: evaluation <- per_benchmark <- model."""
        ev = self.config["evaluation"]
        out = {k: ev[k] for k in EVAL_KEYS if k in ev}
        out.update(ev["per_benchmark"].get(benchmark, {}))
        out.update(self.config["models"][model]["evaluation"])
        grading = self.grading()
        out["no_answer_statement"] = not grading["answer_statement"]  # evaluate.py's flags: False is left out
        out["no_fallback_last_number"] = not grading["fallback_last_number"]
        if out.get("backend") != "vllm":
            out = {k: v for k, v in out.items() if k not in VLLM_ONLY_KEYS}
        return {k: v for k, v in out.items() if v is not None}

    def launcher(self, model: str) -> str:
        """The model's launcher command. `accelerate launch` gets `--main_process_port 0` unless it names
        a port: accelerate then picks a free port, so two multi-GPU jobs on one node do not both take
        29500 (accelerate's default)."""
        launcher = self.config["models"][model]["launcher"]
        words = shlex.split(launcher)
        if words[:2] == ["accelerate", "launch"] and not any(w.startswith("--main_process_port") for w in words):
            launcher += " --main_process_port 0"
        return launcher

    def against(self, dataset: str) -> list[str]:
        """Benchmarks a dataset is checked against for overlap: only the training set is checked."""
        if dataset != self.config["training"]["dataset"]:
            return []
        tests = self.benchmarks + [self.config["analysis"]["heldout"]["dataset"]]
        return [self.data_file(b) for b in dict.fromkeys(tests) if b != dataset]

    def prepare_data_options(self, dataset: str) -> dict:
        """Options of workflow_scripts/prepare_data.py for one dataset (input and output files aside)."""
        spec = self.config["data"][dataset]
        return dict(
            dataset=dataset,
            source=spec.get("source"),  # None: the dataset's default (oar.data.catalogue.default_source)
            path=spec.get("path"),
            fields=spec.get("fields"),
            hub_id=spec.get("hub_id"),
            hub_config=spec.get("hub_config"),
            hub_split=spec.get("hub_split"),
            levels=spec.get("levels"),
            limit=spec.get("limit"),
            shuffle_seed=spec.get("shuffle_seed"),
            skip_bad_rows=spec.get("skip_bad_rows"),
            on_overlap=self.config["training"]["on_overlap"] if dataset == self.config["training"]["dataset"] else None,
        )
