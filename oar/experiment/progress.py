"""How far a workflow run has come, and an estimate of what is left, from its own finished jobs.

The estimate prices every job still to run at the median wall time of the finished jobs of its kind in
the same results folder (a training run by its method: an OAR-P run costs about three GRPO runs; those
that finished since the run in progress began, where its kind has any), falls
back to the median of its rule, and spreads the sum over the cores. It knows nothing of the machine: on a
loaded or slower machine the finished jobs were slower too, and so is the estimate. A job whose rule has
no finished job yet is not priced (a data file's seconds say nothing of a training run's): the line then
gives what is left as "at least", and says how many jobs it leaves out.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

# Rules that do no work of their own: run_settings writes one run's settings (a script of a fraction of a
# second, no timing file). Priced at nothing, as are target rules without outputs.
NO_WORK_RULES = frozenset({"run_settings"})
# Where Snakemake writes each job's timing file (a rule's ``benchmark:``), under the results folder; results
# made before the folder was renamed keep theirs in benchmarks/, read too so their finished jobs still count.
TIMINGS, OLD_TIMINGS = "timings", "benchmarks"


@dataclass(frozen=True)
class Job:
    """One job: its rule and its wildcards' values joined by '/' (``train``, ``chain_f1/grpo-seed0``)."""

    rule: str
    name: str = ""
    writes: bool = field(default=True, compare=False)  # False: a target rule's job (inputs only, no outputs)
    # the folder of <results>/timings/ its timing file goes to (a finished job's "rule"): the analysis
    # rules share analysis/, the table rule writes to tables/
    folder: str = field(default="", compare=False)

    @property
    def kind(self) -> tuple[str, str]:
        """(timing folder or rule, method) for a training or evaluation job of a run (``grpo-seed0`` ->
        ``grpo``), else (timing folder or rule, "")."""
        parts = self.name.split("/")
        run = parts[1] if len(parts) > 1 else parts[0]
        method = run.split("-", 1)[0] if self.rule in ("train", "evaluate") and "-" in run else ""
        return self.folder or self.rule, method


@dataclass(frozen=True)
class Estimate:
    done: int
    pending: int
    left_s: float | None  # None: nothing has finished yet to price the jobs by
    guessed: int  # pending jobs of a kind none of whose jobs has finished (priced by their rule)
    unpriced: int = 0  # pending jobs of a rule none of whose jobs has finished (left out of left_s)

    def line(self, elapsed_s: float | None, cores: int) -> str:
        total = self.done + self.pending
        share = 100 * self.done / total if total else 100.0
        text = f"{self.done} of {total} jobs done ({share:.0f}%)"
        if elapsed_s is not None:
            text += f", {elapsed_s / 60:.1f} min since snakemake started"
        if self.pending == 0:
            return text + "; nothing left"
        if self.left_s is None:
            return text + "; no estimate before the first job finishes"
        if self.unpriced == self.pending:  # what has finished (data files, say) prices none of what is left
            return text + f"; no estimate yet: no job of the rules of the {self.pending} left has finished"
        bound = "at least" if self.unpriced else "about"
        text += (f"; {bound} {self.left_s / 60:.0f} min left on {cores} core{'s' if cores != 1 else ''}, "
                 f"from this run's finished jobs")
        if self.guessed:
            text += f" ({self.guessed} of the {self.pending} left are of kinds not finished yet)"
        if self.unpriced:
            text += f"; {self.unpriced} of the {self.pending} left not counted: no job of their rule has finished"
        return text


