"""The run registry: a validated workflow config -> run ids, resolved run settings and the targets.

A run id is ``<model>/<method>[-tau<tau>-beta<beta>][-<probe>][-ratio<ratio>]-seed<seed>``: the settings a
method ignores are left out of its id and set to the defaults in its settings (GRPO ignores tau, beta and
the probe; entropy, position and random ignore the probe; only the dose methods read the ratio), so
identical settings are one run whichever table asks for them. Every downstream file is keyed by the run
id.

The config is the one the Snakefile holds after ``oar.experiment.config_schema.validate`` filled in the
schema's defaults (``config/schema.yaml``). ``rules/common.smk`` builds one :class:`Registry` and turns it
into rule inputs, outputs and wildcards. A registry is made of plain parts: the cross-key checks run on it
at construction (``oar.experiment.config_checks``), its jobs' scheduler resources (``resources``,
``oar.experiment.job_resources``) and command-line options (``jobs``, ``oar.experiment.job_options``). No
module of these imports Snakemake, so the logic is tested directly (``tests/test_registry.py``).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping

import yaml

from oar.experiment.config_checks import GROUPS, check_config
from oar.experiment.config_schema import trainer_keys as schema_trainer_keys
from oar.experiment.job_options import JobOptions
from oar.experiment.job_resources import JobResources
from oar.experiment.tables import GROUP_TABLES, tables
from oar.files import atomic_write_text
from oar.method.names import TRUTH_GATES, is_gated, run_name, uses_probe
from oar.method.scorer_config import SCORER_SETTINGS, ScorerConfig
from oar.method.weight_transforms import reading
from oar.studies.catalogue import STUDIES
from oar.training.settings import OARSettings, written_at_default

OAR_DEFAULTS = {name: getattr(OARSettings, name) for name in OARSettings.__dataclass_fields__}
BASE = "base"  # run id "<model>/base": the untrained base model (evaluated, never trained)


def deep_merge(base: Mapping | None, override: Mapping | None) -> dict:
    """``base`` with ``override`` merged in recursively (neither is modified)."""
    out = copy.deepcopy(dict(base or {}))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fmt_float(x: float) -> str:
    """2 -> '2.0', 0.4 -> '0.4': the spelling of tau and beta in run ids."""
    return repr(float(x))


def model_of(run: str) -> str:
    return run.split("/", 1)[0]


def is_base(run: str) -> bool:
    return run.rsplit("/", 1)[-1] == BASE


def write_settings(path: str, settings: Mapping) -> None:
    """One run's resolved settings as YAML (train.py --settings), written atomically."""
    atomic_write_text(path, yaml.safe_dump(dict(settings), sort_keys=False))


