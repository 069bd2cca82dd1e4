# Config helpers and the run registry: config -> run ids -> fully resolved training settings.
#
# A run id is "<model>/<method>[-tau<tau>-beta<beta>][-<probe>]-seed<seed>": the settings a method
# ignores are left out of its id and set to the defaults in its settings (GRPO ignores tau, beta and
# the probe; entropy, position and random ignore the probe), so identical settings are one run
# whichever table asks for them. Every downstream file is keyed by the run id.

import copy
import os

import yaml
from pathlib import Path

from snakemake.exceptions import WorkflowError

R = config["results"]
METHODS = ("grpo", "oar_p", "oar_g", "grad_norm", "entropy", "position", "random")
GATED = METHODS[1:]  # methods whose weights come from the bi-level gate
USES_PROBE = (
    "oar_p",
    "oar_g",
    "grad_norm",
)  # methods whose scores read an outcome probe
BASE = "base"  # run id "<model>/base": the untrained base model
RESOURCE_KINDS = (
    "prepare_model",
    "prepare_data",
    "train",
    "evaluate",
    "heldout",
    "oracle",
    "score",
    "analysis",
    "plot",
)


def config_error(key, message):
    """Stop before any job runs, with one line naming the config key."""
    raise WorkflowError(f"config error at {key}: {message}")


def deep_merge(base, override):
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fmt_float(x):
    """2 -> '2.0', 0.4 -> '0.4': the spelling of tau and beta in run ids."""
    return repr(float(x))


def model_names():
    return list(config["models"])


def model_dir(name):
    return f"{R}/models/{name}"


def data_file(name):
    return f"{R}/data/{name}.jsonl"


def analysis_model():
    return config["analysis"]["model"] or model_names()[0]


# ---------------------------------------------------------------------------------------- checks


def check_config():
    """Cross-key checks that a JSON schema cannot express; each error names its key."""
    models = set(config["models"])
    data = config["data"]
    if config["training"]["dataset"] not in data:
        config_error(
            "training.dataset",
            f"{config['training']['dataset']!r} is not prepared: add it under `data`",
        )
    for b in config["evaluation"]["benchmarks"]:
        if b not in data:
            config_error(
                "evaluation.benchmarks", f"{b!r} is not prepared: add it under `data`"
            )
    for b in config["evaluation"]["per_benchmark"]:
        if b not in config["evaluation"]["benchmarks"]:
            config_error(
                f"evaluation.per_benchmark.{b}",
                "not in evaluation.benchmarks",
            )
    heldout = config["analysis"]["heldout"]["dataset"]
    if heldout not in data:
        config_error(
            "analysis.heldout.dataset",
            f"{heldout!r} is not prepared: add it under `data`",
        )
    if (
        config["analysis"]["model"] is not None
        and config["analysis"]["model"] not in models
    ):
        config_error(
            "analysis.model",
            f"{config['analysis']['model']!r} is not a key of `models`",
        )
    for name, spec in data.items():
        if spec["source"] == "local" and "path" not in spec:
            config_error(f"data.{name}.path", "source 'local' needs a path")
    for group, spec in config["runs"].items():
        if group == "seeds":
            continue
        for m in spec.get("models") or []:
            if m not in models:
                config_error(f"runs.{group}.models", f"{m!r} is not a key of `models`")
    for name in models:
        trainer = trainer_settings(name)
        unknown = set(trainer) - set(TRAINER_KEYS)
        if unknown:
            config_error(
                f"models.{name}.trainer",
                f"unknown keys {sorted(unknown)} (use {TRAINER_KEYS})",
            )
        if trainer["per_device_train_batch_size"] % trainer["num_generations"]:
            where = (
                f"models.{name}.trainer"
                if config["models"][name]["trainer"]
                else "training.trainer"
            )
            config_error(
                f"{where}.per_device_train_batch_size",
                f"{trainer['per_device_train_batch_size']} is not a multiple of "
                f"num_generations = {trainer['num_generations']}",
            )
    analysis = config["analysis"]
    if analysis["fidelity"]["reference"] in analysis["fidelity"]["scorers"]:
        config_error("analysis.fidelity.scorers", "lists the reference scorer itself")


with open(os.path.join(workflow.basedir, "config", "schema.yaml")) as _f:
    TRAINER_KEYS = tuple(yaml.safe_load(_f)["$defs"]["trainer"]["properties"])


