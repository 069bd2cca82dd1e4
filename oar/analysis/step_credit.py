"""Where each arm put the gate's weight during training, on the chain task (``oar.log_step_credit``): per
model and method, the share of the reasoning's weight on the last step's decisive tokens and on the earlier
steps', each run's mean over its logged steps, then the mean over seeds with its 95% interval, beside those
tokens' share of the reasoning (what GRPO's uniform weights give). A reading, not a test: the mechanism
table reports the same shares for its declared arms; this table serves runs with no declared contrast.
"""

from __future__ import annotations

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, markdown_table
from oar.analysis.mechanism import arm_intervals
from oar.method.metrics import STEP_CREDIT


def step_credit_table(curves: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The table from the training curves (``analysis/credit/main.csv``: one row per run and logged step);
    stops naming the runs that did not log the step credit."""
    missing = [k for k in STEP_CREDIT if k not in curves]
    if missing:
        raise ValueError(f"the training curves have no {missing}: the runs did not log oar.log_step_credit")
    silent = sorted(curves.groupby("run")["final_step_weight_share"].apply(lambda s: s.isna().all()).loc[lambda x: x].index)
    if silent:
        raise ValueError(f"runs without a logged step credit: {silent[:5]}")
    runs = curves.groupby(["run", "model", "method", "seed"], as_index=False)[list(STEP_CREDIT)].mean()
    frames = []
    for model, of_model in runs.groupby("model", sort=False):
        arms = list(dict.fromkeys(of_model["method"]))
        frames.append(arm_intervals(of_model, arms, STEP_CREDIT).assign(model=model))
    frame = pd.concat(frames, ignore_index=True)

    def share(r, k):
        return fmt_cell(r[k], r[f"{k}_low"], r[f"{k}_high"])

    rows = [[r["model"], r["method"], int(r["n_seeds"]), share(r, "final_step_weight_share"),
             fmt_num(r["final_step_token_share"], 1, 100.0), share(r, "early_steps_weight_share"),
             fmt_num(r["early_steps_token_share"], 1, 100.0)] for r in frame.to_dict("records")]
    md = ("## Where each arm put the weight during training\n\n"
          + markdown_table(["model", "arm", "seeds", "last step's decisive tokens: weight, % [95%]", "their tokens, %",
                            "earlier steps' decisive tokens: weight, % [95%]", "their tokens, %"], rows,
                           align="llrrrrr")
          + "\nThe share of the reasoning's token weight on the decisive tokens of the last step and of the earlier "
            "steps, on the training rollouts with a nonzero advantage: each run's mean over its logged steps, then "
            "the mean over seeds with its 95% t-interval. \"their tokens\": those tokens' share of the reasoning, "
            "what uniform weights give. Exploratory: no test is declared on it.\n")
    return frame, md
