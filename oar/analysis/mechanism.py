"""Declared contrasts between arms over paired seeds: the mechanism test's reading.

A contrast (``analysis.mechanism.contrasts``) is a difference of arms' final accuracies on the same seed,
``sum(plus) - sum(minus)`` with as many arms on each side (so it is on the accuracy scale), and one test
fixed before the runs:

- ``greater`` / ``less``: a one-sided paired t-test against ``margin`` (0 when left out): the contrast
  is above (below) it;
- ``two-sided``: the paired t-test of a zero contrast;
- ``equivalent``: two one-sided tests (TOST) within ``(-margin, +margin)``; the only way a table says
  two arms are equivalent.

Holm's correction runs over the declared family (every contrast), and a contrast whose runs are missing
on a declared seed stops the reading, naming the run: the family never shrinks to what has run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_decision, fmt_num, fmt_p, markdown_table
from oar.analysis.statistics import declared_test, holm, seed_interval, wilcoxon_shift
from oar.method.metrics import STEP_CREDIT
from oar.method.names import PLACEBOS, RESCUES

KEY = "analysis.mechanism"
TESTS = ("greater", "less", "two-sided", "equivalent")
MARGIN_RANGE = (0.0, 0.2)


def check_design(design: Mapping[str, Any], methods: Sequence[str], models: Sequence[str]) -> list[tuple[str, str]]:
    """Problems of a declared contrast family, each (key, message), against runs.main's methods and models."""
    problems = []
    if design.get("model") not in models:
        problems.append((f"{KEY}.model", f"{design.get('model')!r} is not in runs.main.models {list(models)}"))
    names = [c.get("name") for c in design.get("contrasts") or []]
    if not names:
        problems.append((f"{KEY}.contrasts", "no contrast declared"))
    if len(set(names)) != len(names):
        problems.append((f"{KEY}.contrasts", f"contrast names repeat: {names}"))
    for i, c in enumerate(design.get("contrasts") or []):
        k = f"{KEY}.contrasts[{i}]"
        plus, minus = list(c.get("plus") or []), list(c.get("minus") or [])
        if not plus or len(plus) != len(minus):
            problems.append((f"{k}.minus",
                             f"{c.get('name')!r}: as many arms on each side (plus {plus}, minus {minus})"))
        for m in plus + minus:
            if m not in methods:
                problems.append((f"{k}.plus" if m in plus else f"{k}.minus",
                                 f"{m!r} is not run in runs.main.methods {list(methods)}"))
        problems += test_problems(k, c.get("test"), c.get("margin"), "the 0-1 scale")
    alpha = design.get("alpha", 0.05)
    if not isinstance(alpha, (int, float)) or not 0 < alpha <= 0.2:
        problems.append((f"{KEY}.alpha", f"{alpha!r} is outside (0, 0.2]"))
    problems += _placebo_problems(design.get("placebo"), methods)
    overturn = design.get("overturn")
    if overturn:
        for key in ("contrast", "placebo_contrast"):
            if overturn.get(key) not in names:
                problems.append((f"{KEY}.overturn.{key}", f"{overturn.get(key)!r} is not a declared contrast {names}"))
        if (not isinstance(overturn.get("upper_below"), (int, float))
                or not 0 < overturn["upper_below"] < MARGIN_RANGE[1]):
            problems.append((f"{KEY}.overturn.upper_below", f"{overturn.get('upper_below')!r} is outside (0, "
                                                            f"{MARGIN_RANGE[1]}) on the 0-1 scale"))
    return problems


def _placebo_problems(placebo: Mapping[str, Any] | None, methods: Sequence[str]) -> list[tuple[str, str]]:
    """A declared placebo must hold tokens outside the last step's decisive tokens (a placebo method, never
    the rescue itself or a gate on the last step) and change the same scorer as the rescue it controls."""
    if not placebo:
        return []
    method, rescue = placebo.get("method"), placebo.get("rescue")
    if method not in PLACEBOS:
        return [(f"{KEY}.placebo.method", f"{method!r} is not a placebo method {list(PLACEBOS)}: a placebo holds as "
                                          "many tokens outside the last step's decisive tokens, never those tokens")]
    if rescue not in RESCUES or RESCUES[rescue] != PLACEBOS[method]:
        return [(f"{KEY}.placebo.rescue", f"{rescue!r} is not a rescue of {PLACEBOS[method]!r}, the scorer "
                                          f"{method!r} changes")]
    missing = [m for m in (method, rescue) if m not in methods]
    if missing:
        return [(f"{KEY}.placebo", f"{missing} are not run in runs.main.methods {list(methods)}")]
    return []


