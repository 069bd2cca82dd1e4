"""The upper-bound test: does the graded truth gate beat GRPO by as much as the paper's gains?

Declared in the config (``analysis.upper_bound``) before any of its runs: one arm against one baseline on
one policy, the per-seed paired difference in final accuracy, a non-superiority test (H0: the arm's gain
is at least ``margin``; one-sided ``alpha``) on fresh seeds read at declared looks with O'Brien-Fleming
boundaries (:mod:`oar.analysis.sequential`), Wilcoxon's signed-rank test and the Hodges-Lehmann
estimate as the declared sensitivity analysis, and derailment twice over:

- an exclusion rule (``derailment.exclude``), optional, which may read only what is measured before the
  first update (a metric of the first logged step, whose rollouts the untrained policy wrote: the same
  for both arms of a seed); a seed it excludes is excluded from both arms;
- the derailment outcome (``derailment.outcome``): a run whose final accuracy falls more than
  ``below_base`` under the untrained policy's, counted per arm and compared between the arms over the
  seeds (exact McNemar test on the discordant seeds). It never excludes anything.

:func:`check_design` returns every problem of a declared design as (key, message) before any job is
planned; :func:`read_upper_bound` reads per-seed outcomes by the design, and stops naming the run when a
declared run is missing where a look needs it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from scipy import optimize, stats

from oar.analysis.formatting import fmt_num, fmt_p, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.sequential import (SPENDING, conditional_power, drift_for, expected_pairs, obf_boundaries, power,
                                     read_looks)

KEY = "analysis.upper_bound"
# metrics of a run's first logged step that the untrained policy's rollouts decide (the same for every arm of
# a seed); every other metric, and every later step, is measured after an update and depends on the arm
PRE_TREATMENT_METRICS = ("reward", "reward_std", "completion_length", "frac_active")
PRE_TREATMENT_STEP = 1
MARGIN_RANGE = (0.0, 0.2)  # accuracy, 0-1: above 0, below 20 points
ALPHA_RANGE = (0.0, 0.2)
MIN_PAIRS_AT_LOOK = 5


def check_design(design: Mapping[str, Any], main: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems of a declared upper-bound design, each (key, message), against ``runs.main`` (``models``,
    ``methods``, ``seeds``, the seeds already resolved). Empty when it can run."""
    problems: list[tuple[str, str]] = []
    k = KEY
    margin = design.get("margin")
    if not isinstance(margin, (int, float)) or not MARGIN_RANGE[0] < margin < MARGIN_RANGE[1]:
        problems.append((f"{k}.margin", f"{margin!r} is outside ({MARGIN_RANGE[0]}, {MARGIN_RANGE[1]}): the margin "
                                        "is an accuracy difference on the 0-1 scale (0.015 is 1.5 points)"))
    alpha = design.get("alpha")
    if not isinstance(alpha, (int, float)) or not ALPHA_RANGE[0] < alpha <= ALPHA_RANGE[1]:
        problems.append((f"{k}.alpha", f"{alpha!r} is outside ({ALPHA_RANGE[0]}, {ALPHA_RANGE[1]}]"))
    looks = design.get("looks") or []
    seeds = list(main.get("seeds") or [])
    if (not looks or not all(isinstance(n, int) for n in looks) or looks[0] < MIN_PAIRS_AT_LOOK
            or any(b <= a for a, b in zip(looks, looks[1:]))):
        problems.append((f"{k}.looks", f"{looks!r}: the looks are numbers of pairs, increasing, the first at least "
                                       f"{MIN_PAIRS_AT_LOOK}"))
    elif looks[-1] != len(seeds):
        problems.append((f"{k}.looks", f"the last look is at {looks[-1]} pairs, but runs.main.seeds declares "
                                       f"{len(seeds)} seeds: declare exactly the last look's seeds"))
    if design.get("spending") not in SPENDING:
        problems.append((f"{k}.spending", f"{design.get('spending')!r} is not one of {list(SPENDING)}"))
    pilot = set(design.get("pilot_seeds") or [])
    if pilot & set(seeds):
        problems.append((f"{k}.pilot_seeds", f"seeds {sorted(pilot & set(seeds))} are pilot seeds and also in "
                                             "runs.main.seeds: the test runs on fresh seeds only"))
    if len(set(seeds)) != len(seeds):
        problems.append(("runs.main.seeds", "a seed is declared twice"))
    arm, baseline = design.get("arm"), design.get("baseline")
    if arm == baseline:
        problems.append((f"{k}.arm", f"{arm!r} is also the baseline"))
    methods = list(main.get("methods") or [])
    if sorted(methods) != sorted([arm, baseline]):
        problems.append((f"{k}.arm",
                         f"the test has two arms, {baseline!r} and {arm!r}; runs.main.methods is {methods}"))
    if list(main.get("models") or []) != [design.get("model")]:
        problems.append((f"{k}.model", f"{design.get('model')!r}: runs.main.models must be exactly this policy, "
                                       f"got {main.get('models')}"))
    if design.get("metric", "final_accuracy") != "final_accuracy":
        problems.append((f"{k}.metric", f"{design.get('metric')!r}: the test reads final_accuracy"))
    futility = design.get("futility")
    if futility and looks and all(isinstance(n, int) for n in looks) and not 1 <= futility.get("look", 0) < len(looks):
        problems.append((f"{k}.futility.look", f"{futility.get('look')!r}: futility is read at a look before the "
                                               f"last (1-{len(looks) - 1})"))
    derail = design.get("derailment") or {}
    rule = derail.get("exclude")
    if rule:
        if rule.get("metric") not in PRE_TREATMENT_METRICS:
            problems.append((f"{k}.derailment.exclude.metric",
                             f"{rule.get('metric')!r} is not measured before the first update; an exclusion rule "
                             f"may read only {list(PRE_TREATMENT_METRICS)} of the first logged step"))
        if rule.get("step") != PRE_TREATMENT_STEP:
            problems.append((f"{k}.derailment.exclude.step",
                             f"{rule.get('step')!r}: only step {PRE_TREATMENT_STEP} (the untrained policy's rollouts) "
                             "precedes the first update"))
        if (rule.get("below") is None) == (rule.get("above") is None):
            problems.append((f"{k}.derailment.exclude", "set exactly one of below and above"))
    outcome = derail.get("outcome") or {}
    below = outcome.get("below_base")
    if not isinstance(below, (int, float)) or not 0 <= below < 1:
        problems.append((f"{k}.derailment.outcome.below_base", f"{below!r} must lie in [0, 1) (accuracy, 0-1)"))
    return problems


