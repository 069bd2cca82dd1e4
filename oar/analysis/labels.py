"""How tables and figures name methods, probes and benchmarks, and the order methods are shown in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oar.analysis.formatting import is_missing

METHOD_NAMES = {
    "base": "Base model",
    "grpo": "GRPO",
    "truth": "truth gate",
    "truth_graded": "graded truth gate",
    "truth_final": "final-step truth gate",
    "truth_early": "earlier-steps truth gate",
    "oar_p": "OAR-P",
    "oar_g": "OAR-G",
    "oar_g_rescue": "OAR-G, last step held",
    "oar_g_placebo": "OAR-G, as many others held",
    "truth_dose": "truth gate, last step at a ratio",
    "grad_norm": "grad-norm",
    "entropy": "entropy",
    "position": "position",
    "random": "random",
}
METHOD_ORDER = tuple(METHOD_NAMES)
PROBE_NAMES = {"lt_logits": "LT-Logits", "as_mean": "AS-Mean", "as_joint": "AS-Joint"}
BENCHMARK_NAMES = {"arith_test": "Arith (held-out)", "gsm8k_test": "GSM8K", "math500": "MATH500", "math_test": "MATH",
                   "aime24": "AIME24", "aime25": "AIME25", "amc23": "AMC23", "average": "Avg."}
# one-sided gates, by their tau: every token pushed up (0) or only down (1)
GATE_NAMES = {0.0: "boost-only", 1.0: "suppress-only"}


def method_rank(method: str) -> int:
    """Where a method is shown: the order of :data:`METHOD_NAMES`, unknown methods last."""
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else 99


def in_method_order(methods) -> list[str]:
    return sorted(methods, key=method_rank)


def method_label(method: str, tau: Any = None, beta: Any = None, probe: Any = None, show: Sequence[str] = ()) -> str:
    """``OAR-G``, or with variant settings: ``OAR-G (tau 0.0, boost-only)``, ``OAR-P (AS-Joint)``."""
    label = METHOD_NAMES.get(method, method)
    extra = []
    if "tau" in show and not is_missing(tau):
        note = f", {GATE_NAMES[float(tau)]}" if float(tau) in GATE_NAMES else ""
        extra.append(f"tau {float(tau):g}{note}")
    if "beta" in show and not is_missing(beta):
        extra.append(f"beta {float(beta):g}")
    if "probe" in show and not is_missing(probe):
        extra.append(PROBE_NAMES.get(probe, probe))
    return label + (f" ({', '.join(extra)})" if extra else "")


def variant_order(row: Mapping[str, Any]) -> tuple:
    """Sort key of a variant row: method order, then tau, beta and probe (missing settings first)."""
    return (method_rank(row["method"]),
            -1 if is_missing(row.get("tau")) else float(row["tau"]),
            -1 if is_missing(row.get("beta")) else float(row["beta"]),
            "" if is_missing(row.get("probe")) else str(row["probe"]))