def test_problems(key: str, test, margin, scale: str) -> list[tuple[str, str]]:
    """Problems of one declared test's ``test`` and ``margin`` (under ``key``), a margin on ``scale``."""
    problems = []
    if test not in TESTS:
        problems.append((f"{key}.test", f"{test!r} is not one of {list(TESTS)}"))
    if test == "equivalent" and (not isinstance(margin, (int, float))
                                 or not MARGIN_RANGE[0] < margin < MARGIN_RANGE[1]):
        problems.append((f"{key}.margin", f"{margin!r}: an equivalence margin in ({MARGIN_RANGE[0]}, "
                                          f"{MARGIN_RANGE[1]}) on {scale}, fixed before the runs"))
    elif margin is not None and (not isinstance(margin, (int, float)) or abs(margin) >= MARGIN_RANGE[1]):
        problems.append((f"{key}.margin", f"{margin!r} is outside (-{MARGIN_RANGE[1]}, {MARGIN_RANGE[1]})"))
    return problems


def contrast_values(outcomes: pd.DataFrame, model: str, plus: Sequence[str], minus: Sequence[str],
                    seeds: Sequence[int], metric: str = "final_accuracy") -> list[float]:
    """Per declared seed, ``sum(plus) - sum(minus)`` of the arms' ``metric``; a missing run raises naming it."""
    o = outcomes[outcomes["model"] == model]
    have = {(r["method"], int(r["seed"])): float(r[metric]) for r in o.to_dict("records")}
    missing = [f"{model}/{m} seed {s}" for s in seeds for m in [*plus, *minus] if (m, int(s)) not in have]
    if missing:
        raise ValueError(f"{KEY}: declared runs missing: {', '.join(missing[:6])}"
                         + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
                         + "; Holm over the contrasts that can be read would test a smaller family")
    return [sum(have[(m, int(s))] for m in plus) - sum(have[(m, int(s))] for m in minus) for s in seeds]


def read_contrasts(outcomes: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int]) -> pd.DataFrame:
    """Each declared contrast on the declared seeds: ``mean`` with its two-sided 95% interval, the declared
    test's ``p`` (and for ``equivalent`` the 90% interval TOST reads), Holm's ``p_holm`` over the family
    and ``decided`` (Holm p below alpha)."""
    alpha = float(design.get("alpha", 0.05))
    rows = []
    for c in design["contrasts"]:
        d = contrast_values(outcomes, design["model"], c["plus"], c["minus"], seeds)
        rows.append({"name": c["name"], "plus": " + ".join(c["plus"]), "minus": " + ".join(c["minus"]),
                     "test": c["test"], "margin": c.get("margin"),
                     **declared_test(d, c["test"], c.get("margin"), alpha),
                     "wilcoxon_p": wilcoxon_p(d, c["test"], c.get("margin"))})
    frame = pd.DataFrame(rows)
    frame["p_holm"] = holm(list(frame["p"]))
    frame["wilcoxon_p_holm"] = holm(list(frame["wilcoxon_p"]))
    frame["family_size"] = len(frame)
    frame["decided"] = [not math.isnan(p) and p < alpha for p in frame["p_holm"]]
    frame["wilcoxon_decided"] = [not math.isnan(p) and p < alpha for p in frame["wilcoxon_p_holm"]]
    return frame


def wilcoxon_p(differences: Sequence[float], test: str, margin: float | None) -> float:
    """The declared sensitivity analysis of a contrast: Wilcoxon's signed-rank test of the same differences
    with the same alternative (against ``margin``; an equivalence by two one-sided tests, the larger p)."""
    m = float(margin or 0.0)
    if test == "equivalent":
        return max(wilcoxon_shift(differences, -m, "greater")["p"], wilcoxon_shift(differences, m, "less")["p"])
    return wilcoxon_shift(differences, 0.0 if test == "two-sided" else m, test)["p"]