def trainer_settings(model):
    return deep_merge(config["training"]["trainer"], config["models"][model]["trainer"])


# -------------------------------------------------------------------------------- run registry


def run_id(model, method, seed, tau=None, beta=None, probe=None):
    oar = config["training"]["oar"]
    parts = [method]
    if method in GATED:
        tau = oar["tau"] if tau is None else tau
        beta = oar["beta"] if beta is None else beta
        parts.append(f"tau{fmt_float(tau)}-beta{fmt_float(beta)}")
    if method in USES_PROBE:
        parts.append(oar["probe"] if probe is None else probe)
    parts.append(f"seed{seed}")
    return f"{model}/{'-'.join(parts)}"


def run_settings(model, method, seed, tau=None, beta=None, probe=None):
    """Fully resolved settings of one run (what workflow_scripts/train.py reads)."""
    oar = copy.deepcopy(config["training"]["oar"])
    if method in GATED:
        oar["tau"] = float(oar["tau"] if tau is None else tau)
        oar["beta"] = float(oar["beta"] if beta is None else beta)
    if method in USES_PROBE and probe is not None:
        oar["probe"] = probe
    return {
        "run_id": run_id(model, method, seed, tau, beta, probe),
        "method": method,
        "seed": int(seed),
        "model": model_dir(model),
        "train_file": data_file(config["training"]["dataset"]),
        "train_limit": config["training"]["limit"],
        "model_dtype": config["models"][model].get("model_dtype")
        or config["training"]["model_dtype"],
        "oar": oar,
        "trainer": trainer_settings(model),
    }


def group_models(spec):
    return spec.get("models") or model_names()


def group_seeds(spec):
    return spec.get("seeds") or config["runs"]["seeds"]


def expand_group(group):
    """Run settings (in a stable order) of one registry group."""
    spec = config["runs"][group]
    oar = config["training"]["oar"]
    out = []
    for model in group_models(spec):
        for seed in group_seeds(spec):
            if group in ("main", "controls"):
                out += [run_settings(model, m, seed) for m in spec["methods"]]
            elif group == "gating":
                taus = sorted({float(t) for t in spec["taus"]} | {float(oar["tau"])})
                out += [
                    run_settings(model, m, seed, tau=t)
                    for m in spec["methods"]
                    for t in taus
                ]
            elif group == "grid":
                out += [
                    run_settings(model, m, seed, tau=t, beta=b)
                    for m in spec["methods"]
                    for t in spec["taus"]
                    for b in spec["betas"]
                ]
            elif group == "probes":
                out += [
                    run_settings(model, m, seed, probe=p)
                    for m in spec["methods"]
                    for p in spec["probes"]
                ]
    return out


def build_registry():
    groups = {}
    runs = {}
    for group in ("main", "gating", "grid", "probes", "controls"):
        settings = expand_group(group)
        if group == "controls" and settings:
            # the controls table compares against GRPO and the main OAR runs
            settings = expand_group("main") + settings
        if group in ("gating", "grid", "probes") and settings:
            # every ablation table has GRPO as its reference row
            settings = [
                run_settings(model, "grpo", seed)
                for model in group_models(config["runs"][group])
                for seed in group_seeds(config["runs"][group])
            ] + settings
        ids = []
        for s in settings:
            if s["run_id"] in runs and runs[s["run_id"]] != s:
                raise WorkflowError(
                    f"run id {s['run_id']} names two different settings (a bug in rules/common.smk)"
                )
            runs[s["run_id"]] = s
            if s["run_id"] not in ids:
                ids.append(s["run_id"])
        groups[group] = ids
    return runs, groups


def model_of(run):
    return run.split("/", 1)[0]


def is_base(run):
    """Run ids "<model>/base" stand for the untrained base model (evaluated, never trained)."""
    return run.rsplit("/", 1)[-1] == BASE


def eval_settings(model, benchmark):
    """Evaluation options of one model on one benchmark: evaluation <- per_benchmark <- model."""
    ev = config["evaluation"]
    keys = (
        "limit",
        "max_new_tokens",
        "backend",
        "batch_size",
        "dtype",
        "chat",
        "seed",
        "n_boot",
    )
    out = {k: ev[k] for k in keys}
    out.update(ev["per_benchmark"].get(benchmark, {}))
    out.update(config["models"][model]["evaluation"])
    return {k: v for k, v in out.items() if v is not None}


