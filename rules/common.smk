# The Snakemake side of the run registry. The logic (config -> run ids, resolved settings, evaluations,
# tables, figures) is oar.experiment.runs, and that of resources and command-line options its parts
# REG.resources and REG.jobs (oar.experiment.job_resources, job_options), tested without Snakemake; this file only
# builds one Registry from the validated config and turns it into the names the rules use: input
# functions of wildcards, resources of wildcards and shell options.

import os
import sys

from snakemake.exceptions import WorkflowError

# the oar package of this source tree, also where Snakemake runs from an environment without it
sys.path.insert(0, workflow.basedir)
from oar.experiment.config_error import ConfigError
from oar.experiment.config_schema import allowed_names
from oar.experiment.job_options import cli
from oar.experiment.runs import (
    GROUP_TABLES,
    GROUPS as GROUPS_ALL,
    Registry,
    is_base,
    model_of,
)
from oar.experiment.tables import table as declared_table_of
from oar.method.names import PROBES
from oar.studies.catalogue import STUDIES
from oar.training.settings import OARSettings

HELDOUT_SCORERS = allowed_names("heldout_scorers")[0]  # the scorer wildcard's values

# a config error stops with one line naming the key, before any job is planned
try:
    REG = Registry(config)
except ConfigError as e:
    raise WorkflowError(str(e)) from None

R = REG.results
RUNS, GROUPS = REG.runs, REG.groups


def _check_runs_after_design():
    """A declared contrast family (analysis.mechanism) reads only runs made after it was committed: runs
    already in the results folder made at a commit that does not descend from the design's declaring commit
    stop the workflow before any job, naming the key (they would otherwise be read as the design's runs).
    """
    from oar.analysis import provenance

    design = config["analysis"].get("mechanism")
    if not design:
        return
    files = [os.path.abspath(f) for f in workflow.configfiles]
    found = provenance.declaration("analysis.mechanism", design, files)
    records = [
        f"{R}/runs/{r}/run.yaml"
        for r in dict.fromkeys(GROUPS["main"])
        if not is_base(r)
    ]
    before = provenance.runs_not_after(found, records)
    if before:
        run, commit = before[0]
        raise WorkflowError(
            f"config error at analysis.mechanism: {len(before)} of the design's runs in {R}/runs were made at commits "
            f"that neither descend from its declaring commit {found['commit'][:12]} nor hold the design (e.g. "
            f"{os.path.relpath(os.path.dirname(run), R)} at {commit[:12]}): move them out, or give another results folder"
        )


_check_runs_after_design()
BENCHMARKS = REG.benchmarks
RECALL, FIDELITY, HEATMAP = REG.recall, REG.fidelity, REG.heatmap
COST_GROUP = REG.cost_group
TABLES, FIGURES = REG.tables, REG.figures
SCRIPTS = os.path.join(workflow.basedir, "workflow_scripts")

model_names = REG.model_names
model_dir = REG.model_dir
pretrain_settings = REG.pretrain_settings
data_file = REG.data_file
score_file = REG.score_file
analysis_model = REG.analysis_model
eval_runs = REG.eval_runs
summaries = REG.summaries
group_benchmarks = REG.group_benchmarks
table_benchmarks = REG.table_benchmarks
metrics_files = REG.metrics_files
run_meta = REG.run_meta
table_files = REG.table_files
figure_files = REG.figure_files


# ------------------------------------------------------------------------------- resources


def _model_from_wildcards(wildcards):
    run = wildcards.get("run") if hasattr(wildcards, "get") else None
    if run:
        return model_of(run)
    return wildcards.get("model") if hasattr(wildcards, "get") else None


def rule_resources(kind):
    """Resources of the jobs of one kind, from Registry.resources (oar.experiment.job_resources). The
    same on every attempt, since a retry resumes a job after a time limit, preemption or node failure (more
    memory would not help it and must not outgrow the node)."""
    keys = list(REG.resources.scheduler_resources(kind))
    for m in model_names():
        keys += [k for k in REG.resources.scheduler_resources(kind, m) if k not in keys]

    def getter(key):
        def get(wildcards):
            return REG.resources.scheduler_resources(
                kind, _model_from_wildcards(wildcards)
            ).get(key)

        return get

    return {k: getter(k) for k in keys}


def rule_retries(kind):
    """Retries from config (resources.<kind>.retries), else None: the profile's --retries."""
    return REG.resources.retries(kind)