def derailment(outcomes: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int],
               base_accuracy: float) -> pd.DataFrame:
    """Per arm of the contrasts, the runs on the declared seeds whose final accuracy falls more than
    ``derailment.below_base`` under the untrained policy's: an outcome of its own, never an exclusion."""
    below = float(design["derailment"]["below_base"])
    o = outcomes[(outcomes["model"] == design["model"]) & outcomes["seed"].isin([int(s) for s in seeds])]
    arms = list(dict.fromkeys(m for c in design["contrasts"] for m in [*c["plus"], *c["minus"]]))
    return pd.DataFrame([{"method": arm, "runs": int((o["method"] == arm).sum()),
                          "derailed": int(((o["method"] == arm) & (o["final_accuracy"] < base_accuracy - below)).sum())}
                         for arm in arms])


def overturn_verdict(contrasts: pd.DataFrame, overturn: Mapping[str, Any]) -> str:
    """The declared overturn rule read on the contrasts: ``overturned`` (the rescue's 95% upper limit below
    ``upper_below``, or the rescue-minus-placebo mean at or below 0), ``stands`` (both contrasts decided) or
    ``open``."""
    by_name = contrasts.set_index("name")
    rescue, placebo = by_name.loc[overturn["contrast"]], by_name.loc[overturn["placebo_contrast"]]
    if rescue["ci_high"] < overturn["upper_below"] or placebo["mean"] <= 0:
        return "overturned"
    return "stands" if bool(rescue["decided"]) and bool(placebo["decided"]) else "open"


def mediator(outcomes: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int]) -> pd.DataFrame:
    """Where each arm of the declared contrasts put the gate's weight during training (the mediator,
    logged with ``oar.log_step_credit``): per arm, each step-credit share (its run's mean over training
    steps) as the mean over the declared seeds with its 95% interval. Empty when the runs did not log it."""
    if not all(k in outcomes for k in STEP_CREDIT):
        return pd.DataFrame()
    o = outcomes[(outcomes["model"] == design["model"]) & outcomes["seed"].isin([int(s) for s in seeds])]
    # each run's weight per last-step decisive token over its weight per earlier-step decisive token, from its
    # logged means (oar.analysis.step_credit.per_token_ratio's definition; 1 for GRPO and the truth gate)
    o = o.assign(final_to_early_ratio=(o["final_step_weight_share"] / o["final_step_token_share"])
                 / (o["early_steps_weight_share"] / o["early_steps_token_share"]))
    arms = list(dict.fromkeys(m for c in design["contrasts"] for m in [*c["plus"], *c["minus"]]))
    return arm_intervals(o, arms, (*STEP_CREDIT, "final_to_early_ratio"))