def eval_runs(group=None):
    """Run ids evaluated for a group (all groups: every run), plus each model's base."""
    ids = list(RUNS) if group is None else GROUPS[group]
    models = sorted({model_of(r) for r in ids}, key=model_names().index)
    return [f"{m}/base" for m in models] + ids


def summaries(runs):
    return [
        f"{R}/eval/{run}/{bench}/summary.json"
        for run in runs
        for bench in config["evaluation"]["benchmarks"]
    ]


def metrics_files(runs):
    return [f"{R}/runs/{run}/metrics.jsonl" for run in runs if not is_base(run)]


# ------------------------------------------------------------------------------- resources


def resource_set(kind, model=None):
    res = config["resources"]
    out = dict(res["default"])
    out.update(res.get(kind) or {})
    if model is not None:
        out.update((config["models"][model]["resources"].get(kind)) or {})
    return out


def _model_from_wildcards(wildcards):
    run = wildcards.get("run") if hasattr(wildcards, "get") else None
    if run:
        return model_of(run)
    return wildcards.get("model") if hasattr(wildcards, "get") else None


def rule_resources(kind):
    """resources of a rule: gpu, mem_mb (x attempt), runtime and any executor extras from config."""
    keys = [k for k in resource_set(kind) if k != "threads"]
    for m in model_names():
        keys += [k for k in resource_set(kind, m) if k != "threads" and k not in keys]

    def getter(key):
        def get(wildcards, attempt):
            value = resource_set(kind, _model_from_wildcards(wildcards)).get(key)
            if key == "mem_mb" and value is not None:
                return int(value) * attempt
            return value

        return get

    return {k: getter(k) for k in keys}


def rule_threads(kind):
    """Threads from config (the kind's, or the model's override for jobs of one model)."""
    overridden = any(
        "threads" in (config["models"][m]["resources"].get(kind) or {})
        for m in model_names()
    )
    if not overridden:
        return int(resource_set(kind)["threads"])
    return lambda wildcards: int(
        resource_set(kind, _model_from_wildcards(wildcards))["threads"]
    )


# ------------------------------------------------------------------------------- build it

check_config()
RUNS, GROUPS = build_registry()
BENCHMARKS = list(config["evaluation"]["benchmarks"])
EVAL_RUNS = eval_runs()
RECALL = config["analysis"]["recall"]
FIDELITY = config["analysis"]["fidelity"]
HEATMAP = config["analysis"]["heatmap"]


def heldout_score_keys():
    """(scorer, probe) pairs scored on the held-out responses, for recall, fidelity and the heatmap."""
    keys = [(s, RECALL["probe"]) for s in RECALL["scorers"]]
    for p in FIDELITY["probes"]:
        keys += [(s, p) for s in [FIDELITY["reference"], *FIDELITY["scorers"]]]
    keys += [(s, config["training"]["oar"]["probe"]) for s in HEATMAP["scorers"]]
    out = []
    for k in keys:
        if k not in out:
            out.append(k)
    return out


SCORE_KEYS = heldout_score_keys()


def score_file(scorer, probe):
    return f"{R}/analysis/heldout/scores/{scorer}-{probe}.jsonl"


# cost and training curves compare GRPO, OAR and the controls when the controls are trained
COST_GROUP = "controls" if GROUPS["controls"] else "main"


# ------------------------------------------------------------------ input functions of the rules


def against_files(wildcards):
    """Benchmarks a training set is checked against (overlapping problems: training.on_overlap)."""
    if wildcards.dataset != config["training"]["dataset"]:
        return []
    tests = BENCHMARKS + [config["analysis"]["heldout"]["dataset"]]
    return [data_file(b) for b in dict.fromkeys(tests) if b != wildcards.dataset]


def eval_model(wildcards):
    if is_base(wildcards.run):
        return model_dir(model_of(wildcards.run))
    return f"{R}/runs/{wildcards.run}/model"


def run_meta(runs):
    """What tables need to know of each run: model, method, tau, beta, probe, seed."""
    meta = {}
    for run in runs:
        if is_base(run):
            meta[run] = {"model": model_of(run), "method": "base"}
            continue
        s = RUNS[run]
        meta[run] = {
            "model": model_of(run),
            "method": s["method"],
            "tau": s["oar"]["tau"] if s["method"] in GATED else None,
            "beta": s["oar"]["beta"] if s["method"] in GATED else None,
            "probe": s["oar"]["probe"] if s["method"] in USES_PROBE else None,
            "seed": s["seed"],
        }
    return meta


