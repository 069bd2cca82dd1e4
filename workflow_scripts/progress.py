"""How far a workflow run in this folder has come, and about how long is left (oar.experiment.progress).

Shell, beside a running ``make run`` (another terminal), or after it was stopped::

    python workflow_scripts/progress.py                      # make run's target (all) and results/
    python workflow_scripts/progress.py --every 60           # a new line every minute until nothing is left
    python workflow_scripts/progress.py --results results-decisive -- all --configfile config/studies/decisive.yaml

The jobs still to run come from ``snakemake --dry-run --nolock --rerun-incomplete`` with the given
target and options (jobs running now, whose outputs Snakemake marks incomplete, count as left); the finished ones, with their wall times, from the timing files
of the results folder. The estimate prices each job left at the median of the finished jobs of its kind
(those that finished since the run in progress began, where there are any).
"""  # noqa: E501

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "workflow_scripts"))

from _script_io import script_parser  # noqa: E402


def dry_run(snakemake_args, workdir: Path = ROOT) -> subprocess.CompletedProcess:
    """Snakemake's listing of the jobs left, beside a run in progress: without the lock, and with the
    outputs a running job has begun to write (marked incomplete until it finishes) listed as left
    instead of stopping the listing."""
    return subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--nolock", "--rerun-incomplete",
                           *(snakemake_args or ["all"])], cwd=workdir, capture_output=True, text=True)


def line(args) -> tuple[str, int]:
    from oar.experiment.progress import estimate, finished_jobs, pending_jobs, run_started

    proc = dry_run(args.snakemake)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake --dry-run failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    pending = [job for job in pending_jobs(proc.stdout.splitlines()) if job.rule != "all"]
    start = run_started(ROOT / ".snakemake" / "log")  # the newest run of this checkout: the one in progress
    recent = finished_jobs(args.results, since=start) if start is not None else None
    result = estimate(pending, finished_jobs(args.results), args.cores, recent)
    return result.line(None if start is None else time.time() - start, args.cores), result.pending


def main(argv=None) -> None:
    p = script_parser(__doc__, "How far a workflow run in this folder has come, and about how long is left.")
    p.add_argument("--results", type=Path, default=Path("results"), help="the run's results folder")
    p.add_argument("--cores", type=int, default=2, help="cores the run uses (make run: 2)")
    p.add_argument("--every", type=float, default=0, help="print a new line every this many seconds (0: once)")
    p.add_argument("snakemake", nargs="*", help="target and options after --, as given to snakemake (default: all)")
    args = p.parse_args(argv)
    while True:
        text, left = line(args)
        print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)
        if not args.every or not left:
            return
        time.sleep(args.every)


if __name__ == "__main__":
    main()