def rule_threads(kind):
    """Threads from config (the kind's, or the model's override for jobs of one model)."""
    if not REG.resources.threads_vary_by_model(kind):
        return int(REG.resources.resource_set(kind)["threads"])
    return lambda wildcards: int(
        REG.resources.resource_set(kind, _model_from_wildcards(wildcards))["threads"]
    )


# ------------------------------------------------------------------ input functions of the rules


def against_files(wildcards):
    """Benchmarks a training set is checked against (overlapping problems: training.on_overlap)."""
    return REG.jobs.against(wildcards.dataset)


def eval_model(wildcards):
    if is_base(wildcards.run):
        return model_dir(model_of(wildcards.run))
    return f"{R}/runs/{wildcards.run}/model"


def table_inputs(wildcards):
    """A table job's inputs, as its declaration reads them (oar.experiment.tables, oar.studies)."""
    return declared_table_of(wildcards.name).reads(REG, rules)


def study_designs():
    """Every registered study's design (the registry's attribute named after it; None where not declared)."""
    return {
        s.name: getattr(REG, s.name) for s in STUDIES.values() if s.design is not None
    }


def decided_run_files():
    """The records (run.yaml) of the trained runs the decided tables read: the main group's and the
    dose-response's, for the commits they were made at."""
    runs = dict.fromkeys(
        r for group in ("main", "dose") for r in GROUPS[group] if not is_base(r)
    )
    return [f"{R}/runs/{r}/run.yaml" for r in runs]


def decision_rules():
    """The config's decision rules as in effect (each registered study's; the interim look aside), for
    their declaring commits."""
    return {
        key: rule
        for study in STUDIES.values()
        for key, rule in study.decision_rules(config).items()
    }


def declared_table(name, *figures):
    """A named target's inputs. A target whose table the config declares no runs for is an error (a
    silent no-op would look like a finished ablation)."""

    def inputs(wildcards):
        if name not in TABLES:
            raise WorkflowError(
                f"target {name}: this config declares no runs for it (runs.{GROUP_TABLES[name]} is empty); "
                "the embedded default's ablations are the overlay config/ablations.yaml: "
                "--configfile config/config.yaml config/ablations.yaml (make run-ablations)"
            )
        return table_files(name) + figure_files(*figures)

    return inputs


def figure_inputs(wildcards):
    return {
        "training_curves": {"curves": f"{R}/analysis/credit/{COST_GROUP}.csv"},
        "grid_heatmap": {"accuracy": f"{R}/analysis/accuracy/grid.csv"},
        "recall_bars": {"recall": rules.recall_analysis.output.json},
        "cost_bars": {"cost": rules.cost_summary.output.csv},
        "main_comparison": {
            "curves": f"{R}/analysis/credit/main.csv",
            "outcomes": rules.paired_analysis.output.outcomes,
            "differences": rules.paired_analysis.output.differences,
            "accuracy": rules.paired_analysis.input.accuracy,
        },
        "length_sweep": {
            "outcomes": rules.paired_analysis.output.outcomes,
            "accuracy": rules.paired_analysis.input.accuracy,
        },
        "token_heatmap": {
            "responses": rules.heldout_responses.output.responses,
            "scores": [
                score_file(s, config["training"]["oar"]["probe"])
                for s in HEATMAP["scorers"]
            ],
        },
    }[wildcards.name]


# ------------------------------------------------------------------------- command lines
# prepare_data.py, evaluate.py and train.py run through `shell:` with their command-line options (the
# same commands a user types), train.py with the run's settings.yaml. (Snakemake 9.27's `script:` puts
# its preamble above a script's first line, so a script run that way may not start with a
# `from __future__` import and sees `__doc__` as None.)


def prepare_data_args(wildcards, input, output):
    return cli(
        **REG.jobs.prepare_data_options(wildcards.dataset),
        against=list(input.against),
        out=output.out,
        summary=output.summary,
    )


def evaluate_args(wildcards, input, output, threads):
    settings = REG.jobs.eval_settings(model_of(wildcards.run), wildcards.bench)
    return cli(
        model=input.model,
        benchmark_file=input.benchmark_file,
        summary=output.summary,
        threads=threads,
        quiet=True,
        # Snakemake reruns an evaluation only when its model or settings changed: old samples are stale
        replace_stale=True,
        **settings,
    )