GROUP_TABLES = {
    "main_table": "main",
    "ablation_gating": "gating",
    "ablation_grid": "grid",
    "ablation_probe": "probes",
    "controls": "controls",
}


def table_inputs(wildcards):
    name = wildcards.name
    if name in GROUP_TABLES:
        group = GROUP_TABLES[name]
        return {
            "accuracy": f"{R}/analysis/accuracy/{group}.csv",
            "credit": f"{R}/analysis/credit/{group}.summary.csv",
        }
    return {
        "causal_recall": {"recall": rules.recall_analysis.output.json},
        "fidelity": {"fidelity": rules.fidelity_analysis.output.json},
        "cost": {"cost": rules.cost_summary.output.csv},
    }[name]


def enabled_tables():
    names = [n for n, g in GROUP_TABLES.items() if GROUPS[g]]
    names += ["cost", "causal_recall"] if RECALL["scorers"] else ["cost"]
    if FIDELITY["scorers"] and FIDELITY["probes"]:
        names.append("fidelity")
    return names


def figure_inputs(wildcards):
    return {
        "training_curves": {"curves": f"{R}/analysis/credit/{COST_GROUP}.csv"},
        "grid_heatmap": {"accuracy": f"{R}/analysis/accuracy/grid.csv"},
        "recall_bars": {"recall": rules.recall_analysis.output.json},
        "cost_bars": {"cost": rules.cost_summary.output.csv},
        "token_heatmap": {
            "responses": rules.heldout_responses.output.responses,
            "scores": [
                score_file(s, config["training"]["oar"]["probe"])
                for s in HEATMAP["scorers"]
            ],
        },
    }[wildcards.name]


def enabled_figures():
    names = ["training_curves", "cost_bars"]
    if GROUPS["grid"]:
        names.append("grid_heatmap")
    if RECALL["scorers"]:
        names.append("recall_bars")
    if HEATMAP["scorers"]:
        names.append("token_heatmap")
    return names


TABLES = enabled_tables()
FIGURES = enabled_figures()


def table_files(*names):
    return [
        f"{R}/tables/{n}.{ext}" for n in names if n in TABLES for ext in ("csv", "md")
    ]


def figure_files(*names):
    return [
        f"{R}/figures/{n}.{ext}"
        for n in names
        if n in FIGURES
        for ext in ("png", "pdf")
    ]


# ------------------------------------------------------------------------- command lines
# prepare_data.py, evaluate.py and train.py run through `shell:` with their command-line options (the
# same commands a user types), train.py with the run's settings.yaml. (Snakemake 9.27's `script:` puts
# its preamble above a script's first line, so a script run that way may not start with a
# `from __future__` import and sees `__doc__` as None.)

SCRIPTS = os.path.join(workflow.basedir, "workflow_scripts")


def cli(**options):
    """'--key value ...' (shell-quoted) from keyword options; None and False are left out, True is a
    bare flag, a list gives several values."""
    import shlex

    out = []
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


def prepare_data_args(wildcards, input, output):
    spec = config["data"][wildcards.dataset]
    return cli(
        dataset=wildcards.dataset,
        source=spec["source"],
        path=spec.get("path"),
        fields=spec.get("fields"),
        hub_id=spec.get("hub_id"),
        hub_config=spec.get("hub_config"),
        hub_split=spec.get("hub_split"),
        levels=spec.get("levels"),
        limit=spec.get("limit"),
        shuffle_seed=spec.get("shuffle_seed"),
        skip_bad_rows=spec.get("skip_bad_rows"),
        against=list(input.against),
        on_overlap=(
            config["training"]["on_overlap"]
            if wildcards.dataset == config["training"]["dataset"]
            else None
        ),
        out=output.out,
        summary=output.summary,
    )


def evaluate_args(wildcards, input, output, threads):
    settings = eval_settings(model_of(wildcards.run), wildcards.bench)
    return cli(
        model=input.model,
        benchmark_file=input.benchmark_file,
        summary=output.summary,
        threads=threads,
        quiet=True,
        **settings,
    )


def write_settings(path, settings):
    """One run's resolved settings as YAML (train.py --settings), written atomically."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(dict(settings), f, sort_keys=False)
    os.replace(tmp, path)
