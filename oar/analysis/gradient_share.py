"""Which tokens can any reshaping move? Where each chain policy's gradient lies in its own sampled
responses, per token class, from its pretraining check; and the gradient-share table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from oar.analysis.formatting import fmt_num, markdown_table


def gradient_share_table(summaries: Mapping[str, Mapping[str, Any]]) -> tuple[pd.DataFrame, str]:
    """Where each chain policy's gradient lies in its own sampled responses: per token class, the share of
    tokens and the share of the summed ||e_y - pi|| (the size of the push one unit of advantage gives a
    sampled token; oar.training.pretrain.GradientShare), from the pretraining check's samples."""
    rows, md_rows = [], []
    for model, summary in summaries.items():
        check = ((summary.get("pretrain") or {}).get("check") or {})
        share = check.get("gradient_share")
        if not share:
            raise ValueError(f"model {model!r}: its summary has no gradient share (pretrained before it was measured?)")
        for name, c in share["classes"].items():
            rows.append({"model": model, "token_class": name, "token_share": c["token_share"],
                         "gradient_share": c["gradient_share"], "mean_norm": c["mean_norm"],
                         "responses": share["responses"], "tokens": share["tokens"],
                         "mean_completion_tokens": check.get("mean_completion_tokens")})
            md_rows.append([model, name, fmt_num(c["token_share"], 1, 100), fmt_num(c["gradient_share"], 1, 100),
                            fmt_num(c["mean_norm"], 3)])
    md = markdown_table(["Policy", "token class", "tokens, %", "gradient, %", "mean ||e_y - pi||"], md_rows)
    note = ("\nOn each policy's own samples at the training temperature (its pretraining check). Classes: forced "
            "(copied operands and results, punctuation, markers), remark (a remark's first word), distractor (a "
            "note's words), relation (`=` / `~`), result (a step's result digits), template (the concluding "
            "sentence and answer). GRPO gives every token of a response the same advantage; the gradient share "
            "says which tokens that credit actually moves, and so what any reshaping can move.\n")
    return pd.DataFrame(rows), "## Gradient share by token class\n\n" + md + note