def plan(design: Mapping[str, Any]) -> dict[str, Any]:
    """The planned design at the pilot's SD (``planning``): the boundaries, each look's nominal level, the
    power and expected pairs at the assumed true gain, and the time each look and the expected size
    take on ``cores`` at ``minutes_per_pair`` (job-minutes: both arms' training and evaluation)."""
    looks = list(design["looks"])
    fractions = [n / looks[-1] for n in looks]
    bounds = obf_boundaries(fractions, design["alpha"], design["spending"])
    p = design["planning"]
    out = {"looks": looks, "boundaries_z": bounds,
           "nominal_alpha": [float(stats.norm.sf(c)) for c in bounds], "scenarios": []}
    for sd in p["sds"]:
        drift = drift_for(design["margin"] - p["assumed_gain"], sd, looks[-1])
        out["scenarios"].append({"sd": sd, "power": power(bounds, fractions, drift),
                                 "expected_pairs": expected_pairs(bounds, looks, drift)})
    wall = p["minutes_per_pair"] / p["cores"] / 60
    out["hours_at_look"] = [n * wall for n in looks]
    out["hours_expected"] = [s["expected_pairs"] * wall for s in out["scenarios"]]
    out["pairs_in_budget"] = int(p["max_hours"] / wall)
    return out


def _value_at(curves: pd.DataFrame, run: str, metric: str, step: int) -> float:
    g = curves[(curves["run"] == run) & (curves["step"] == step)]
    if g.empty:
        raise ValueError(f"run {run!r}: no logged step {step} to read the derailment rule's {metric!r} from")
    return float(g[metric].iloc[0])


def _excluded(rule: Mapping[str, Any] | None, values: Sequence[float]) -> bool:
    if not rule:
        return False
    if rule.get("below") is not None:
        return any(v < rule["below"] for v in values)
    return any(v > rule["above"] for v in values)


