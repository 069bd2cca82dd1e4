"""What each kind of workflow job asks the scheduler for, from a validated config's ``resources``.

A job's resources are ``resources.default`` <- ``resources.<kind>`` <- ``models.<name>.resources.<kind>``;
layouts that cannot run are stopped here, naming the key they came from. :class:`JobResources` is held by
:class:`oar.experiment.runs.Registry` as ``resources``; ``rules/common.smk`` turns it into rule resources.
"""

from __future__ import annotations

from collections.abc import Mapping

from oar.experiment.config_error import ConfigError

RESOURCE_KINDS = (
    "prepare_model", "prepare_data", "train", "evaluate", "heldout", "oracle", "score", "analysis", "plot",
)


class JobResources:
    """The scheduler resources of the jobs of a validated workflow config."""

    def __init__(self, config: Mapping):
        self.config = config

    def _models(self) -> list[str]:
        return list(self.config["models"])

    def resource_set(self, kind: str, model: str | None = None) -> dict:
        """Resources of one kind of job: default <- the kind's <- the model's override of the kind."""
        res = self.config["resources"]
        out = dict(res["default"])
        out.update(res.get(kind) or {})
        if model is not None:
            out.update(self.config["models"][model]["resources"].get(kind) or {})
        return out

    def threads_vary_by_model(self, kind: str) -> bool:
        return any("threads" in (self.config["models"][m]["resources"].get(kind) or {}) for m in self._models())

    def resource_key(self, kind: str, model: str | None, key: str) -> str:
        """The config key a job's resource comes from: the model's override, the kind's, or default's."""
        if model is not None and key in (self.config["models"][model]["resources"].get(kind) or {}):
            return f"models.{model}.resources.{kind}.{key}"
        if key in (self.config["resources"].get(kind) or {}):
            return f"resources.{kind}.{key}"
        return f"resources.default.{key}"

    def check_resources(self) -> None:
        """Layouts that cannot run stop here, before anything is submitted: a job on several nodes or
        with per-GPU tasks (train.py or its launcher starts one process per GPU on one node), or a request
        beyond what `resources.limits` says one node and the partition can give."""
        limits = self.config["resources"].get("limits") or {}
        for kind in RESOURCE_KINDS:
            for model in [None, *self._models()]:
                res = self.resource_set(kind, model)
                if res.get("nodes", 1) != 1:
                    raise ConfigError(self.resource_key(kind, model, "nodes"),
                                      f"{res['nodes']}: a job runs on one node (its GPUs share one process group)")
                if kind != "train" and "retries" in res:
                    raise ConfigError(self.resource_key(kind, model, "retries"),
                                      "only train jobs take their own retries (the others: the profile's)")
                for key, most in (("tasks", 1), ("tasks_per_node", 1), ("tasks_per_gpu", 0)):
                    if not isinstance(res.get(key, 0), int) or res.get(key, 0) > most:
                        raise ConfigError(self.resource_key(kind, model, key),
                                          f"{res[key]}: a job is one task (its launcher starts the per-GPU processes)")
                for key, limit in limits.items():
                    if key in res and res[key] > limit:
                        hint = (" (a training run longer than that resumes from its checkpoint on its next"
                                " attempt: set `retries`)" if key == "runtime" else "")
                        raise ConfigError(self.resource_key(kind, model, key),
                                          f"{res[key]} is more than resources.limits.{key} = {limit}{hint}")

    def scheduler_resources(self, kind: str, model: str | None = None) -> dict:
        """What a job of one kind asks the scheduler for, the same on every attempt: the config's
        resources (threads and retries aside: Snakemake takes them from the rule) on one node; a GPU job
        as one task (tasks_per_gpu = 0: the SLURM executor then leaves out --ntasks-per-gpu) that gets
        every CPU (--cpus-per-task = threads)."""
        res = {k: v for k, v in self.resource_set(kind, model).items() if k not in ("threads", "retries")}
        res.setdefault("nodes", 1)
        res.setdefault("tasks_per_gpu", 0)
        return res

    def retries(self, kind: str) -> int | None:
        """Retries of a kind of job (the largest any model asks for); None: the profile's --retries."""
        found = [self.resource_set(kind, m).get("retries") for m in [None, *self._models()]]
        found = [r for r in found if r is not None]
        return max(found) if found else None
