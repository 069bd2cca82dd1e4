"""What does each method cost to train? Median step time per method (and its generate / score / update
parts), its ratio to GRPO's, and the peak memory, from the training curves; and the cost table.
"""

from __future__ import annotations

import math

import pandas as pd

from oar.analysis.formatting import fmt_num, markdown_table
from oar.analysis.labels import METHOD_NAMES, method_rank


def cost_summary(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (model, method): median step time over every logged step of its runs, its ratio to GRPO's,
    the median generate / score / update times, and the largest process and scoring-phase peak memory
    (of the largest rank, for runs of several processes). Methods are compared at their training tau/beta/probe
    only when the frame holds one variant per method (the cost group does)."""
    rows = []
    for (model, method), g in curves.groupby(["model", "method"], sort=False):
        rows.append({
            "model": model, "method": method, "runs": g["run"].nunique(), "steps": len(g),
            "step_time_s": g["step_time_s"].median(),
            "time_generate_s": g["time_generate_s"].median(),
            "time_score_s": g["time_score_s"].median(),
            "time_update_s": g["time_update_s"].median(),
            # the largest rank's peak where several processes logged one (what must fit one GPU)
            "peak_memory_mb": g["peak_memory_max_mb"].fillna(g["peak_memory_mb"]).max(),
            "score_peak_memory_mb": g["score_peak_memory_max_mb"].fillna(g["score_peak_memory_mb"]).max(),
        })
    out = pd.DataFrame(rows, columns=["model", "method", "runs", "steps", "step_time_s", "time_generate_s",
                                      "time_score_s", "time_update_s", "peak_memory_mb", "score_peak_memory_mb"])
    ratios = []
    for r in out.to_dict("records"):
        grpo = out[(out["model"] == r["model"]) & (out["method"] == "grpo")]["step_time_s"]
        ratios.append(r["step_time_s"] / grpo.iloc[0] if len(grpo) and grpo.iloc[0] > 0 else math.nan)
    out["ratio_to_grpo"] = ratios
    return out


def cost_table(cost: pd.DataFrame, train_threads: int | None = None) -> tuple[pd.DataFrame, str]:
    """Median step times per method. With ``train_threads`` (threads of one training job) the table says
    when its times compare across methods: only when the training steps ran alone."""
    cost = cost.copy()
    cost["label"] = [METHOD_NAMES.get(m, m) for m in cost["method"]]
    cost = cost.sort_values(["model", "method"], key=lambda s: s.map(method_rank) if s.name == "method" else s)
    parts = ["## Training cost\n"]
    for model, g in cost.groupby("model", sort=False):
        parts.append(f"\n### {model}\n\n" + markdown_table(
            ["Method", "step s (median)", "x GRPO", "generate s", "score s", "update s", "peak MiB",
             "scoring peak MiB", "steps"],
            [[r["label"], fmt_num(r["step_time_s"], 2), fmt_num(r["ratio_to_grpo"], 2) + "x",
              fmt_num(r["time_generate_s"], 2), fmt_num(r["time_score_s"], 2), fmt_num(r["time_update_s"], 2),
              fmt_num(r["peak_memory_mb"], 0), fmt_num(r["score_peak_memory_mb"], 0),
              r["steps"]] for r in g.to_dict("records")]))
    if train_threads is not None:
        parts.append(f"\nTraining jobs ran with {train_threads} thread(s). **Step times compare across methods only "
                     "if no other job ran beside a training job**, which holds when a training job takes all of "
                     "Snakemake's `--cores` (resources.train.threads = cores) or runs "
                     "on a node of its own; otherwise use perf/step_time.py for ratios.")
    parts.append("\nMedians over every logged training step of every run of the method. The paper reports "
                 "1.4x (OAR-G) and 4.2x (OAR-P) on GPUs. Peak memory is the largest over the method's runs: "
                 "CUDA allocator peak on GPU, resident set on CPU; the scoring peak is the peak within the "
                 "importance-scoring phase alone.\n")
    return cost.reset_index(drop=True), "".join(parts)
