"""Which pretraining candidate becomes a shipped policy, by a rule declared before any RL run on any of them.

``analysis.policy_selection`` (config/studies/policy-selection.yaml) lists candidates in order and a rule that reads
only the untrained policy's held-out accuracy and the baseline's pilot runs on seeds no test uses: the
untrained accuracy within a range, at most ``max_derailed`` pilot runs ending below it, and a mean gain of
at least ``min_mean_gain``. The first candidate in order that passes is chosen and later ones are not run;
if none passes, the one with the fewest derailed pilot runs (ties: the larger mean gain) is chosen, and the
table says no candidate passed. No arm that a test compares is ever read.

The rule is read lazily, which changes no outcome: a candidate whose untrained accuracy is out of range
fails whatever its pilots show, so its pilots are run only if the fallback comes to need them (no
candidate passes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oar.analysis.formatting import markdown_table

KEY = "analysis.policy_selection"


def check_rule(rule: Mapping[str, Any], models: Sequence[str], main: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems of a declared selection rule, each (key, message), against the config's models and runs.main."""
    problems = []
    unknown = [c for c in rule["candidates"] if c not in models]
    if unknown:
        problems.append((f"{KEY}.candidates", f"{unknown} are not keys of models"))
    low, high = rule["untrained_accuracy"]
    if not low < high:
        problems.append((f"{KEY}.untrained_accuracy", f"[{low}, {high}]: the low end must be below the high end"))
    if list(main.get("methods") or []) != [rule["baseline"]]:
        problems.append((f"{KEY}.baseline",
                         f"the pilot runs only the baseline; runs.main.methods is {main.get('methods')}"))
    if sorted(main.get("seeds") or []) != sorted(rule["pilot_seeds"]):
        problems.append((f"{KEY}.pilot_seeds", f"{rule['pilot_seeds']} must be runs.main.seeds {main.get('seeds')}"))
    if sorted(main.get("models") or []) != sorted(rule["candidates"]):
        problems.append((f"{KEY}.candidates", f"runs.main.models {main.get('models')} must be the candidates"))
    return problems


def untrained_in_range(untrained: float, rule: Mapping[str, Any]) -> bool:
    low, high = rule["untrained_accuracy"]
    return low <= untrained <= high


def read_candidate(name: str, untrained: float, pilot: Mapping[int, float] | None,
                   rule: Mapping[str, Any]) -> dict[str, Any]:
    """One candidate against the rule: ``untrained`` its held-out accuracy (0-1), ``pilot`` the baseline's
    final accuracy per pilot seed (every declared seed), or None where the untrained accuracy already fails
    the rule and the pilots have not been run (``finals`` is then None)."""
    low, high = rule["untrained_accuracy"]
    reasons = []
    if not untrained_in_range(untrained, rule):
        reasons.append(f"untrained {100 * untrained:.2f}% outside [{100 * low:g}, {100 * high:g}]%")
    if pilot is None:
        if not reasons:
            raise ValueError(f"{KEY}: candidate {name}'s untrained accuracy is in range: its pilots must be read")
        return {"candidate": name, "untrained": untrained, "finals": None, "derailed": None, "gain": None,
                "passes": False, "reasons": reasons}
    missing = [s for s in rule["pilot_seeds"] if s not in pilot]
    if missing:
        raise ValueError(f"{KEY}: candidate {name} has no pilot run of seeds {missing}")
    finals = [float(pilot[s]) for s in rule["pilot_seeds"]]
    derailed = sum(f < untrained for f in finals)
    gain = sum(finals) / len(finals) - untrained
    if derailed > rule["max_derailed"]:
        reasons.append(f"{derailed} pilot runs below the untrained accuracy (at most {rule['max_derailed']})")
    if gain < rule["min_mean_gain"]:
        reasons.append(f"mean gain {100 * gain:+.1f} points (at least {100 * rule['min_mean_gain']:+.1f})")
    return {"candidate": name, "untrained": untrained, "finals": finals, "derailed": derailed, "gain": gain,
            "passes": not reasons, "reasons": reasons}


def choose(readings: Sequence[Mapping[str, Any]], rule: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chosen candidate: the first that passes; after every candidate has been read without one, the
    fewest derailed (ties: the larger mean gain); None while candidates remain to be run or a candidate's
    pilots, which the fallback needs, have not been read."""
    for r in readings:
        if r["passes"]:
            return {"candidate": r["candidate"], "passed": True}
    if len(readings) < len(rule["candidates"]) or any(r["finals"] is None for r in readings):
        return None
    best = min(readings, key=lambda r: (r["derailed"], -r["gain"]))
    return {"candidate": best["candidate"], "passed": False}


def selection_table(readings: Sequence[Mapping[str, Any]], rule: Mapping[str, Any], chosen: Mapping[str, Any] | None,
                    declared: str = "") -> str:
    rows = [[r["candidate"], f"{100 * r['untrained']:.2f}"]
            + (["not run (fails on its untrained accuracy)", "–", "–"] if r["finals"] is None else
               [", ".join(f"{100 * f:.1f}" for f in r["finals"]), f"{r['derailed']}/{len(r['finals'])}",
                f"{100 * r['gain']:+.1f}"])
            + ["passes" if r["passes"] else "fails: " + "; ".join(r["reasons"])] for r in readings]
    low, high = rule["untrained_accuracy"]
    text = (f"## Policy selection: {rule['baseline']} pilots on seeds "
            f"{rule['pilot_seeds'][0]}-{rule['pilot_seeds'][-1]}\n\n"
            f"Rule, declared before any run: untrained accuracy in [{100 * low:g}, {100 * high:g}]%, at most "
            f"{rule['max_derailed']} pilot runs ending below it, a mean gain of at least "
            f"{100 * rule['min_mean_gain']:g} points; the first candidate in order that passes is chosen.\n\n"
            + markdown_table(["candidate", "untrained, %", f"{rule['baseline']} final, % (per pilot seed)",
                              "derailed", "mean gain, points", "rule"], rows, align="lrrrrl"))
    if chosen is None:
        text += f"\nNo candidate chosen yet: {len(readings)} of {len(rule['candidates'])} read.\n"
    elif chosen["passed"]:
        text += f"\n**Chosen: {chosen['candidate']}** (the first candidate that passes; later ones were not run).\n"
    else:
        text += (f"\n**No candidate passes.** Chosen by the declared fallback (fewest derailed pilot runs, then the "
                 f"larger mean gain): **{chosen['candidate']}**.\n")
    return text + declared
