"""Do the scorers find the causal tokens? recall@k of each scorer's top tokens against the oracle's
causal tokens of the held-out responses, beside chance and the trivial position orders, with the oracle's
own sanity numbers; on the chain task also against the parsed decisive tokens
(:mod:`oar.analysis.chain_truth`). And the causal-token recall table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from oar.analysis.chain_truth import step_attribution_text
from oar.analysis.formatting import fmt_interval, fmt_num, markdown_table
from oar.analysis.labels import METHOD_NAMES, PROBE_NAMES
from oar.analysis.run_outputs import scores_by_index
from oar.analysis.statistics import spread

# Rankings that need no scorer: the trivial orders any scorer's recall must be read against.
POSITION_BASELINES = {
    "earliest_first": lambda r_len: [float(-i) for i in range(r_len)],
    "latest_first": lambda r_len: [float(i) for i in range(r_len)],
}


def oracle_sanity(oracle: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Is the oracle measuring the reasoning, or just breaking the model? Share of reasoning positions
    whose intervention flips the answer (pooled and per response), and the Spearman correlation of
    oracle membership with the relative position j / R, pooled over responses (strongly negative: early
    tokens flip because any early change derails the model; strongly positive: only the last tokens matter).
    """
    from oar.method.metrics import spearman

    member, where = [], []
    for row in oracle:
        r_len = int(row["reasoning_len"])
        causal = {int(i) for i in row["causal"]}
        member += [1.0 if j in causal else 0.0 for j in range(r_len)]
        where += [j / max(r_len - 1, 1) for j in range(r_len)]
    correct = [row.get("correct") for row in oracle]
    return {
        "intervention": next((row.get("intervention") for row in oracle if row.get("intervention")), None),
        "positions": len(member),
        "flip_rate": float(np.mean(member)) if member else math.nan,
        "flip_rate_per_response": spread([len(r["causal"]) / r["reasoning_len"] for r in oracle if r["reasoning_len"]]),
        "position_spearman": spearman(member, where) if len(member) > 1 else math.nan,
        "responses_correct": sum(c is True for c in correct),
        "responses_incorrect": sum(c is False for c in correct),
    }


def causal_recall(oracle: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                  fraction: float = 0.1) -> dict[str, Any]:
    """recall@k (k = ceil(fraction R)) of each scorer's top tokens against the oracle causal tokens.

    ``oracle``: rows with ``index``, ``reasoning_len`` and ``causal`` (positions); ``scores``: scorer ->
    rows with ``index`` and ``scores`` (R values). Responses with an empty oracle carry no recall
    (counted in ``empty_oracle``). A chance line is included: the expected recall of a uniformly random
    top-k, ``E|K ∩ O| / min(k, |O|) = k |O| / R / min(k, |O|)``; so are the trivial position orders of
    ``POSITION_BASELINES`` (``baselines``), and the oracle's own sanity numbers (:func:`oracle_sanity`).
    """
    from oar.method.metrics import default_k, recall_at_k

    per_response = []
    chance = []
    for row in oracle:
        causal = [int(i) for i in row["causal"]]
        r_len = int(row["reasoning_len"])
        if r_len == 0 or not causal:
            continue
        k = default_k(r_len, fraction)
        chance.append(k * len(causal) / r_len / min(k, len(causal)))
        entry = {"index": int(row["index"]), "reasoning_len": r_len, "k": k, "oracle_size": len(causal)}
        for scorer, rows in scores.items():
            s = scores_by_index(rows).get(int(row["index"]))
            if s is None:
                raise ValueError(f"scorer {scorer!r} has no scores for held-out response {row['index']}")
            if len(s) != r_len:
                raise ValueError(f"scorer {scorer!r}: {len(s)} scores for {r_len} reasoning tokens "
                                 f"(response {row['index']})")
            entry[scorer] = recall_at_k(s, causal, k)
        for name, order in POSITION_BASELINES.items():
            entry[name] = recall_at_k(order(r_len), causal, k)
        per_response.append(entry)
    summary = {scorer: spread([e[scorer] for e in per_response]) for scorer in scores}
    baselines = {name: spread([e[name] for e in per_response]) for name in POSITION_BASELINES}
    sizes = [len(r["causal"]) / r["reasoning_len"] for r in oracle if r["reasoning_len"]]
    return {
        "fraction": fraction,
        "responses": len(oracle),
        "empty_oracle": len(oracle) - len(per_response),
        "oracle_share_mean": float(np.mean(sizes)) if sizes else math.nan,
        "chance": spread(chance),
        "baselines": baselines,
        "oracle": oracle_sanity(oracle),
        "summary": summary,
        "per_response": per_response,
    }


