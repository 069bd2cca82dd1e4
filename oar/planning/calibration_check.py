"""How well the calibrated cost plan predicts steps it was not fitted to: each calibration file left out in
turn, the plan calibrated by the others (rates per shape, carried to another shape by rule, capped at the
fastest row), and the left-out file's rows predicted phase by phase (scoring and update, at each row's own
settings). In sample, the same with every file in the fit.

    python -m oar.planning.calibration_check CURRENT.json ... [--earlier GROUP.json ...] ...

A row's error is planned / measured - 1. Rows of code that no longer runs (the scorers' earlier,
per-response schedule; scoring with cuDNN's attention kernel) are planned in sample by their own group
and out of sample by the current files, which measured another code path: those errors say how far the
code moved, not how good the fit is.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from oar.planning.memory_plan import PlanError

PHASES = (("scoring", "score_s"), ("update", "update_s"))


@dataclass(frozen=True)
class RowError:
    file: str
    row: str
    shape: str
    current: bool  # the scorers as the code runs them now (stacked, scoring without cuDNN's attention)
    phase: str
    measured: float
    in_sample: float
    out_of_sample: float

    @property
    def errors(self) -> tuple[float, float]:
        return self.in_sample / self.measured - 1, self.out_of_sample / self.measured - 1


def predict(rates, shape, row: dict) -> dict[str, float]:
    """The plan's seconds for ``row``'s scoring and update at its own settings (one process, every response
    scored), on ``rates`` (``oar.planning.cost_band.Rates``), the phases capped as a central plan caps."""
    from oar.planning.calibration import check_settings
    from oar.planning.cost_band import Knobs, rated_step
    from oar.planning.workload import Band, Workload

    workload = Workload(Band(1.0, 1.0, 1.0), Band(1.0, 1.0, 1.0), ())
    settings = check_settings(row)
    plan = rated_step(rates, {"check": workload}, Knobs(rank_wait=False), row["prompt_tokens"], "check", shape,
                      settings, 1, row["scorer_schedule"])
    return {"scoring": plan.scoring, "update": plan.update}


def is_current(row: dict) -> bool:
    return row.get("scorer_schedule") == "stacked" and row.get("scoring_attention") == "no_cudnn"


def check(current, earlier=(), base=None) -> list[RowError]:
    """Every row of the ``current`` files (the scorers as they run now), each phase planned in sample
    (calibrated by all of them) and out of sample (by the others); and of each group of ``earlier`` files
    (code that no longer runs), in sample by its own group and out of sample by the ``current`` files."""
    from oar.planning.cost_band import Rates
    from oar.planning.hardware import hardware

    base = base or hardware("h200")
    current = [str(p) for p in current]
    everything = Rates.calibrated(current, base)
    found = []
    for path in current:
        found += _rows(path, everything, Rates.calibrated([p for p in current if p != path], base))
    for group in earlier:
        own = Rates.calibrated([str(p) for p in group], base)
        for path in group:
            found += _rows(str(path), own, everything)
    return found


def _rows(path: str, inside, outside) -> list[RowError]:
    from transformers import Qwen2Config

    from oar.planning.calibration import calibration_rows
    from oar.planning.shapes import shape_name, shape_of

    data, rows = calibration_rows(path, require_grpo=False)
    shape = shape_of(Qwen2Config(**data["shape"]))
    found = []
    for row in rows:
        label = row.get("row") or f"{row['method']}-{int(row['completion_length'])}"
        planned_in, planned_out = predict(inside, shape, row), predict(outside, shape, row)
        for phase, key in PHASES:
            if row.get(key) is None or (phase == "scoring" and row["method"] == "grpo"):
                continue
            found.append(RowError(path, label, shape_name(shape), is_current(row), phase, row[key], planned_in[phase],
                                  planned_out[phase]))
    return found


def table(errors: list[RowError]) -> str:
    lines = ["| file | row | shape | code | phase | measured s | planned in sample | out of sample |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for e in errors:
        inside, outside = e.errors
        name = Path(e.file).name
        lines.append(f"| {Path(e.file).parent.name}{'' if name == 'calibration.json' else '/' + name} "
                     f"| {e.row} | {e.shape} | {'current' if e.current else 'earlier'} | {e.phase} | "
                     f"{e.measured:.3g} | {e.in_sample:.3g} ({inside:+.0%}) | {e.out_of_sample:.3g} ({outside:+.0%}) |")
    for current in (True, False):
        chosen = [e for e in errors if e.current == current]
        if chosen:
            worst_in = max(abs(e.errors[0]) for e in chosen)
            worst_out = max(abs(e.errors[1]) for e in chosen)
            lines.append(f"\n{'Current' if current else 'Earlier'} code's rows: the largest error {worst_in:.0%} in "
                         f"sample, {worst_out:.0%} out of sample ({len(chosen)} phases).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("current", nargs="+", help="calibration.json files of the scorers as they run now")
    parser.add_argument("--earlier", nargs="+", action="append", default=[], metavar="JSON",
                        help="a group of files of code that no longer runs (once per group)")
    args = parser.parse_args(argv)
    try:
        print(table(check(args.current, args.earlier)))
    except PlanError as error:
        print(f"calibration check: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