def estimate(pending: Sequence[Job], finished: Mapping[Job, float], cores: int,
             recent: Mapping[Job, float] | None = None) -> Estimate:
    """Seconds left: each pending job at the median wall time of its finished kind, else of its rule (else
    not counted: ``unpriced``), summed and divided by ``cores``. A kind with jobs in ``recent`` (those finished
    since the run in progress began) is priced by those alone: a folder's earlier jobs may have run on a
    busier or quieter machine."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    by_kind: dict[tuple[str, str], list[float]] = {}
    by_rule: dict[str, list[float]] = {}
    for job, seconds in finished.items():
        by_kind.setdefault(job.kind, []).append(seconds)
        by_rule.setdefault(job.rule, []).append(seconds)
    recent_by_kind: dict[tuple[str, str], list[float]] = {}
    for job, seconds in (recent or {}).items():
        recent_by_kind.setdefault(job.kind, []).append(seconds)
    by_kind.update(recent_by_kind)
    if not finished:
        return Estimate(len(finished), len(pending), None if pending else 0.0, 0)
    left, guessed, unpriced = 0.0, 0, 0
    for job in pending:
        if job.rule in NO_WORK_RULES or not job.writes:
            continue
        if job.kind in by_kind:
            left += statistics.median(by_kind[job.kind])
        elif job.kind[0] in by_rule:
            guessed += 1
            left += statistics.median(by_rule[job.kind[0]])
        else:
            unpriced += 1
    return Estimate(len(finished), len(pending), left / cores, guessed, unpriced)


def finished_jobs(results: Path, since: float | None = None) -> dict[Job, float]:
    """Wall seconds of every finished job, from the timing files Snakemake writes when a job ends
    (``<results>/timings/<rule>/<wildcards>.tsv``, column ``s``; results made before the rename: ``benchmarks/``,
    a job timed in both counting its ``timings/`` file); with ``since`` (seconds since the epoch), only the
    jobs that ended after it."""
    found: dict[Job, float] = {}
    roots = [Path(results) / OLD_TIMINGS, Path(results) / TIMINGS]
    for root, path in [(root, path) for root in roots if root.is_dir() for path in sorted(root.rglob("*.tsv"))]:
        if since is not None and path.stat().st_mtime < since:
            continue
        relative = path.relative_to(root).with_suffix("")
        rule, name = relative.parts[0], "/".join(relative.parts[1:])
        try:
            with open(path, encoding="utf-8") as f:
                rows = list(csv.DictReader(f, delimiter="\t"))
            found[Job(rule, name)] = float(rows[-1]["s"])
        except (OSError, KeyError, IndexError, ValueError):
            continue  # being written, or not a timing file
    return found


_RULE = re.compile(r"^(?:local)?rule (\w+):")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
_TIMING_FILE = re.compile(rf"^\s+benchmark: (?:.*/)?{TIMINGS}/([^/]+)/")


def pending_jobs(dry_run: Iterable[str]) -> list[Job]:
    """The jobs a ``snakemake --dry-run`` listing would run: each ``rule X:`` block with its wildcards,
    whether it lists outputs (a target rule's job does not) and its timing file's folder."""
    jobs: list[Job] = []
    rule, name, writes, folder = None, "", False, ""
    for line in [*dry_run, ""]:
        if (match := _RULE.match(line)) is not None or (rule is not None and not line.strip()):
            if rule is not None:
                jobs.append(Job(rule, name, writes, folder))
            rule, name, writes, folder = (match.group(1) if match else None), "", False, ""
        elif rule is not None and (match := _WILDCARDS.match(line)) is not None:
            name = "/".join(part.split("=", 1)[1] for part in match.group(1).split(", ") if "=" in part)
        elif rule is not None and (match := _TIMING_FILE.match(line)) is not None:
            folder = match.group(1)
        elif rule is not None and line.lstrip().startswith("output:"):
            writes = True
    return jobs


def run_started(log_dir: Path) -> float | None:
    """When the newest Snakemake run of a checkout began (seconds since the epoch), from the names of its
    logs (``.snakemake/log/<local start time, ISO without colons>.snakemake.log``); None without one."""
    starts = []
    for path in Path(log_dir).glob("*.snakemake.log") if Path(log_dir).is_dir() else []:
        stamp = path.name.removesuffix(".snakemake.log")
        for form in ("%Y-%m-%dT%H%M%S.%f", "%Y-%m-%dT%H%M%S"):
            try:
                starts.append(datetime.strptime(stamp, form).timestamp())  # local time, as Snakemake names it
                break
            except ValueError:
                continue
    return max(starts) if starts else None