def arm_intervals(runs: pd.DataFrame, arms: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Per arm (``method``), each column's mean over its runs with the 95% t-interval over seeds
    (``<column>``, ``<column>_low``, ``<column>_high``) and the number of runs (``n_seeds``)."""
    rows = []
    for arm in arms:
        of_arm = runs[runs["method"] == arm]
        row = {"method": arm, "n_seeds": len(of_arm)}
        for c in columns:
            row[c], row[f"{c}_low"], row[f"{c}_high"] = seed_interval(list(of_arm[c]))
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ the table


def mechanism_table(contrasts: pd.DataFrame, design: Mapping[str, Any], declared: str = "",
                    weights: pd.DataFrame | None = None,
                    derailed: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """The declared contrasts (:func:`read_contrasts`): each with its mean and 95%
    interval (points), the declared test, its p and Holm p over the family, the Wilcoxon sensitivity
    analysis, and what is decided. An equivalence is claimed only where its TOST decides it. With
    ``derailed`` (:func:`derailment`), the derailed runs per arm; with a declared ``overturn`` rule, its
    verdict; with ``weights`` (:func:`mediator`), a second table: where each arm put the weight during
    training."""
    rows = []
    for r in contrasts.to_dict("records"):
        verdict = fmt_decision(r["test"], r["decided"], r.get("margin"))
        interval = fmt_cell(r["mean"], r["ci_low"], r["ci_high"])
        if r["test"] == "equivalent":
            interval += f"; 90% [{fmt_num(r['tost_low'], 1, 100.0)}, {fmt_num(r['tost_high'], 1, 100.0)}]"
        agrees = "agrees" if bool(r["wilcoxon_decided"]) == bool(r["decided"]) else "disagrees"
        rows.append([r["name"], f"{r['plus']} - {r['minus']}", r["test"], interval, fmt_p(r["p"]),
                     fmt_p(r["p_holm"]), f"{fmt_p(r['wilcoxon_p_holm'])} ({agrees})", fmt_num(r["mde"], 1, 100.0),
                     int(r["n_seeds"]), verdict])
    md = (f"## Declared contrasts on {design['model']}\n\n"
          + markdown_table(["contrast", "arms", "test", "mean, points [95%]", "p", "Holm p", "Wilcoxon Holm p",
                            "MDE 80%", "seeds", "decision"], rows, align="lllrrrrrrl")
          + f"\nEach contrast is the sum of the plus arms' final accuracies minus the minus arms' on the same seed, "
            f"declared with its test before the runs. greater/less: one-sided paired t-test against the margin; "
            f"two-sided: paired t-test of 0; equivalent: two one-sided tests within ±margin (its 90% interval "
            f"inside the margins), the only test by which a table claims equivalence. Holm p: over the "
            f"{len(contrasts)} declared contrasts at alpha {design.get('alpha', 0.05)}; Wilcoxon Holm p: the "
            f"declared sensitivity analysis (the signed-rank test of the same differences with the same alternative, "
            f"Holm over the family), and whether it decides as the t-test does. A contrast that is not decided says "
            f"only that this design did not detect it (MDE 80%: two-sided 5%, unadjusted).\n")
    if derailed is not None and len(derailed):
        below = 100 * float(design["derailment"]["below_base"])
        md += ("\nDerailed runs (final accuracy more than " + f"{below:.1f}" + " points below the untrained policy's; "
               "an outcome, never an exclusion): " + "; ".join(f"{r['method']} {r['derailed']}/{r['runs']}"
                                                             for r in derailed.to_dict("records")) + ".\n")
    if design.get("overturn"):
        o = design["overturn"]
        verdict = overturn_verdict(contrasts, o)
        md += (f"\nDeclared overturn rule: the claim is overturned if `{o['contrast']}` has a 95% upper limit below "
               f"+{100 * o['upper_below']:.1f} points or `{o['placebo_contrast']}` has a mean at or below 0. "
               f"**Verdict: {verdict}**" + {"overturned": ".", "stands": " (both contrasts decided).",
                                          "open": " (neither overturned nor both decided)."}[verdict] + "\n")
    md += declared
    if weights is not None and len(weights):
        md += "\n" + _mediator_section(weights)
    return contrasts, md


def _mediator_section(weights: pd.DataFrame) -> str:
    def share(r, k):
        return fmt_cell(r[k], r[f"{k}_low"], r[f"{k}_high"])

    rows = [[r["method"], int(r["n_seeds"]), share(r, "final_step_weight_share"),
             fmt_num(r["final_step_token_share"], 1, 100.0), share(r, "early_steps_weight_share"),
             fmt_num(r["early_steps_token_share"], 1, 100.0)]
            + ([fmt_cell(r["final_to_early_ratio"], r["final_to_early_ratio_low"], r["final_to_early_ratio_high"],
                         scale=1.0, digits=2)] if "final_to_early_ratio" in r else [])
            for r in weights.to_dict("records")]
    ratio = ["last-step over earlier-step weight per decisive token [95%]"] if "final_to_early_ratio" in weights else []
    return ("## Where each arm put the weight during training (the mediator)\n\n"
            + markdown_table(["arm", "seeds", "last step's decisive tokens: weight, % [95%]", "their tokens, %",
                              "earlier steps' decisive tokens: weight, % [95%]", "their tokens, %", *ratio], rows,
                             align="lrrrrr" + "r" * len(ratio))
            + "\nThe share of the reasoning's token weight (the gate's; GRPO's uniform 1s) on the decisive tokens "
              "of the "
              "last step (the restatement the answer is copied from) and of the earlier steps, on the training "
              "rollouts with a nonzero advantage, averaged over each run's steps, then over seeds. \"their tokens\" is "
              "those tokens' share of the reasoning, what uniform weights give. The ratio: each run's weight per "
              "last-step decisive token over its weight per earlier-step decisive token (1 for uniform weights and "
              "the truth gate), the mean over seeds.\n")
