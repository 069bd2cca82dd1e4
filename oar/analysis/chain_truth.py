"""The chain task's ground truth: the decisive tokens of each held-out response (each step's relation and
result), found by parsing it; how well the intervention oracle finds them; and where each scorer's credit
goes step by step, with the gate's weight on the first erring relation of a wrong response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oar.analysis.formatting import fmt_interval, fmt_num, markdown_table
from oar.analysis.labels import METHOD_NAMES
from oar.analysis.run_outputs import scores_by_index
from oar.analysis.statistics import spread


def ground_truth_tokens(responses: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Decisive reasoning positions of each held-out response of the chain task, found by parsing it
    (:func:`oar.data.chains.decisive_spans`): the tokens overlapping a step result. Rows as the oracle's
    (``index``, ``reasoning_len``, ``causal``), so :func:`oar.analysis.causal_recall.causal_recall`
    scores against them."""
    from oar.data.chains import decisive_spans

    rows = []
    for row in responses:
        tokens = row["reasoning_tokens"]
        starts = np.cumsum([0] + [len(t) for t in tokens])
        spans = decisive_spans("".join(tokens))
        causal = [j for j in range(len(tokens))
                  if any(starts[j] < end and start < starts[j + 1] for start, end in spans)]
        rows.append({"index": int(row["index"]), "reasoning_len": int(row["reasoning_len"]), "causal": causal})
    return rows


def step_tokens(tokens: Sequence[str]) -> tuple[list[list[int]], list[str]]:
    """Per equation of a chain response: the positions of its decisive tokens (relation and result), and
    its relation (``=`` or ``~``) with the position of the relation token last."""
    from oar.data.chains import _EQUATION

    starts = np.cumsum([0] + [len(t) for t in tokens])
    text = "".join(tokens)

    def overlapping(start: int, end: int) -> list[int]:
        return [j for j in range(len(tokens)) if starts[j] < end and start < starts[j + 1]]

    steps, relations = [], []
    for m in _EQUATION.finditer(text):
        relation = overlapping(*m.span(4))
        steps.append(sorted(set(relation + overlapping(*m.span(5)))))
        relations.append((m.group(4), relation[-1] if relation else None))
    return steps, relations


def oracle_agreement(oracle: Sequence[Mapping[str, Any]], truth: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How well the intervention oracle's causal tokens match the parsed decisive tokens, per response:
    precision (share of oracle tokens that are decisive), recall (share of decisive tokens the oracle
    finds) and Jaccard, each as mean with its 95% interval over responses."""
    by_index = {int(r["index"]): {int(i) for i in r["causal"]} for r in truth}
    precision, recall, jaccard = [], [], []
    for row in oracle:
        found, true = {int(i) for i in row["causal"]}, by_index.get(int(row["index"]))
        if true is None:
            raise ValueError(f"no ground truth for held-out response {row['index']}")
        both = len(found & true)
        if found:
            precision.append(both / len(found))
        if true:
            recall.append(both / len(true))
        if found or true:
            jaccard.append(both / len(found | true))
    return {"precision": spread(precision), "recall": spread(recall), "jaccard": spread(jaccard),
            "responses": len(oracle)}


def step_attribution(responses: Sequence[Mapping[str, Any]], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                     fraction: float = 0.1, gate_settings: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Where each scorer's credit goes, step by step, on the chain task.

    ``by_step``: per chain step k, the share of step k's decisive tokens (relation and result) that fall
    in the scorer's top ``fraction`` of the response (mean and 95% interval over responses that have a
    step k). A scorer that credits the last restatement of a result shows recall rising with k.

    ``erring``: in wrong responses whose first sloppy step (``~``) is followed by an exact one (``=``),
    the gate weight (:func:`oar.method.gate.gate` with ``gate_settings``: tau, beta, floor) on the erring
    relation token and the mean weight on the later correct relation tokens, and the share of responses
    in which the erring one weighs more. Credit assignment that works puts the blame on the erring token.
    """
    import torch

    from oar.method.gate import gate
    from oar.method.metrics import default_k

    settings = {"tau": 0.4, "beta": 2.0, "floor": 0.1, **(gate_settings or {})}
    parsed = {int(r["index"]): (step_tokens(r["reasoning_tokens"]), r.get("correct")) for r in responses}
    out: dict[str, Any] = {"fraction": fraction, "gate": settings, "by_step": {}, "erring": {}}
    for scorer, rows in scores.items():
        per_step: dict[int, list[float]] = {}
        erring, later, erring_wins = [], [], []
        for idx, s in scores_by_index(rows).items():
            if idx not in parsed or len(s) == 0:
                continue
            (steps, relations), correct = parsed[idx]
            values = torch.as_tensor(s, dtype=torch.float64)
            top = set(torch.argsort(values, descending=True, stable=True)[: default_k(len(s), fraction)].tolist())
            for k, positions in enumerate(steps, start=1):
                if positions:
                    per_step.setdefault(k, []).append(sum(j in top for j in positions) / len(positions))
            first = next((i for i, (rel, _) in enumerate(relations) if rel == "~"), None)
            if correct is False and first is not None:
                after = [pos for rel, pos in relations[first + 1 :] if rel == "=" and pos is not None]
                if after and relations[first][1] is not None:
                    w = gate(values[None].float(), torch.ones(1, len(s), dtype=torch.bool), **settings)[0]
                    erring.append(float(w[relations[first][1]]))
                    later.append(float(w[after].mean()))
                    erring_wins.append(float(erring[-1] > later[-1]))
        out["by_step"][scorer] = {str(k): spread(v) for k, v in sorted(per_step.items())}
        out["erring"][scorer] = {"erring_weight": spread(erring), "later_correct_weight": spread(later),
                                 "share_erring_heavier": spread(erring_wins), "responses": len(erring)}
    return out


def step_attribution_text(steps: Mapping[str, Any]) -> str:
    """Recall of each chain step's decisive tokens, and the weight on the first erring relation of wrong
    responses against the later correct ones (:func:`step_attribution`), as a Markdown section."""
    by_step = steps.get("by_step") or {}
    numbers = sorted({int(k) for s in by_step.values() for k in s}, key=int)
    if not numbers:
        return ""
    rows = [[METHOD_NAMES.get(scorer, scorer)] + [fmt_interval(s.get(str(k)) or {}) for k in numbers]
            for scorer, s in by_step.items()]
    gate = steps.get("gate") or {}
    erring = steps.get("erring") or {}
    erring_rows = [[METHOD_NAMES.get(scorer, scorer), fmt_interval(e.get("erring_weight") or {}),
                    fmt_interval(e.get("later_correct_weight") or {}),
                    fmt_num((e.get("share_erring_heavier") or {}).get("mean"), 0, 100), e.get("responses")]
                   for scorer, e in erring.items()]
    pct = round(100 * float(steps.get("fraction", 0.1)))
    return (f"\n### Per chain step\n\nShare of step k's decisive tokens in each scorer's top {pct}% of the response "
            "(mean [95% interval] over responses):\n\n"
            + markdown_table(["Scorer"] + [f"step {k}" for k in numbers], rows)
            + f"\n\nWrong responses whose first sloppy step (`~`) is followed by an exact one (`=`): the gate's weight "
            f"(tau {gate.get('tau')}, beta {gate.get('beta')}) on the erring relation and the mean on the later "
            "correct relations, and the share of responses where the erring one weighs more:\n\n"
            + markdown_table(["Scorer", "erring `~`", "later `=`", "erring heavier, %", "responses"], erring_rows)
            + "\n")
