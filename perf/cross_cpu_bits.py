"""The same bits on other kinds of CPU, checked on this machine: the testbed's first training jobs run
natively and under CPUs that QEMU's user-mode emulator presents, compared bit for bit.

Each CPU runs the same two jobs in one process on one torch thread, with the CPU kernels pinned to
``--level`` (as the workflow's jobs are): a short pretraining of the chain policy (`make run`'s
``models.chain_f1.pretrain`` settings, ``--updates`` updates) and a short GRPO run (a testbed run's
``settings.yaml``, ``--steps`` steps) from ``make run``'s pretrained policy. ``native`` is this machine; any other name is a QEMU CPU model
(``qemu-x86_64 -cpu help``): ``Haswell`` is an Intel CPU with AVX2 and no AVX-512, ``EPYC-Rome`` an AMD one.
QEMU shows the program that CPU's CPUID (vendor, instruction sets), which is what torch, MKL and oneDNN
pick their kernels by, and executes each instruction exactly (its TCG offers at most AVX2); it runs this
the testbed's matrix products 200-300 times slower than the machine, hence the small default sizes. Prints, per CPU: what
torch and MKL ran, whether the workflow would stop on that CPU (and why), and digests of the pretrained
weights, the GRPO run's weights and its metrics (all values but times and memory), each marked where it
equals the first CPU's.

    apt-get install qemu-user
    PYTHONPATH=$PWD .venv/bin/python perf/cross_cpu_bits.py \\
        --settings results/runs/chain_f1/grpo-seed0/settings.yaml --train-file results/data/chain_train.jsonl \\
        --model results/models/chain_f1 --cpus native Haswell EPYC-Rome --level avx2
"""  # noqa: E501

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from harness import markdown_table
from oar.cpu_kernels import LEVELS, VARIABLE

ROOT = Path(__file__).resolve().parents[1]
PIN_VARIABLES = (VARIABLE, *LEVELS["default"][1])  # cleared, so that --level alone decides


