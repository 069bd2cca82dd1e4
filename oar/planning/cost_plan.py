"""GPU-hours of a config's training runs, its targets and the whole DAG: planned from shapes, not measured.

One training step has three phases, generation, scoring and update; ``oar.planning.cost_model``
counts each one's work from the model's shape and turns it into time by a hardware figure
(``oar.planning.hardware``): peak x utilisation and an assumed per-layer call cost, or the rates and
fixed costs measured on a GPU by ``perf/gpu_check.py`` (its ``calibration.json``;
``oar.planning.calibration``), each applied to what it measured (``oar.planning.gpu_hours``). This command
prints the plan as a band (``oar.planning.cost_band``): each model's workload from its sources, no rate
faster than any row ran, the slowest rank's wait.

    python -m oar.planning.cost_plan --config config/paper.yaml                 # H100, assumed rates
    python -m oar.planning.cost_plan --config config/paper.yaml --hardware a100
    python -m oar.planning.cost_plan --config config/paper.yaml --hardware h200 \\
        --calibration perf/calibration/h200-2026-11-no-cudnn/calibration.json ...   # docs/cost.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from oar.planning.cost_band import SCENARIOS, Rates, plan_band, report, workloads_of
from oar.planning.cost_model import SCHEDULE, SCHEDULES, Assumptions
from oar.planning.hardware import HARDWARE, hardware
from oar.planning.memory_plan import PlanError, load_config
from oar.planning.workload import measured_workloads, validated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/paper.yaml")
    parser.add_argument("--hardware", default="h100", help=f"one of {', '.join(HARDWARE)}")
    parser.add_argument("--mfu", type=float, help="sustained share of peak FLOP/s (default 0.4, assumed)")
    parser.add_argument("--bandwidth-util", type=float, help="sustained share of bandwidth in decode (default 0.65)")
    parser.add_argument("--calibration", nargs="+", metavar="JSON",
                        help="calibration.json file(s) written by perf/gpu_check.py, of one or more model shapes "
                             "(two lengths fit the update's fixed cost), e.g. perf/calibration/*/calibration.json")
    parser.add_argument("--schedule", choices=SCHEDULES, default=SCHEDULE,
                        help="the scorers' schedule: stacked (the code's) or per_response (the earlier code's)")
    parser.add_argument("--prompt-tokens", type=int, default=Assumptions.prompt_tokens)
    parser.add_argument("--completion-fill", type=float, nargs="+", metavar="FILL",
                        help="mean completion / max_completion_length for every model instead of its sources': one "
                             "figure, or three (low central high)")
    parser.add_argument("--scored-share", type=float, nargs="+", metavar="SHARE",
                        help="share of rows with advantage != 0 (scored) for every model instead of its sources': "
                             "one figure in (0, 1], or three (low central high)")
    parser.add_argument("--metrics", nargs="+", metavar="JSONL",
                        help="metrics.jsonl of runs already made (a run.yaml beside each names its model): their "
                             "logged frac_scored and completion_length stand for their model's workload")
    parser.add_argument("--no-swings", action="store_true", help="the band only, without the table of what moves it")
    parser.add_argument("--span-tokens", type=int,
                        help="plan OAR-P over spans of this many tokens (training.oar.span_tokens) instead of "
                             "the config's, to see what the cheaper, less faithful variant would cost")
    parser.add_argument("--window-tokens", type=int,
                        help="plan OAR-P with a local window of this many tokens (training.oar.window_tokens; "
                             "0: exact) instead of the config's")
    args = parser.parse_args(argv)
    try:
        bands = {}
        for flag, values, share in (("--scored-share", args.scored_share, True),
                                    ("--completion-fill", args.completion_fill, False)):
            if values is not None:
                bands[flag] = validated(values * 3 if len(values) == 1 else values, flag, share)
        hw = hardware(args.hardware, mfu=args.mfu, bandwidth_util=args.bandwidth_util)
        rates = Rates.calibrated(args.calibration, hw) if args.calibration else Rates(hw)
        config = load_config(args.config)
        if args.span_tokens is not None:
            if args.span_tokens < 1:
                raise PlanError(f"--span-tokens: {args.span_tokens} is not a positive number of tokens")
            config["training"]["oar"]["span_tokens"] = args.span_tokens
        if args.window_tokens is not None:
            if args.window_tokens < 0:
                raise PlanError(f"--window-tokens: {args.window_tokens} is not a number of tokens >= 0")
            config["training"]["oar"]["window_tokens"] = args.window_tokens
        workloads = workloads_of(config, measured_workloads(args.metrics) if args.metrics else None)
        for model, workload in workloads.items():
            workloads[model] = dataclasses.replace(
                workload, scored_share=bands.get("--scored-share", workload.scored_share),
                completion_fill=bands.get("--completion-fill", workload.completion_fill),
                sources=workload.sources + tuple(f"{flag} given: {b.low:g} / {b.central:g} / {b.high:g}"
                                                 for flag, b in bands.items()))
        band = plan_band(config, rates, workloads, args.prompt_tokens, args.schedule, swings=not args.no_swings)
    except PlanError as error:
        print(f"cost plan: {error}", file=sys.stderr)
        return 2
    variant = []
    if args.span_tokens is not None:
        variant.append(f"spans of {args.span_tokens} tokens")
    if args.window_tokens:
        variant.append(f"a window of {args.window_tokens} tokens")
    print(report(band, args.config + (f" with OAR-P over {' and '.join(variant)}" if variant else "")))
    for scenario in reversed(SCENARIOS):  # the high end first: a run its jobs cannot hold even there
        try:
            band.plans[scenario].check()
        except PlanError as error:
            print(f"cost plan ({scenario} end of the band): {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
