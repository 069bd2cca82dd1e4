"""How do the methods fare as responses grow longer? The length sweep's table: one policy per response
length, each method's final accuracy over seeds and its steps to the reward threshold (censored).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, markdown_table
from oar.analysis.labels import METHOD_NAMES, in_method_order
from oar.analysis.outcomes import censored_steps, steps_cell
from oar.analysis.statistics import seed_interval, seed_sd


def length_sweep_table(outcomes: pd.DataFrame, rule: str | None = None,
                       base: Mapping[str, float] | None = None,
                       lengths: Mapping[str, float] | None = None) -> tuple[pd.DataFrame, str]:
    """The length sweep: per method and policy (one per response length), final held-out accuracy (%)
    ``mean [95% t-interval]`` over seeds, and steps to the reward threshold as censored data: the
    Kaplan-Meier median and restricted mean, with how many seeds reached the threshold. ``base``
    (model -> accuracy, 0-1) adds the untrained policy's row and
    ``lengths`` (model -> mean response tokens) a row of response lengths."""
    models = list(dict.fromkeys(outcomes["model"]))
    rows_out = []
    for (model, method), g in outcomes.groupby(["model", "method"], sort=False):
        acc = seed_interval(list(g["final_accuracy"] * 100))
        km = censored_steps(g)
        rows_out.append({"model": model, "method": method, "n_seeds": len(g),
                         "accuracy": acc[0], "accuracy_ci_low": acc[1], "accuracy_ci_high": acc[2],
                         "seed_sd": seed_sd(g["final_accuracy"] * 100),
                         "steps_median_km": km["median"], "steps_rmst": km["rmst"],
                         "reached": km["reached"], "steps": int(g["steps"].max())})
    frame = pd.DataFrame(rows_out)
    headers = ["Method", *[f"{m}: accuracy, %" for m in models], *[f"{m}: steps to threshold" for m in models]]
    rows = []
    if lengths:
        rows.append(["response tokens (base policy)", *[fmt_num(lengths.get(m), 0) for m in models],
                     *[""] * len(models)])
    if base:
        rows.append([METHOD_NAMES["base"], *[fmt_num(base.get(m), 1, 100.0) for m in models], *["–"] * len(models)])
    if "threshold" in outcomes:
        thresholds = outcomes.groupby("model", sort=False)["threshold"].first()
        rows.append(["reward threshold", *[""] * len(models), *[fmt_num(thresholds.get(m), 3) for m in models]])
    for method in in_method_order(frame["method"].unique()):
        cells = [METHOD_NAMES.get(method, method)]
        acc_cells, step_cells = [], []
        for m in models:
            r = frame[(frame["model"] == m) & (frame["method"] == method)]
            if r.empty:
                acc_cells.append("–")
                step_cells.append("–")
                continue
            r = r.iloc[0]
            acc_cells.append(fmt_cell(r["accuracy"], r["accuracy_ci_low"], r["accuracy_ci_high"], scale=1.0)
                             + f" ({r['n_seeds']})")
            step_cells.append(f"{steps_cell(r['steps_median_km'], r['steps'])}; {fmt_num(r['steps_rmst'], 1)}"
                              + f" ({r['reached']}/{r['n_seeds']})")
        rows.append(cells + acc_cells + step_cells)
    what = rule or "the threshold"
    md = ("## Length sweep\n\n" + markdown_table(headers, rows)
          + "\nOne policy per response length (the same task with more remarks that cannot change the answer). "
            "Accuracy: held-out accuracy after training, mean [95% t-interval] over seeds (seeds). Steps to "
            f"threshold: first step whose trailing mean reward reaches {what}; a run that never reaches it is "
            "censored at its last step, so the cell is the Kaplan-Meier median (\"> N\": half the runs had not "
            "reached it by step N); the restricted mean to the last step (runs that reached it / seeds). No "
            "t-interval on censored steps. Each method minus GRPO over paired seeds, with p-values and the "
            "minimum detectable effect: the paired differences table.\n")
    return frame, md