def weights_digest(folder: Path) -> str:
    """sha256 over a model folder's tensors (names and bytes, in name order)."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(str(folder / "model.safetensors")).items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def metrics_digest(path: Path) -> str:
    """sha256 over every metrics row's values except times and memory peaks (which differ between any two
    runs): rewards, entropy, lengths, loss, the scorers' shares."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    kept = [{k: v for k, v in row.items() if "time" not in k and "memory" not in k} for row in rows]
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def one_cpu(spec: dict, out: Path) -> dict:
    """The two jobs in this process; their digests and what the kernels ran."""
    import oar  # noqa: F401  (pins the kernels before torch runs anything)
    import torch

    from oar.cpu_kernels import CpuKernelsError, capability, mkl_branch
    from oar.models.sources import save_model_folder
    from oar.data.catalogue import chain_split
    from oar.training.pretrain import PretrainSettings, pretrain
    from oar.training.run import train_run

    try:
        capability()
        stops = None
    except CpuKernelsError as error:  # measured all the same: how far the bits move on such a CPU
        stops = str(error)
    torch.set_num_threads(1)
    settings = PretrainSettings(**{**spec["pretrain"], "updates": spec["updates"], "seed": spec["seed"]})
    test = frozenset(p.text for p in chain_split("test", settings.steps))
    started = time.perf_counter()
    model, tokenizer, _ = pretrain(settings, exclude=test, log=lambda *a, **k: None)
    folder = save_model_folder(model, tokenizer, out / "model")
    run = {**spec["run"], "run_id": "perf/cross-cpu"}  # from the trained policy: its groups have mixed rewards
    trained = Path(train_run(run, out / "grpo"))
    if weights_digest(trained) == weights_digest(Path(run["model"])):
        raise SystemExit("the GRPO step left the weights as they were: no group had mixed rewards")
    return {"capability": torch.backends.cpu.get_cpu_capability(), "mkl_branch": mkl_branch(),
            "stops": stops, "pretrained": weights_digest(folder), "grpo": weights_digest(trained),
            "metrics": metrics_digest(out / "grpo" / "metrics.jsonl"),
            "wall_s": round(time.perf_counter() - started, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", type=Path, help="a testbed GRPO run's settings.yaml (required)")
    p.add_argument("--train-file", type=Path, help="its training problems (required)")
    p.add_argument("--model", type=Path, help="the policy GRPO starts from (required; `make run`'s "
                   "results/models/chain_f1: a short pretraining leaves no reward to learn from)")
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml",
                   help="where models.<--model-name>.pretrain comes from")
    p.add_argument("--model-name", default="chain_f1")
    p.add_argument("--cpus", nargs="+", default=["native", "Haswell", "EPYC-Rome"])
    p.add_argument("--level", default="avx2", help="OAR_CPU_KERNELS for every CPU; none: unpinned")
    p.add_argument("--updates", type=int, default=3, help="pretraining updates")
    p.add_argument("--batch-size", type=int, default=4, help="pretraining problems an update")
    p.add_argument("--steps", type=int, default=1, help="GRPO steps")
    p.add_argument("--completions", type=int, default=16, help="GRPO completions a step (groups of the run's size)")
    p.add_argument("--one", nargs=2, metavar=("SPEC_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_cpu(json.loads(args.one[0]), Path(args.one[1]))))
        return
    if args.settings is None or args.train_file is None or args.model is None:
        p.error("--settings, --train-file and --model are required")
    config = yaml.safe_load(args.config.read_text())
    model = config["models"][args.model_name]
    run = yaml.safe_load(args.settings.read_text())
    run |= {"train_file": str(args.train_file.resolve()), "model": str(args.model.resolve()),
            "seed": run.get("seed", 0)}
    run["trainer"] = {**run["trainer"], "max_steps": args.steps, "save_steps": 10**6,
                      "per_device_train_batch_size": args.completions}
    spec = {"pretrain": {**model["pretrain"], "batch_size": args.batch_size}, "seed": model.get("seed", 0),
            "updates": args.updates, "run": run}
    emulator = shutil.which("qemu-x86_64")
    rows, first = [], None
    for cpu in args.cpus:
        if cpu != "native" and emulator is None:
            raise SystemExit("qemu-x86_64 not found: apt-get install qemu-user (or leave out --cpus other than native)")
        launcher = [] if cpu == "native" else [emulator, "-cpu", cpu]
        env = {k: v for k, v in os.environ.items() if k not in PIN_VARIABLES} | {"PYTHONPATH": str(ROOT)}
        if args.level != "none":
            env[VARIABLE] = args.level
        with tempfile.TemporaryDirectory() as work:
            proc = subprocess.run([*launcher, sys.executable, __file__, "--one", json.dumps(spec), work],
                                  capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"{cpu}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        first = first or result
        print(f"{cpu}: {result}", file=sys.stderr, flush=True)

        def mark(key: str) -> str:
            return result[key][:16] + ("" if result is first
                                       else " (same)" if result[key] == first[key] else " (differs)")

        rows.append([cpu, result["capability"], result["mkl_branch"] or "-",
                     "runs" if result["stops"] is None
                     else "stops: " + result["stops"].split(":", 1)[1].split("(")[0].strip(),
                     mark("pretrained"), mark("grpo"), mark("metrics"), f"{result['wall_s']:.0f}"])
    print(f"\n`OAR_CPU_KERNELS={args.level}`; {args.updates} pretraining updates of {args.batch_size} problems; "
          f"{args.steps} GRPO steps from {args.model} "
          f"({run['trainer']['per_device_train_batch_size']} completions a step), one thread; sha256 prefixes, "
          f"compared with the first CPU's\n")
    print(markdown_table(["CPU", "torch", "MKL branch", "the workflow", "pretrained", "GRPO weights",
                          "GRPO metrics", "s"], rows, "llllllll"))


if __name__ == "__main__":
    main()
