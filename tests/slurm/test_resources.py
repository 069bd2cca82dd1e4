"""What the paper's SLURM jobs ask for, without a cluster: the resources the registry gives each kind of
job (config/paper.yaml), turned into sbatch and srun options by the SLURM executor plugin's own functions
(snakemake-executor-plugin-slurm and its jobstep plugin), layouts that cannot run stopping with an
error naming the key, and the port a multi-GPU launch takes."""

from __future__ import annotations

import copy
import shlex
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from oar.experiment.config_error import ConfigError
from oar.experiment.runs import Registry

submit_string = pytest.importorskip("snakemake_executor_plugin_slurm.submit_string")
from snakemake.profiles import ProfileConfigFileParser  # noqa: E402
from snakemake_executor_plugin_slurm.utils import set_gres_string  # noqa: E402
from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting, get_node_setting  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "config" / "schema.yaml"
TRAINER_KEYS = tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"])
BIG = "qwen2.5-7b"


def paper(**overlay) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for path, value in overlay.items():  # "a__b__c": value sets cfg[a][b][c]
        *parents, last = path.split("__")
        node = cfg
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return cfg


def registry(cfg: dict) -> Registry:
    validate = pytest.importorskip("snakemake.utils").validate
    cfg = copy.deepcopy(cfg)
    validate(cfg, str(SCHEMA))
    return Registry(cfg, TRAINER_KEYS)


class Resources(dict):
    """A job's evaluated resources as the plugin reads them (`.get` and attribute access)."""

    __getattr__ = dict.__getitem__


def job(reg: Registry, kind: str, model: str | None) -> SimpleNamespace:
    """The executor's view of one job of `kind`: its resources and threads (a stand-in for Snakemake's
    Job object, which needs a DAG)."""
    threads = int(reg.resources.resource_set(kind, model)["threads"])
    return SimpleNamespace(resources=Resources(reg.resources.scheduler_resources(kind, model)), threads=threads,
                           is_group=lambda: False)


def sbatch_line(reg: Registry, kind: str, model: str | None) -> str:
    """The sbatch call the SLURM executor builds (its run_job: get_submit_command + set_gres_string)."""
    params = {"run_uuid": "RUN", "slurm_logfile": "LOG", "comment_str": f"rule_{kind}", "account": "-A acct",
              "partition": "-p gpu", "workdir": "/work"}
    with open(ROOT / "slurm" / "config.v8+.yaml") as stream:  # the profile's executor settings
        profile = ProfileConfigFileParser().parse(stream)
    settings = SimpleNamespace(requeue=profile.get("slurm-requeue") == "True", qos=None, reservation=None)
    j = job(reg, kind, model)
    return submit_string.get_submit_command(j, params, settings=settings) + set_gres_string(j)


def srun_options(reg: Registry, kind: str, model: str | None) -> str:
    """The options of the jobstep's `srun -n1` inside the allocation (its run_job)."""
    j = job(reg, kind, model)
    return " ".join((get_cpu_setting(j, True), get_gpu_setting(j), get_node_setting(j)))


def test_the_4_gpu_training_job_asks_for_one_node_one_task_and_all_cpus():
    reg = registry(paper())
    line = sbatch_line(reg, "train", BIG)
    print("\n" + line)
    options = shlex.split(line)
    assert "--nodes=1" in options
    assert "--requeue" in options  # a node failure or a requeueing preemption queues it again
    assert "--gpus=4" in options
    assert "--cpus-per-task=32" in options  # one task holding every CPU of the job
    assert not any(o.startswith(("--ntasks", "--cpus-per-gpu", "--mem-per-cpu")) for o in options)  # 1 task
    assert options[options.index("--mem") + 1] == "480000"
    assert options[options.index("-t") + 1] == "1440"  # 24 h per attempt
    # the step inside the allocation takes the same layout
    assert srun_options(reg, "train", BIG) == "--cpus-per-task=32 --gpus=4 --nodes=1"


def test_one_gpu_and_cpu_jobs_run_on_one_node_as_one_task():
    reg = registry(paper())
    for kind, model in (("train", "qwen2.5-math-1.5b"), ("evaluate", BIG), ("analysis", None)):
        options = shlex.split(sbatch_line(reg, kind, model))
        assert "--nodes=1" in options and not any(o.startswith("--ntasks-per-gpu") for o in options), options


def test_retries_resume_long_training_runs():
    reg = registry(paper())
    assert reg.resources.retries("train") == 26  # 1 + 26 attempts of 24 h for the longest run (7B exact OAR-P, ~633 h)
    assert reg.resources.retries("evaluate") is None  # the profile's --retries


@pytest.mark.parametrize("overlay, key", [
    ({f"models__{BIG}__resources__train__nodes": 2}, f"models.{BIG}.resources.train.nodes"),
    ({"resources__train__tasks_per_gpu": 1}, "resources.train.tasks_per_gpu"),
    ({"resources__limits": {"mem_mb": 400000}}, f"models.{BIG}.resources.train.mem_mb"),
    ({"resources__limits": {"gpu": 2}}, f"models.{BIG}.resources.train.gpu"),
    ({"resources__limits": {"threads": 8}}, "resources.train.threads"),
    ({"resources__limits": {"runtime": 720}}, "resources.train.runtime"),
    ({"resources__evaluate__retries": 3}, "resources.evaluate.retries"),
])
def test_a_layout_that_cannot_run_names_its_key(overlay, key):
    with pytest.raises(ConfigError) as err:
        registry(paper(**overlay))
    assert err.value.key == key, str(err.value)


def test_the_paper_layout_fits_a_typical_gpu_node():
    limits = {"threads": 64, "gpu": 4, "mem_mb": 500000, "runtime": 1440}  # paper.yaml's example
    registry(paper(resources__limits=limits))


def test_two_multi_gpu_launches_on_one_node_do_not_share_a_port():
    launch = pytest.importorskip("accelerate.commands.launch")
    from accelerate.utils.launch import prepare_multi_gpu_env

    launcher = registry(paper()).jobs.launcher(BIG)
    assert launcher.endswith("--main_process_port 0")
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 29500))  # a first job on the node holds accelerate's default port
        holder.listen()
    except OSError:
        pass  # already held by something else: as good
    ports = []
    for _ in range(2):
        args = launch.launch_command_parser().parse_args(shlex.split(launcher)[2:] + ["train.py"])
        args, _, _ = launch._validate_launch_command(args)  # what `accelerate launch` does first
        assert args.use_fsdp and args.num_processes == 4
        prepare_multi_gpu_env(args)  # the FSDP launch path: picks the port torchrun gets
        ports.append(int(args.master_port))
    holder.close()
    assert 29500 not in ports