def read_upper_bound(outcomes: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int],
                     base_accuracy: float, curves: pd.DataFrame | None = None) -> dict[str, Any]:
    """Read the declared test from per-seed ``outcomes`` (:func:`oar.analysis.outcomes.per_seed_outcomes`:
    model, method, seed, final_accuracy, run), in the declared seed order ``seeds``.

    A look is read once every declared seed up to it has both arms' runs; a missing run below a seed that
    has run stops the reading, naming it. ``base_accuracy``: the untrained policy's accuracy (the
    derailment outcome's reference); ``curves`` (the training curves) is needed only by an exclusion rule.
    Returns ``pairs`` (per seed: both accuracies, the difference, excluded, derailed per arm), ``looks``
    (:func:`oar.analysis.sequential.read_looks`), ``derailment`` (per arm counts and the McNemar test),
    ``outlook`` (:func:`outlook`: while it goes on) and ``final_power`` (:func:`final_power`: once it ended
    undecided)."""
    model, arm, baseline = design["model"], design["arm"], design["baseline"]
    o = outcomes[outcomes["model"] == model]
    have = {(r["method"], int(r["seed"])): r for r in o.to_dict("records")}
    done = [s for s in seeds if (arm, s) in have and (baseline, s) in have]
    # the seeds run so far must be the first ones declared: a gap would silently change which pairs a look reads
    last = seeds.index(done[-1]) if done else -1
    gaps = [(m, s) for s in seeds[: last + 1] for m in (baseline, arm) if (m, s) not in have]
    if gaps:
        names = ", ".join(f"{model}/{m} seed {s}" for m, s in gaps[:6])
        raise ValueError(f"{KEY}: declared runs missing before a later seed's: {names}; run them (the looks read the "
                         "seeds in the declared order)")
    rule = (design.get("derailment") or {}).get("exclude")
    below = float((design.get("derailment") or {}).get("outcome", {}).get("below_base", 0.0))
    pairs = []
    for s in done:
        a, b = have[(arm, s)], have[(baseline, s)]
        values = []
        if rule:
            if curves is None:
                raise ValueError(f"{KEY}.derailment.exclude: the rule needs the training curves")
            values = [_value_at(curves, r["run"], rule["metric"], rule["step"]) for r in (a, b)]
        pairs.append({"seed": s, "arm": float(a["final_accuracy"]), "baseline": float(b["final_accuracy"]),
                      "difference": float(a["final_accuracy"]) - float(b["final_accuracy"]),
                      "excluded": _excluded(rule, values), "rule_values": values,
                      "arm_derailed": float(a["final_accuracy"]) < base_accuracy - below,
                      "baseline_derailed": float(b["final_accuracy"]) < base_accuracy - below})
    kept = [p["difference"] for p in pairs if not p["excluded"]]
    looks = list(design["looks"])
    complete = len(done) == len(seeds)
    if complete and len(kept) < looks[-1]:
        # exclusions left fewer pairs than the last look: the final analysis is at the pairs there are
        looks = [n for n in looks[:-1] if n < len(kept)] + [len(kept)]
    rows = (read_looks(kept, looks, design["margin"], design["alpha"], design["spending"], design["looks"][-1])
            if kept else [])
    return {"pairs": pairs, "looks": rows, "seeds_run": len(done), "seeds_declared": len(seeds),
            "derailment": derailment_outcome(pairs, arm, baseline), "base_accuracy": base_accuracy,
            "outlook": outlook(rows, design), "final_power": final_power(rows, design)}


def _boundaries(looks: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float], int]:
    """The design's Z boundaries, information fractions and final pairs, as its looks were read."""
    return [r["boundary_z"] for r in looks], [r["fraction"] for r in looks], int(looks[-1]["pairs"])


