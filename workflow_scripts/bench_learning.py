r"""The token-credit benchmark's learning track: train entries from a frozen policy beside GRPO and the truth
gate on the same paired seeds through the workflow, then add their rows to the learning leaderboard.

Shell (``make bench-learning ENTRIES="ktae" POLICY=chain_f1``)::

    python workflow_scripts/bench_learning.py --entries ktae [--policy chain_f1] [--seeds 0 1 2 3 4] \
        [--docs docs/benchmark.md] [--dry-run]

Entries are scorers through OAR's gate (a registered name or an import path package.module:function, which
the workflow's jobs must be able to import) or ``grpo_top_entropy`` (GRPO with TRL's
``top_entropy_quantile: 0.2``, submitted alone). The runs use the policy's own config
(``oar.bench.learning.DESIGNS``: ``make run``'s for ``chain_f1``, in ``results/``), so its GRPO and truth-gate
runs are reused where they exist; the config's overlay for the submission is written beside the
leaderboard, ``results/bench/learning/<policy>/``. Default seeds: the config's (five for ``chain_f1``).
"""

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import run_cli  # noqa: E402

import yaml  # noqa: E402

from oar.files import atomic_write_text  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", nargs="+", required=True, help="the entries submitted together (Holm's family)")
    p.add_argument("--policy", default="chain_f1", help="the frozen policy (default: chain_f1)")
    p.add_argument("--seeds", type=int, nargs="+", help="the paired seeds (default: the policy config's)")
    p.add_argument("--out", default="results/bench", help="where the leaderboard files go (default: results/bench)")
    p.add_argument("--docs", help="also write the table into this page between its leaderboard markers")
    p.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")),
                   help="snakemake to run (default: the one beside this Python)")
    p.add_argument("--cores", default="2", help="Snakemake's --cores (default: 2)")
    p.add_argument("--dry-run", action="store_true", help="plan the runs (snakemake -n) and stop")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from oar.bench import learning
    from oar.cpu_kernels import override

    for number, part in enumerate(learning.parts(args.policy, args.entries, args.seeds)):
        name = "-".join(part["arms"]) if number else "-".join(["grpo", "truth", *args.entries])
        overlay = Path(args.out) / "learning" / args.policy / f"overlay-{name.replace(':', '.')}.yaml"
        atomic_write_text(overlay, yaml.safe_dump(part["overlay"], sort_keys=False))
        pin = override([part["config"]])
        command = [args.snakemake, "--cores", str(args.cores), *learning.targets(part, args.policy),
                   "--configfile", part["config"], str(overlay), *(["--config", pin] if pin else []),
                   *(["-n"] if args.dry_run else [])]
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            raise SystemExit(f"the workflow stopped on the learning track's runs ({overlay}); its log says why")
    if args.dry_run:
        return
    learning.main(argparse.Namespace(policy=args.policy, entries=args.entries, seeds=args.seeds, out=args.out,
                                     docs=args.docs))


if __name__ == "__main__":
    run_cli(main, globals())
