r"""Run a declared policy selection (``analysis.policy_selection``): its candidates in order, each through
the workflow (pretraining, the untrained evaluation, the baseline's pilot runs and their evaluations),
stopping at the first that passes the rule; then the table.

Shell (``make select-policy``)::

    python workflow_scripts/select_policy.py \
        --configfile config/studies/decisive.yaml config/studies/policy-selection.yaml \
        --results results-selection [--snakemake .venv/bin/snakemake] [--config cpu_kernels=none]

Writes ``<results>/tables/policy_selection.md``; a candidate already run is read, not run again.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import run_cli  # noqa: E402

import yaml  # noqa: E402

from oar.analysis import policy_selection, provenance  # noqa: E402
from oar.files import atomic_write_text  # noqa: E402


def merged(files):
    """The config files merged as Snakemake merges --configfile (later files update earlier ones, key by key)."""
    def update(base, new):
        for k, v in new.items():
            base[k] = update(base.get(k) or {}, v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        return base
    config = {}
    for f in files:
        update(config, yaml.safe_load(Path(f).read_text(encoding="utf-8")) or {})
    return config


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configfile", nargs="+", required=True, help="the config files, as Snakemake takes them")
    p.add_argument("--results", required=True, help="the results folder")
    p.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")),
                   help="snakemake to run (default: the one beside this Python)")
    p.add_argument("--cores", default="2", help="Snakemake's --cores (default: 2)")
    p.add_argument("--config", nargs="*", default=[],
                   help="further --config KEY=VALUE for Snakemake, e.g. cpu_kernels=none (default: none)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = merged(args.configfile)
    rule = (config.get("analysis") or {}).get("policy_selection")
    if not rule:
        raise ValueError(f"{args.configfile}: no analysis.policy_selection")
    problems = policy_selection.check_rule(rule, list(config["models"]), config["runs"]["main"])
    if problems:
        raise ValueError(f"config error at {problems[0][0]}: {problems[0][1]}")
    bench = config["evaluation"]["benchmarks"][0]
    results = Path(args.results)

    def summary(model, run):
        return results / "eval" / model / run / bench / "summary.json"

    def run(targets):
        # a candidate read once is never run again, even where the code has changed since (no `code` trigger)
        command = [args.snakemake, "--cores", args.cores, *targets, "--rerun-triggers", "mtime", "params", "input",
                   "software-env", "--configfile", *args.configfile, "--config", f"results={args.results}",
                   *args.config]
        print("+ " + " ".join(command), flush=True)
        subprocess.run(command, check=True)

    def read(model, run_id):
        return json.loads(summary(model, run_id).read_text(encoding="utf-8"))["pass@1"]

    pilots = [f"{rule['baseline']}-seed{s}" for s in rule["pilot_seeds"]]

    def read_pilots(model):
        run([str(summary(model, r)) for r in pilots])
        return {s: read(model, f"{rule['baseline']}-seed{s}") for s in rule["pilot_seeds"]}

    readings, chosen = [], None
    for model in rule["candidates"]:
        run([str(summary(model, "base"))])
        untrained = read(model, "base")
        # out of range fails whatever the pilots show: they are run only if the fallback needs them
        pilot = read_pilots(model) if policy_selection.untrained_in_range(untrained, rule) else None
        readings.append(policy_selection.read_candidate(model, untrained, pilot, rule))
        print(readings[-1], flush=True)
        chosen = policy_selection.choose(readings, rule)
        if chosen is not None:
            break
    if chosen is None:  # no candidate passed: the fallback reads every candidate's pilots
        readings = [r if r["finals"] is not None else
                    policy_selection.read_candidate(r["candidate"], r["untrained"], read_pilots(r["candidate"]), rule)
                    for r in readings]
        chosen = policy_selection.choose(readings, rule)
    declared = provenance.declarations_text([provenance.declaration(policy_selection.KEY, rule, args.configfile)])
    table = policy_selection.selection_table(readings, rule, chosen, declared)
    out = results / "tables" / "policy_selection.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, table)
    print(table)


if __name__ == "__main__":
    run_cli(main, globals())