def outlook(looks: Sequence[Mapping[str, Any]], design: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where a test that continues is heading, at the SD measured so far rather than the planned one:
    the whole design's power at that SD and the planning's assumed gain, and the conditional power (the
    chance that a later look stops the test, given the last look read) at the assumed gain and at the
    gain measured so far. Normal approximation on the looks' Z scale. None unless the last look read
    says continue. With a declared futility statement (``futility``: a look and a conditional power) it
    says whether the statement applies at that look (``futile``): the conditional power at the gain measured
    so far is below the declared level. Non-binding: stopping then leaves the test undecided and cannot
    raise its error rate; continuing is allowed. Without one it decides nothing."""
    read = [r for r in looks if "mean" in r]
    if not read or read[-1]["status"] != "continue" or not read[-1]["sd"] > 0:
        return None
    last = read[-1]
    k = last["look"] - 1
    bounds, fractions, total = _boundaries(looks)
    margin, sd = float(design["margin"]), float(last["sd"])
    z = -last["t"]  # the look's own t statistic, oriented so that crossing the boundary rejects
    assumed = float(design["planning"]["assumed_gain"])
    gains = [("assumed", assumed), ("measured", float(last["mean"]))]
    conditional = [{"gain_from": name, "gain": g,
                    "power": conditional_power(bounds, fractions, k, z, drift_for(margin - g, sd, total))}
                   for name, g in gains]
    futility = design.get("futility")
    futile = None
    if futility and futility["look"] == last["look"]:
        futile = conditional[1]["power"] < float(futility["conditional_power_below"])
    return {"look": last["look"], "pairs": last["pairs"], "sd": sd, "z": z, "assumed_gain": assumed,
            "power_at_sd": power(bounds, fractions, drift_for(margin - assumed, sd, total)),
            "conditional": conditional, "futile": futile}


def final_power(looks: Sequence[Mapping[str, Any]], design: Mapping[str, Any], target: float = 0.80
                ) -> dict[str, Any] | None:
    """What a test that ended undecided could have decided: the whole design's power at the SD measured at
    the final look, at the planning's assumed gain, and the true gain at which that power is ``target``
    (below it, the design would likely have decided the gain is below the margin). A null result is read
    beside these. Normal approximation on the looks' Z scale, as :func:`outlook`. None unless the final
    look was read and did not stop the test."""
    read = [r for r in looks if "mean" in r]
    if not read or read[-1]["look"] != looks[-1]["look"] or read[-1]["rejects"] or not read[-1]["sd"] > 0:
        return None
    last = read[-1]
    bounds, fractions, total = _boundaries(looks)
    margin, sd = float(design["margin"]), float(last["sd"])
    assumed = float(design["planning"]["assumed_gain"])

    def power_at(gain: float) -> float:
        return power(bounds, fractions, drift_for(margin - gain, sd, total))

    # power falls from 1 far below the margin to the final alpha spent at it: one crossing of the target
    far = margin - 10 * sd / math.sqrt(total)
    gain_at_target = float(optimize.brentq(lambda g: power_at(g) - target, far, margin, xtol=1e-6))
    return {"pairs": last["pairs"], "sd": sd, "assumed_gain": assumed, "power_at_assumed": power_at(assumed),
            "target": target, "gain_at_target": gain_at_target}


def _futility_text(design: Mapping[str, Any], ahead: Mapping[str, Any]) -> str:
    futility = design.get("futility")
    if not futility:
        return "No futility rule is declared: stopping here decides nothing, continuing is the declared design."
    level = float(futility["conditional_power_below"])
    if ahead.get("futile") is None:
        return (f"The declared futility statement (non-binding) is read at look {futility['look']}, not this one: "
                "continuing is the declared design.")
    if ahead["futile"]:
        return (f"**Futility (declared, non-binding): the conditional power at the gain measured so far is below "
                f"{level:g}, so the test may stop here, undecided**: a gain of the margin is not excluded. Stopping "
                "cannot raise the error rate; continuing remains allowed.")
    return (f"The declared futility statement (non-binding, conditional power at the measured gain below {level:g}) "
            "does not apply: continuing is the declared design.")


def derailment_outcome(pairs: Sequence[Mapping[str, Any]], arm: str, baseline: str) -> dict[str, Any]:
    """Derailed runs per arm over the seeds run (excluded seeds included: it is an outcome), and the exact
    McNemar test of the arms' difference (a two-sided binomial test on the seeds where one arm derailed
    and the other did not)."""
    n = len(pairs)
    arm_only = sum(1 for p in pairs if p["arm_derailed"] and not p["baseline_derailed"])
    base_only = sum(1 for p in pairs if p["baseline_derailed"] and not p["arm_derailed"])
    discordant = arm_only + base_only
    p = float(stats.binomtest(arm_only, discordant, 0.5).pvalue) if discordant else math.nan
    return {"n": n, arm: sum(p_["arm_derailed"] for p_ in pairs),
            baseline: sum(p_["baseline_derailed"] for p_ in pairs),
            "arm_only": arm_only, "baseline_only": base_only, "p_mcnemar": p}



# ------------------------------------------------------------------------------------ the table


def upper_bound_table(reading: Mapping[str, Any], design: Mapping[str, Any], planned: Mapping[str, Any] | None = None,
                      declared: str = "") -> tuple[pd.DataFrame, str]:
    """The upper-bound test (:func:`read_upper_bound`) at each declared look: pairs, the boundary and
    its nominal level, the mean gain with its repeated one-sided upper limit, the t-test's one-sided p, the
    decision, and the declared sensitivity analysis (Wilcoxon p, Hodges-Lehmann estimate and upper limit);
    then the derailment outcome per arm; then the planned power and time; then where the rules were
    declared (``declared``: :func:`oar.analysis.provenance.declarations_text`)."""
    arm, base = METHOD_NAMES.get(design["arm"], design["arm"]), METHOD_NAMES.get(design["baseline"], design["baseline"])
    margin = 100 * float(design["margin"])
    rows, frame_rows = [], []
    for r in reading["looks"]:
        frame_rows.append({"kind": "look", **r})
        if "mean" not in r:
            rows.append([r["look"], r["pairs"], f"{r['boundary_z']:.3f} ({r['nominal_alpha']:.4f})", "–", "–", "–",
                         r["status"], "–", "–"])
            continue
        rows.append([r["look"], r["pairs"], f"{r['boundary_z']:.3f} ({r['nominal_alpha']:.4f})",
                     f"{fmt_num(r['mean'], 2, 100.0)} (SD {fmt_num(r['sd'], 2, 100.0)})",
                     f"< {fmt_num(r['upper'], 2, 100.0)}", fmt_p(r["p"]), r["status"], fmt_p(r["wilcoxon_p"]),
                     f"{fmt_num(r['hl_estimate'], 2, 100.0)} (< {fmt_num(r['hl_upper'], 2, 100.0)})"])
    parts = [f"## The upper-bound test: {arm} minus {base} on {design['model']}\n\n",
             f"Non-superiority: H0 the gain in final accuracy is at least +{margin:.1f} points, one-sided alpha "
             f"{design['alpha']}, {reading['seeds_run']} of {reading['seeds_declared']} declared seeds run.\n\n",
             markdown_table(["look", "pairs", "boundary Z (nominal level)", "mean gain, points",
                             "repeated upper limit", "p (one-sided)", "decision", "Wilcoxon p",
                             "Hodges-Lehmann (upper limit)"], rows, align="rrrrrrlrr")]
    excluded = [p["seed"] for p in reading["pairs"] if p["excluded"]]
    rule = (design.get("derailment") or {}).get("exclude")
    parts.append("\nExclusion rule: " + ("none declared." if not rule else
                 f"`{rule['metric']}` at step {rule['step']} "
                 + (f"below {rule['below']}" if rule.get("below") is not None else f"above {rule['above']}")
                 + f"; seeds excluded from both arms: {excluded or 'none'}.") + "\n")
    d = reading["derailment"]
    below = 100 * float(design["derailment"]["outcome"]["below_base"])
    frame_rows.append({"kind": "derailment", **{k: v for k, v in d.items()}})
    if d["n"]:
        parts.append(f"\nDerailment (an outcome, not an exclusion): a run whose final accuracy falls more than "
                     f"{below:.1f} points below the untrained policy's "
                     f"({fmt_num(reading['base_accuracy'], 1, 100.0)}%).\n\n"
                     + markdown_table(["arm", "derailed runs", "rate"],
                                      [[arm, f"{d[design['arm']]}/{d['n']}", f"{100 * d[design['arm']] / d['n']:.0f}%"],
                                       [base, f"{d[design['baseline']]}/{d['n']}",
                                        f"{100 * d[design['baseline']] / d['n']:.0f}%"]])
                     + f"\nSeeds where only {arm} derailed: {d['arm_only']}; only {base}: {d['baseline_only']}; "
                     f"exact McNemar p {fmt_p(d['p_mcnemar'])}.\n")
    ahead = reading.get("outlook")
    if ahead:
        frame_rows.append({"kind": "outlook", "look": ahead["look"], "pairs": ahead["pairs"], "sd": ahead["sd"],
                           "power_at_sd": ahead["power_at_sd"], "futile": ahead["futile"],
                           **{f"conditional_power_{c['gain_from']}": c["power"] for c in ahead["conditional"]}})
        planned_sd = ""
        if planned:
            planned_sd = " (planned: " + ", ".join(f"{s['power']:.2f} at SD {100 * s['sd']:.2f}"
                                                   for s in planned["scenarios"]) + ")"
        cond = {c["gain_from"]: c for c in ahead["conditional"]}
        parts.append(f"\nAt the SD measured so far ({fmt_num(ahead['sd'], 2, 100.0)} points over "
                     f"{ahead['pairs']} pairs) "
                     f"the whole design has power {ahead['power_at_sd']:.2f} at a true gain of "
                     f"{100 * ahead['assumed_gain']:.1f} points{planned_sd}. Conditional power (normal approximation): "
                     f"given look {ahead['look']}, a later look stops the test with probability "
                     f"{cond['assumed']['power']:.2f} at a true gain of {100 * ahead['assumed_gain']:.1f} points and "
                     f"{cond['measured']['power']:.2f} at the gain measured so far "
                     f"({100 * cond['measured']['gain']:+.2f} points). " + _futility_text(design, ahead) + "\n")
    final = reading.get("final_power")
    if final:
        frame_rows.append({"kind": "final_power", **final})
        parts.append(f"\nThe test ended undecided. At the SD measured at the final look "
                     f"({fmt_num(final['sd'], 2, 100.0)} "
                     f"points over {final['pairs']} pairs) the whole design decides the gain is below the margin "
                     f"with probability {final['power_at_assumed']:.2f} at a true gain of "
                     f"{100 * final['assumed_gain']:.1f} points and {final['target']:.2f} at a true gain of "
                     f"{100 * final['gain_at_target']:+.2f} points (normal approximation): a true gain up to about "
                     "that would likely have been decided below the margin.\n")
    if planned:
        scen = "; ".join(f"SD {100 * s['sd']:.2f} points: power {s['power']:.2f}, "
                         f"expected {s['expected_pairs']:.0f} pairs"
                         for s in planned["scenarios"])
        hours = ", ".join(f"{h:.1f} h" for h in planned["hours_at_look"])
        parts.append(f"\nPlanned at a true gain of {100 * design['planning']['assumed_gain']:.1f} points: {scen}. "
                     f"Time to each look on {design['planning']['cores']} cores at "
                     f"{design['planning']['minutes_per_pair']:g} job-minutes a pair: {hours}; "
                     f"{planned['pairs_in_budget']} pairs fit in {design['planning']['max_hours']:g} hours.\n")
    parts.append(
        "\nEach look reads the first `pairs` declared seeds. Boundary: O'Brien-Fleming by "
        + ("Lan-DeMets alpha spending" if design["spending"] == "lan_demets" else "O'Brien and Fleming's constant")
        + ", on the Z scale, with the nominal one-sided level the look's paired t-test must reach. Repeated "
        "upper limit: the one-sided upper confidence limit at that level (below the margin exactly when the "
        "look stops the test; valid over all looks together). A look that stops the test decides the gain is "
        f"below +{margin:.1f} points; a final look that does not leaves a gain of +{margin:.1f} or more "
        "possible. Wilcoxon p: the signed-rank test of the differences minus the margin, one-sided; "
        "Hodges-Lehmann: the median of the Walsh averages with its upper limit at the same level (declared "
        "sensitivity analysis: where it disagrees with the t-test, say so).\n")
    parts.append(declared)
    return pd.DataFrame(frame_rows), "".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m oar.analysis.upper_bound CONFIG``: the declared design's boundaries, power and time."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("config", help="a config file with analysis.upper_bound (config/studies/upper-bound.yaml)")
    args = parser.parse_args(argv)
    with open(args.config, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    design = (config.get("analysis") or {}).get("upper_bound")
    if not design:
        raise SystemExit(f"{args.config}: no analysis.upper_bound")
    problems = check_design(design, (config.get("runs") or {}).get("main") or {})
    if problems:
        raise SystemExit(f"{args.config}: config error at {problems[0][0]}: {problems[0][1]}")
    p = plan(design)
    print(f"looks (pairs): {p['looks']}")
    print("boundaries, Z (nominal one-sided level): "
          + ", ".join(f"{c:.3f} ({a:.4f})" for c, a in zip(p["boundaries_z"], p["nominal_alpha"])))
    for s, h in zip(p["scenarios"], p["hours_expected"]):
        print(f"SD {100 * s['sd']:.2f} points, true gain {100 * design['planning']['assumed_gain']:.1f}: "
              f"power {s['power']:.3f}, expected pairs {s['expected_pairs']:.1f} ({h:.1f} h)")
    print("hours to each look: " + ", ".join(f"{h:.1f}" for h in p["hours_at_look"])
          + f"; pairs within {design['planning']['max_hours']:g} h: {p['pairs_in_budget']}")


if __name__ == "__main__":
    main()
