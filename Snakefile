# OAR reproduction workflow: prepare model and data -> train (GRPO, OAR-P, OAR-G, ablations,
# controls; seeds) -> evaluate -> analyse (accuracy, credit, cost, causal recall, fidelity) ->
# tables, figures, report. See docs/workflow.md and docs/configuration.md (generated from config/schema.yaml).
#
#   snakemake --cores 2 all                      # embedded default (config/config.yaml), CPU
#   snakemake --profile slurm all                # the paper (config/paper.yaml) on SLURM (docs/slurm.md)
#   snakemake --cores 2 ablation_gating          # one ablation: only the runs it needs
#   snakemake --cores 2 figures                  # regenerate figures from cached results
#   snakemake --report results/report.html

import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")


# config/config.yaml is the embedded default; a --configfile given on the command line replaces it
# whole (a recursive merge would keep the default's models and datasets beside the given ones).
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# the oar package of this source tree, also where Snakemake runs from an environment without it
sys.path.insert(0, workflow.basedir)
from oar.experiment.config_error import ConfigError
from oar.experiment.config_schema import validate

# config/schema.yaml with its defaults filled in, a scorer named by import path imported (one line naming
# the key where the config is wrong)
try:
    validate(config)
except ConfigError as e:
    raise WorkflowError(str(e)) from None


# The report's landing page: what the run was (from the config) and how to read it.
report: "rules/captions/workflow.rst"


# Scripts import the oar package from this source tree, whatever environment runs them (the venv,
# a conda env made with --sdm conda, a SLURM job), and `python` in a shell command is the Python
# that runs Snakemake (a conda env's own Python comes first on PATH in its jobs).
os.environ.update(
    PYTHONPATH=os.pathsep.join(
        p for p in (workflow.basedir, os.environ.get("PYTHONPATH")) if p
    ),
    PATH=os.pathsep.join((os.path.dirname(sys.executable), os.environ.get("PATH", ""))),
)


# The instruction set of the CPU kernels (oar.cpu_kernels): every job's Python pins it when it imports oar,
# and stops with an error naming the level where the CPU lacks it.
if config.get("cpu_kernels") not in (None, "none"):
    os.environ.update(OAR_CPU_KERNELS=config["cpu_kernels"])


# The hub is read only by the rules Snakemake runs itself (localrules fetch_model and prepare_data; on a
# cluster, the login node); a job a cluster runs (remote mode) reads prepared folders and the cache, so
# that a compute node without internet fails fast instead of waiting on the hub.
if config.get("hub_cache"):
    os.environ.update(HF_HOME=os.path.abspath(os.path.expanduser(config["hub_cache"])))
if workflow.remote_exec:
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")


include: "rules/common.smk"


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    dataset="|".join(map(re.escape, config["data"])),
    run="|".join(map(re.escape, list(RUNS) + [f"{m}/base" for m in config["models"]])),
    bench="|".join(map(re.escape, config["evaluation"]["benchmarks"])),
    group="|".join(GROUPS_ALL),
    scorer="|".join(map(re.escape, HELDOUT_SCORERS)),
    probe="|".join(PROBES),
    name="[a-z_]+",


include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/analysis.smk"
include: "rules/report.smk"


localrules:
    fetch_model,
    prepare_data,
    run_settings,
    all,
    main_table,
    ablation_gating,
    ablation_grid,
    ablation_probe,
    causal_recall,
    fidelity,
    cost,
    tables,
    figures,
    report,


rule all:
    default_target: True
    input:
        table_files(*TABLES),
        figure_files(*FIGURES),
        rules.html_report.output.html,
