"""Train one run (GRPO, OAR-P, OAR-G or a control) from its resolved settings.

Shell::

    python workflow_scripts/train.py --settings run.yaml --out-dir results/runs/oar_p-tau0.4-beta2.0-as_mean-seed0

The workflow runs the same command (``shell:``, rules/common.smk) with the run's settings.yaml.

Writes ``model/``, ``metrics.jsonl``, ``run.yaml``, ``weights_delta.json`` (how far the weights moved
from the base model's: zero means the run trained nothing) and, last, ``done``. Rerunning after a kill resumes
from the newest complete checkpoint in ``checkpoints/``. Multi-GPU: ``accelerate launch
--num_processes N workflow_scripts/train.py ...`` (or ``torchrun --nproc_per_node N``); each process
scores its own share of the completions.
"""


import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import provenance, script_parser  # noqa: E402

from oar.files import atomic_write_text  # noqa: E402


def main(settings: dict, out_dir: Path) -> None:
    # Imported here, not at the top, so that --help answers without loading torch and TRL.
    from dataclasses import asdict

    from oar.training.run import is_main_process, require_vllm, train_run, weights_delta
    from oar.training.settings import RunSettings

    run_settings = RunSettings.of(settings)  # resolved once: train_run takes them as they are
    resolved = asdict(run_settings)
    require_vllm(resolved)  # before anything is written or loaded
    out_dir.mkdir(parents=True, exist_ok=True)
    done = out_dir / "done"
    main_process = is_main_process()
    if main_process:
        if done.exists():
            done.unlink()  # retraining: the old marker must not outlive a failed attempt
        record = provenance(resolved, inputs={"train_file": resolved["train_file"]}, seed=resolved["seed"])
        run = {"settings": resolved, "provenance": record}
        atomic_write_text(out_dir / "run.yaml", yaml.safe_dump(run, sort_keys=False))
    model = train_run(run_settings, out_dir)
    if main_process:
        # Evidence that the run trained: how far its weights moved from the base model's.
        delta = weights_delta(resolved["model"], model)
        atomic_write_text(out_dir / "weights_delta.json", json.dumps(delta, indent=1) + "\n")
        print(f"weights moved: {delta['tensors_changed']} of {delta['tensors']} tensors changed, "
              f"relative L2 change {delta['rel_l2_delta']:.3g}", flush=True)
        atomic_write_text(done, f"{model}\n")
        print(f"run {resolved['run_id']} done: {model}", flush=True)


def cli(argv: list[str] | None = None) -> None:
    parser = script_parser(__doc__, "Train one run from its resolved settings.")
    parser.add_argument("--settings", required=True, type=Path, help="YAML file with one run's settings")
    parser.add_argument("--out-dir", required=True, type=Path, help="run folder, results/runs/<run_id>")
    args = parser.parse_args(argv)
    with open(args.settings, encoding="utf-8") as handle:
        settings = yaml.safe_load(handle) or {}
    main(settings, args.out_dir)


if __name__ == "__main__":
    cli()
