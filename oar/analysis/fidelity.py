"""How closely do the cheap scorers follow OAR-P? Spearman and top-k overlap of each scorer's held-out
scores with the reference scorer's, per response, and the proxy-fidelity table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_num, markdown_table
from oar.analysis.labels import METHOD_NAMES, PROBE_NAMES
from oar.analysis.run_outputs import scores_by_index
from oar.analysis.statistics import spread


def proxy_fidelity(reference: Sequence[Mapping[str, Any]], scorers: Mapping[str, Sequence[Mapping[str, Any]]],
                   fraction: float = 0.1) -> dict[str, Any]:
    """Spearman and top-k overlap of each scorer with the reference scorer (OAR-P), per response.

    Responses with fewer than 2 reasoning tokens are skipped; a constant score vector gives an
    undefined Spearman (counted in ``n_undefined``).
    """
    from oar.method.metrics import spearman, topk_overlap

    ref = scores_by_index(reference)
    summary, per_response = {}, []
    for name, rows in scorers.items():
        other = scores_by_index(rows)
        rhos, overlaps = [], []
        for idx, r in ref.items():
            if len(r) < 2:
                continue
            o = other.get(idx)
            if o is None or len(o) != len(r):
                raise ValueError(f"scorer {name!r}: scores of response {idx} missing or of another length")
            rho, ov = spearman(o, r), topk_overlap(o, r, fraction)
            rhos.append(rho)
            overlaps.append(ov)
            per_response.append({"scorer": name, "index": idx, "spearman": rho, "topk_overlap": ov})
        summary[name] = {"spearman": spread(rhos), "topk_overlap": spread(overlaps)}
    return {"fraction": fraction, "summary": summary, "per_response": per_response}


def fidelity_table(fidelity: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """Per probe and scorer: Spearman and top-10% overlap with the reference (mean [95% interval] over
    held-out responses), how many responses had a defined value, and the scoring time."""
    rows = []
    for probe, result in fidelity["probes"].items():
        for scorer, s in result["summary"].items():
            rows.append({"probe": probe, "scorer": scorer, "spearman_mean": s["spearman"]["mean"],
                         "spearman_ci_low": s["spearman"].get("ci_low"),
                         "spearman_ci_high": s["spearman"].get("ci_high"),
                         "spearman_std": s["spearman"]["std"], "topk_overlap_mean": s["topk_overlap"]["mean"],
                         "topk_overlap_ci_low": s["topk_overlap"].get("ci_low"),
                         "topk_overlap_ci_high": s["topk_overlap"].get("ci_high"),
                         "topk_overlap_std": s["topk_overlap"]["std"], "n": s["spearman"]["n"],
                         "n_undefined": s["spearman"]["n_undefined"],
                         "scoring_wall_s": (result.get("wall_s") or {}).get(scorer)})
    frame = pd.DataFrame(rows)
    ref = METHOD_NAMES.get(fidelity["reference"], fidelity["reference"])
    md = markdown_table(
        ["Probe", "Scorer", f"Spearman with {ref} [95%]", "top-10% overlap [95%]", "n", "undefined", "scoring s"],
        [[PROBE_NAMES.get(r["probe"], r["probe"]), METHOD_NAMES.get(r["scorer"], r["scorer"]),
          fmt_cell(r["spearman_mean"], r["spearman_ci_low"], r["spearman_ci_high"], scale=1.0, digits=3),
          fmt_cell(r["topk_overlap_mean"], r["topk_overlap_ci_low"], r["topk_overlap_ci_high"], scale=1.0, digits=3),
          r["n"], r["n_undefined"], fmt_num(r["scoring_wall_s"], 1)] for r in rows],
        align="llrrrrr")
    return frame, (f"## Proxy fidelity (against {ref})\n\n" + md +
                   "\nMean over held-out responses with a 95% t-interval; n responses with a defined value.\n")