class Registry:
    """Run ids, settings, evaluations, tables and figures of one validated config; its jobs' scheduler
    resources (``resources``, a :class:`JobResources`) and command-line options (``jobs``, a
    :class:`JobOptions`).

    ``trainer_keys`` are the keys a ``trainer`` section may hold; by default the schema's
    (``$defs.trainer``, :func:`oar.experiment.config_schema.trainer_keys`).
    Construction checks what the schema cannot express (``oar.experiment.config_checks``, each registered
    study's checks among them) and raises :class:`ConfigError` naming the key.

    Each registered study (``oar.studies``) may plan the runs instead of the declared ones (an interim
    look's seeds: ``config`` is then the config with those runs, ``declared_config`` the one given) and
    keeps its design as an attribute named after it (``primary``, ``upper_bound``, ``mechanism``,
    ``dose_response``; None when the config does not declare it). ``tables`` are the declared tables
    (``oar.experiment.tables``, the studies') that this config makes.
    """

    def __init__(self, config: Mapping, trainer_keys: Iterable[str] | None = None):
        self.config = self.declared_config = config
        self.results = config["results"]
        self.trainer_keys = tuple(schema_trainer_keys() if trainer_keys is None else trainer_keys)
        self.resources = JobResources(config)
        self.jobs = JobOptions(config, self.data_file, self.grading)
        check_config(self)
        for study in STUDIES.values():
            planned = study.plan(self)
            if planned:
                self.config = config = deep_merge(config, {"runs": planned})
        self.runs, self.groups = self._build()
        self.benchmarks = list(config["evaluation"]["benchmarks"])
        analysis = config["analysis"]
        self.recall, self.fidelity, self.heatmap = analysis["recall"], analysis["fidelity"], analysis["heatmap"]
        self.paired = dict(analysis["paired"])
        if self.paired["benchmark"] is None:
            self.paired["benchmark"] = self.group_benchmarks("main")[0]
        for study in STUDIES.values():
            if study.design is not None:
                setattr(self, study.name, study.design(self))
        # cost and training curves compare GRPO, OAR and the controls when the controls are trained
        self.cost_group = "controls" if self.groups["controls"] else "main"
        self.tables = [name for name, table in tables().items() if table.made(self)]
        self.figures = self._enabled_figures()

    # ------------------------------------------------------------------------------- paths

    def model_names(self) -> list[str]:
        return list(self.config["models"])

    def model_dir(self, name: str) -> str:
        return f"{self.results}/models/{name}"

    def fetch_files(self, name: str) -> list[str]:
        """The fetch_model summary a model's preparation waits for: one for a hub id, none otherwise
        (packaged, tiny and a local folder need no network)."""
        source = self.config["models"][name]["source"]
        if source in ("packaged", "tiny", "chain") or os.path.isdir(source):
            return []
        return [f"{self.results}/models/{name}.fetched.json"]

    def frozen_policy(self, name: str) -> str | None:
        """The shipped policy a model is (``models.<name>.frozen.policy``), or None when it is prepared
        from its source."""
        return (self.config["models"][name].get("frozen") or {}).get("policy")

    def pretrain_settings(self, name: str) -> str | None:
        """JSON of a ``chain`` model's pretraining settings (None for other sources). Its check samples
        like training does: the model's trainer temperature and group size unless set."""
        spec = self.config["models"][name]
        if spec["source"] != "chain":
            return None
        trainer = self.trainer_settings(name)
        settings = {"check_temperature": trainer["temperature"], "check_group": trainer["num_generations"],
                    **(spec.get("pretrain") or {})}
        return json.dumps(settings, sort_keys=True)

    def graded_equals_truth(self, model: str, method: str) -> bool:
        """Whether ``method`` is the graded truth gate on a chain policy that writes no words that cannot
        change the answer (no remarks, no notes): its weights then equal the truth gate's, so the run
        would be the truth gate's run twice and is not planned (the tables say so)."""
        level = self.distractor_level(model) if method == "truth_graded" else None
        return level is not None and not any(level.values())

    def distractor_level(self, model: str) -> dict | None:
        """A chain policy's reward-irrelevant text per step (``filler`` remarks, ``distractors`` words a
        note); None for other sources."""
        spec = self.config["models"][model]
        if spec["source"] != "chain":
            return None
        pretrain = spec.get("pretrain") or {}
        return {"filler": int(pretrain.get("filler", 0)), "distractors": int(pretrain.get("distractors", 0))}

    def data_file(self, name: str) -> str:
        return f"{self.results}/data/{name}.jsonl"

    def score_file(self, scorer: str, probe: str) -> str:
        return f"{self.results}/analysis/heldout/scores/{scorer}-{probe}.jsonl"

    def has_ground_truth(self) -> bool:
        """Whether the held-out responses can be parsed for their decisive tokens (the chain task)."""
        from oar.data.catalogue import chain_steps

        return chain_steps(self.config["analysis"]["heldout"]["dataset"]) is not None

    def analysis_model(self) -> str:
        return self.config["analysis"]["model"] or self.model_names()[0]

    # ------------------------------------------------------------------------ run settings

    def trainer_settings(self, model: str) -> dict:
        return deep_merge(self.config["training"]["trainer"], self.config["models"][model]["trainer"])

    def oar_settings(self, model: str) -> dict:
        """training.oar with the model's own ``oar`` overrides (e.g. chunk_tokens sized to its memory)."""
        return deep_merge(self.config["training"]["oar"], self.config["models"][model]["oar"])

    def scorer_options(self) -> dict:
        """The held-out scoring script's scorer settings from ``training.oar`` (one option per
        ``ScorerConfig`` field but the probe, which the job's wildcard gives); a setting added after scores
        were made is passed only off its default, so that their jobs are not rerun."""
        oar = self.config["training"]["oar"]
        defaults = ScorerConfig()
        return {name: oar[name] for name in SCORER_SETTINGS if name != "probe" and name in oar
                and (written_at_default(name) or oar[name] != getattr(defaults, name))}

    def grading(self) -> dict:
        """The grader's fallbacks after the last \\boxed{} (schema ``grading``), as oar.grading's arguments."""
        grading = self.config.get("grading") or {}
        return {"answer_statement": bool(grading.get("answer_statement", True)),
                "fallback_last_number": bool(grading.get("last_number", True))}

    def _dosed(self, model: str, method: str, ratio) -> tuple[str, float | None]:
        """(method, ratio) as the run they make: the ratio of a dose method (training.oar.final_step_ratio
        when not given), None for every other method. A dose of the truth gate at ratio 1 is the truth
        gate: its decisive tokens already share one weight, which oar.method.interventions.set_to_ratio
        returns unchanged, so that level is the truth gate's run."""
        doses = reading("final_step_ratio")  # the interventions that take a ratio -> the scorer each doses
        if method not in doses:
            return method, None
        ratio = float(self.oar_settings(model)["final_step_ratio"] if ratio is None else ratio)
        if ratio == 1.0 and doses[method] == "truth":
            return "truth", None
        return method, ratio

    def run_id(self, model: str, method: str, seed: int, tau=None, beta=None, probe=None, ratio=None) -> str:
        method, ratio = self._dosed(model, method, ratio)
        oar = self.oar_settings(model)
        parts = [run_name(method)]
        if is_gated(method):
            tau = oar["tau"] if tau is None else tau
            beta = oar["beta"] if beta is None else beta
            parts.append(f"tau{fmt_float(tau)}-beta{fmt_float(beta)}")
        if uses_probe(method):
            parts.append(oar["probe"] if probe is None else probe)
        if ratio is not None:
            parts.append(f"ratio{fmt_float(ratio)}")
        parts.append(f"seed{seed}")
        return f"{model}/{'-'.join(parts)}"

    def run_settings(self, model: str, method: str, seed: int, tau=None, beta=None, probe=None, ratio=None) -> dict:
        """Fully resolved settings of one run (what workflow_scripts/train.py reads)."""
        config = self.config
        method, ratio = self._dosed(model, method, ratio)
        oar = self.oar_settings(model)
        if is_gated(method):
            oar["tau"] = float(oar["tau"] if tau is None else tau)
            oar["beta"] = float(oar["beta"] if beta is None else beta)
        if uses_probe(method) and probe is not None:
            oar["probe"] = probe
        oar.update(self.grading())  # rewards and probes grade as evaluation does
        for name in list(oar):
            if name in OAR_DEFAULTS and not written_at_default(name) and oar[name] == OAR_DEFAULTS[name]:
                # a setting added after runs were made (oar.method.scorer_config.setting's `written`), at its
                # default: left out so that those runs keep their settings, and Snakemake does not retrain them
                del oar[name]
        # only a dose reads the ratio: left out of every other run's settings, which stay as they were
        oar.pop("final_step_ratio", None)
        if ratio is not None:
            oar["final_step_ratio"] = ratio
        return {
            "run_id": self.run_id(model, method, seed, tau, beta, probe, ratio),
            "method": method,
            "seed": int(seed),
            "model": self.model_dir(model),
            "train_file": self.data_file(config["training"]["dataset"]),
            "train_limit": config["training"]["limit"],
            "model_dtype": config["models"][model].get("model_dtype") or config["training"]["model_dtype"],
            "oar": oar,
            "trainer": self.trainer_settings(model),
        }

    def group_models(self, spec: Mapping) -> list[str]:
        """The models a group of runs trains: its own ``models``, else every model."""
        return spec.get("models") or self.model_names()

    def group_seeds(self, spec: Mapping) -> list[int]:
        """The seeds a group of runs trains: its own ``seeds``, else ``runs.seeds``."""
        return spec.get("seeds") or self.config["runs"]["seeds"]

    def _expand_group(self, group: str) -> list[dict]:
        """Run settings (in a stable order) that one registry group declares."""
        spec = self.config["runs"][group]
        out = []
        for model in self.group_models(spec):
            default_tau = float(self.oar_settings(model)["tau"])
            for seed in self.group_seeds(spec):
                if group in ("main", "controls"):
                    out += [self.run_settings(model, m, seed) for m in spec["methods"]
                            if not self.graded_equals_truth(model, m)]
                elif group == "gating":
                    # the training tau is the bi-level arm beside boost-only and suppress-only
                    taus = sorted({float(t) for t in spec["taus"]} | {default_tau})
                    out += [self.run_settings(model, m, seed, tau=t) for m in spec["methods"] for t in taus]
                elif group == "grid":
                    out += [
                        self.run_settings(model, m, seed, tau=t, beta=b)
                        for m in spec["methods"] for t in spec["taus"] for b in spec["betas"]
                    ]
                elif group == "probes":
                    out += [self.run_settings(model, m, seed, probe=p) for m in spec["methods"] for p in spec["probes"]]
                elif group == "dose":
                    out += [self.run_settings(model, m, seed, ratio=r) for m in spec.get("methods") or []
                            for r in spec.get("ratios") or []]
        return out

    def _build(self) -> tuple[dict[str, dict], dict[str, list[str]]]:
        runs: dict[str, dict] = {}
        groups: dict[str, list[str]] = {}
        for group in GROUPS:
            settings = self._expand_group(group)
            if group == "controls" and settings:
                # the controls table compares against GRPO and the main OAR runs
                settings = self._expand_group("main") + settings
            if group in ("gating", "grid", "probes") and settings:
                # every ablation table has GRPO as its reference row
                spec = self.config["runs"][group]
                settings = [
                    self.run_settings(model, "grpo", seed)
                    for model in self.group_models(spec) for seed in self.group_seeds(spec)
                ] + settings
            ids: list[str] = []
            for s in settings:
                if s["run_id"] in runs and runs[s["run_id"]] != s:
                    raise RuntimeError(f"run id {s['run_id']} names two different settings "
                                       f"(a bug in oar.experiment.runs)")
                runs[s["run_id"]] = s
                if s["run_id"] not in ids:
                    ids.append(s["run_id"])
            groups[group] = ids
        return runs, groups

    def run_meta(self, runs: Iterable[str]) -> dict[str, dict]:
        """What tables need to know of each run: model, method, tau, beta, probe, seed."""
        meta = {}
        for run in runs:
            if is_base(run):
                meta[run] = {"model": model_of(run), "method": "base"}
                continue
            s = self.runs[run]
            meta[run] = {
                "model": model_of(run),
                "method": s["method"],
                "tau": s["oar"]["tau"] if is_gated(s["method"]) else None,
                "beta": s["oar"]["beta"] if is_gated(s["method"]) else None,
                "probe": s["oar"]["probe"] if uses_probe(s["method"]) else None,
                "seed": s["seed"],
            }
        return meta

    # -------------------------------------------------------------------------- evaluation

    def eval_runs(self, group: str | None = None) -> list[str]:
        """Run ids evaluated for a group (None: every run), each model's base first."""
        ids = list(self.runs) if group is None else self.groups[group]
        names = self.model_names()
        models = sorted({model_of(r) for r in ids}, key=names.index)
        return [f"{m}/{BASE}" for m in models] + ids

    def group_benchmarks(self, group: str) -> list[str]:
        """Benchmarks a group's runs are evaluated on: its own ``benchmarks``, else every benchmark (an
        ablation can be compared on the in-distribution split alone, which is what it changes)."""
        return list(self.config["runs"][group].get("benchmarks") or self.benchmarks)

    def table_benchmarks(self, table: str) -> list[str]:
        return self.group_benchmarks(GROUP_TABLES[table]) if table in GROUP_TABLES else list(self.benchmarks)

    def summaries(self, runs: Iterable[str], benchmarks: Iterable[str] | None = None) -> list[str]:
        benches = list(self.benchmarks if benchmarks is None else benchmarks)
        return [f"{self.results}/eval/{run}/{bench}/summary.json" for run in runs for bench in benches]

    def metrics_files(self, runs: Iterable[str]) -> list[str]:
        return [f"{self.results}/runs/{run}/metrics.jsonl" for run in runs if not is_base(run)]

    # ------------------------------------------------------------------- tables and figures

    def has_paired(self) -> bool:
        """Whether runs.main pairs other methods with the baseline over 2 or more seeds."""
        main = [self.runs[r] for r in self.groups["main"]]
        seeds = {s["seed"] for s in main if s["method"] == self.paired["baseline"]}
        return len(seeds) >= 2 and any(s["method"] != self.paired["baseline"] for s in main)

    def comparisons_not_run(self) -> list[str]:
        """The comparison tests whose group this config does not run (the tables print them as not run):
        the gating ablation's bi-level gate against boost-only, the grid's trend over strength."""
        tests = (("bi-level gate minus boost-only (runs.gating)", "gating"),
                 ("trend over reshaping strength (runs.grid)", "grid"))
        return [name for name, group in tests if not self.groups[group]]

    def model_labels(self) -> dict[str, str]:
        """Axis labels of models: a chain model's filler setting, else its name."""
        out = {}
        for name, spec in self.config["models"].items():
            pretrain = spec.get("pretrain") or {}
            out[name] = f"{name}\nfiller {pretrain.get('filler', 0)}" if spec["source"] == "chain" else name
        return out

    def is_length_sweep(self) -> bool:
        """runs.main holds two or more chain-task policies that differ in their filler setting (the same
        task at several response lengths), not different models."""
        models = self.paired_models()
        specs = [self.config["models"][m] for m in models]
        fillers = {(spec.get("pretrain") or {}).get("filler", 0) for spec in specs}
        return len(models) >= 2 and all(spec["source"] == "chain" for spec in specs) and len(fillers) == len(models)

    def has_truth_gate(self) -> bool:
        """Whether runs.main runs a truth gate beside the baseline (the decisive reading then has an
        upper bound to read the scorers against)."""
        return any(self.runs[r]["method"] in TRUTH_GATES for r in self.groups["main"])

    def distractor_levels(self) -> dict[str, dict]:
        """The main group's chain policies -> their reward-irrelevant text per step (the decisive
        reading's levels)."""
        return {m: self.distractor_level(m) for m in self.paired_models() if self.distractor_level(m) is not None}

    def chain_models(self) -> list[str]:
        """Models pretrained on the chain task (their pretraining check measures the gradient share)."""
        return [m for m in self.model_names() if self.config["models"][m]["source"] == "chain"]

    def paired_models(self) -> list[str]:
        return sorted({model_of(r) for r in self.groups["main"]}, key=self.model_names().index)

    def _enabled_figures(self) -> list[str]:
        names = ["training_curves", "cost_bars"]
        if self.has_paired():
            names.append("main_comparison")
            if self.is_length_sweep():
                names.append("length_sweep")
        if self.groups["grid"]:
            names.append("grid_heatmap")
        if self.recall["scorers"]:
            names.append("recall_bars")
        if self.heatmap["scorers"]:
            names.append("token_heatmap")
        return names

    def logs_step_credit(self) -> bool:
        """Whether every run of the main group logs where its weight goes (``oar.log_step_credit``)."""
        main = self.groups["main"]
        return bool(main) and all(self.runs[r]["oar"].get("log_step_credit") for r in main)

    def table_files(self, *names: str) -> list[str]:
        return [f"{self.results}/tables/{n}.{ext}" for n in names if n in self.tables for ext in ("csv", "md")]

    def figure_files(self, *names: str) -> list[str]:
        return [f"{self.results}/figures/{n}.{ext}" for n in names if n in self.figures for ext in ("png", "pdf")]