# ------------------------------------------------------------------------------------ the table


BASELINE_NAMES = {"earliest_first": "earliest tokens first", "latest_first": "latest tokens first",
                  "chance": "chance (uniform top-k)"}


def recall_table(recall: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """Recall@10% per scorer with its 95% interval over responses, beside the trivial orders (earliest and
    latest tokens first) and chance, followed by the oracle's own sanity numbers."""
    lines = [(scorer, METHOD_NAMES.get(scorer, scorer), s) for scorer, s in recall["summary"].items()]
    lines += [(name, BASELINE_NAMES[name], s) for name, s in (recall.get("baselines") or {}).items()]
    lines.append(("chance", BASELINE_NAMES["chance"], recall.get("chance") or {}))
    rows = [{"scorer": key, "label": label, "recall_mean": s.get("mean"), "ci_low": s.get("ci_low"),
             "ci_high": s.get("ci_high"), "recall_std": s.get("std"), "n": s.get("n")} for key, label, s in lines]
    frame = pd.DataFrame(rows)
    md = markdown_table(["Scorer", "recall@10% [95% interval]", "std", "n"],
                        [[label, fmt_interval(s), fmt_num(s.get("std"), 3), s.get("n")] for _, label, s in lines])
    probe = PROBE_NAMES.get(recall.get("probe"), recall.get("probe"))
    oracle = recall.get("oracle") or {}
    note = (f"\n{recall['responses']} held-out responses ({oracle.get('responses_correct', '?')} with a correct "
            f"answer, {oracle.get('responses_incorrect', '?')} incorrect), {recall['empty_oracle']} with no oracle "
            f"causal token. "
            f"Outcome probe of the scorers: {probe}. Intervals: t over responses.\n"
            f"\nOracle: intervention `{oracle.get('intervention')}`; it flips the answer at "
            f"{fmt_num(oracle.get('flip_rate'), 1, 100)}% of {oracle.get('positions', '?')} reasoning positions; "
            f"Spearman of oracle membership with relative position {fmt_num(oracle.get('position_spearman'), 2)} "
            "(near -1: the oracle mostly marks early tokens, which any early change derails; then "
            "'earliest tokens first' wins and recall says little about the scorers).\n")
    text = "## Causal-token recall\n\n" + md + note
    truth = recall.get("ground_truth")
    if truth:
        lines = [(scorer, METHOD_NAMES.get(scorer, scorer), s) for scorer, s in truth["summary"].items()]
        lines += [(name, BASELINE_NAMES[name], s) for name, s in (truth.get("baselines") or {}).items()]
        lines.append(("chance", BASELINE_NAMES["chance"], truth.get("chance") or {}))
        rows = [{"scorer": key, "label": label, "reference": "ground_truth", "recall_mean": s.get("mean"),
                 "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"), "recall_std": s.get("std"), "n": s.get("n")}
                for key, label, s in lines]
        frame = pd.concat([frame.assign(reference="oracle"), pd.DataFrame(rows)], ignore_index=True)
        agree = truth.get("oracle_agreement") or {}
        text += ("\n### Against the parsed decisive tokens (chain task)\n\n"
                 "The decisive tokens of each response are each step's relation (`=` or `~`) and the digits of its "
                 "result, found by parsing it (oar.data.chains): the only places where a sampled token decides "
                 "the answer.\n\n"
                 + markdown_table(["Scorer", "recall@10% [95% interval]", "std", "n"],
                                  [[label, fmt_interval(s), fmt_num(s.get("std"), 3), s.get("n")]
                                   for _, label, s in lines])
                 + f"\n\nThe intervention oracle against the same ground truth: precision "
                 f"{fmt_interval(agree.get('precision') or {})}, recall {fmt_interval(agree.get('recall') or {})}, "
                 f"Jaccard {fmt_interval(agree.get('jaccard') or {})} (means over {agree.get('responses', '?')} "
                 "responses, 95% t-intervals).\n")
        if truth.get("steps"):
            text += step_attribution_text(truth["steps"])
    return frame, text
