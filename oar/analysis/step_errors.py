"""Where a chain policy's arithmetic goes wrong, step by step, and the declared tests of that pattern
(``analysis.mechanism.step_errors``).

Counting. Each evaluation response's equations, in the reasoning before its conclusion, are judged
against their own written operands (:func:`oar.data.chains.step_errors`): sloppy (``~``) or wrong (an
exact-looking ``=`` with a wrong result). Per run, step k's share (k = 1..K, K the task's steps) is the
share of the responses that wrote a k-th equation whose k-th equation errs that way; equations past the
K-th are not counted. From the per-step shares: ``earlier`` (the mean over steps 1..K-1), ``last`` (step
K, the restatement the answer is copied from), ``all`` (the mean over the K steps) and
``last_minus_earlier``. Each step weighs alike in a mean, however many responses reach it.

Tests. Each declared test reads one arm against the baseline, paired by seed, on one outcome of the
wrong-``=`` share, with its test fixed before the runs as in :mod:`oar.analysis.mechanism` (greater or
less: one-sided paired t-test against ``margin``, 0 when left out; two-sided; equivalent: TOST within
``±margin``). On ``last_minus_earlier`` the paired difference is the arm's excess over the baseline at the
last step minus its excess at the earlier steps. Holm runs over the declared tests, a family of its own
beside the accuracy contrasts; Wilcoxon's signed-rank test on the same differences is the declared
sensitivity analysis (Holm over it too). A declared run missing on a declared seed stops the reading,
naming it: the family never shrinks to what has run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oar.analysis.formatting import fmt_cell, fmt_decision, fmt_num, fmt_p, markdown_table
from oar.analysis.mechanism import arm_intervals, test_problems
from oar.analysis.statistics import declared_test, holm, wilcoxon_shift
from oar.data.chains import FINAL, step_errors
from oar.evaluation.benchmark import SAMPLES_FILE
from oar.files import read_jsonl

KEY = "analysis.mechanism.step_errors"
KINDS = ("wrong", "sloppy")
OUTCOMES = ("earlier", "last", "all", "last_minus_earlier")
CONCLUSION = FINAL.split("\\")[0].rstrip()  # "Therefore, the final answer is"


# ------------------------------------------------------------------------------------ counting


def response_step_errors(response: str, steps: int) -> list[str | None]:
    """The judgement of each of the first ``steps`` equations of a response's reasoning (the text before
    its conclusion): "sloppy", "wrong" or None."""
    return step_errors(response.split(CONCLUSION)[0])[:steps]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan  # a nan share stays nan


def run_shares(responses: Iterable[str], steps: int) -> dict[str, float]:
    """One run's step-error shares: ``responses``, and per kind (``wrong``, ``sloppy``) ``<kind>_<k>`` for
    k = 1..steps (nan where no response wrote a k-th equation) and ``<kind>_<outcome>`` for each of
    :data:`OUTCOMES`."""
    counts = {kind: [0] * steps for kind in KINDS}
    present = [0] * steps
    n = 0
    for response in responses:
        n += 1
        for k, error in enumerate(response_step_errors(response, steps)):
            present[k] += 1
            if error:
                counts[error][k] += 1
    row: dict[str, float] = {"responses": n}
    for kind in KINDS:
        shares = [c / p if p else math.nan for c, p in zip(counts[kind], present)]
        row.update({f"{kind}_{k + 1}": s for k, s in enumerate(shares)})
        row[f"{kind}_earlier"] = _mean(shares[:-1])
        row[f"{kind}_last"] = shares[-1] if shares else math.nan
        row[f"{kind}_all"] = _mean(shares)
        row[f"{kind}_last_minus_earlier"] = row[f"{kind}_last"] - row[f"{kind}_earlier"]
    return row


def read_run(samples: str | Path, steps: int) -> dict[str, float]:
    """:func:`run_shares` of an evaluation's ``samples.jsonl``."""
    return run_shares((r["response"] for r in read_jsonl(samples)), steps)


def samples_by_run(summaries: Iterable[str | Path]) -> dict[str, Path]:
    """Run id -> its ``samples.jsonl``, from evaluation summaries ``<results>/eval/<model>/<spec>/<benchmark>/
    summary.json`` (the samples lie beside the summary, which the evaluation writes last)."""
    out = {}
    for summary in map(Path, summaries):
        run = "/".join(summary.parts[-4:-2])
        samples = summary.with_name(SAMPLES_FILE)
        if not samples.is_file():
            raise FileNotFoundError(f"{run}: its evaluation summary {summary} has no {SAMPLES_FILE} beside it")
        out[run] = samples
    return out


def step_error_frame(samples: Mapping[str, str | Path], meta: Mapping[str, Mapping[str, Any]],
                     steps: int) -> pd.DataFrame:
    """One row per run: run, model, method, seed (from ``meta``, run id -> its metadata) and
    :func:`read_run` of its samples."""
    rows = []
    for run, path in samples.items():
        if run not in meta:
            raise ValueError(f"{KEY}: no metadata (model, method, seed) for run {run}")
        m = meta[run]
        rows.append({"run": run, "model": m["model"], "method": m["method"], "seed": int(m["seed"]),
                     **read_run(path, steps)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ the design


def check_design(design: Mapping[str, Any] | None, methods: Sequence[str], steps: int | None,
                 benchmark: str) -> list[tuple[str, str]]:
    """Problems of a declared step-error family, each (key, message), against runs.main's methods and the
    steps of the benchmark it is read on; none when nothing is declared."""
    if not design:
        return []
    problems = []
    if steps is None or steps < 2:
        problems.append((KEY, f"read on {benchmark}, which is not a chain task of 2 or more steps "
                              f"(steps: {steps}): no earlier and last steps to compare"))
    baseline = design.get("baseline")
    if baseline not in methods:
        problems.append((f"{KEY}.baseline", f"{baseline!r} is not run in runs.main.methods {list(methods)}"))
    tests = design.get("tests") or []
    names = [t.get("name") for t in tests]
    if not names:
        problems.append((f"{KEY}.tests", "no test declared"))
    if len(set(names)) != len(names):
        problems.append((f"{KEY}.tests", f"test names repeat: {names}"))
    for i, t in enumerate(tests):
        k = f"{KEY}.tests[{i}]"
        arm = t.get("arm")
        if arm not in methods or arm == baseline:
            problems.append((f"{k}.arm", f"{arm!r}: an arm of runs.main.methods {list(methods)} other than the "
                                         f"baseline {baseline!r}"))
        if t.get("outcome") not in OUTCOMES:
            problems.append((f"{k}.outcome", f"{t.get('outcome')!r} is not one of {list(OUTCOMES)}"))
        problems += test_problems(k, t.get("test"), t.get("margin"), "the 0-1 share scale")
    alpha = design.get("alpha", 0.05)
    if not isinstance(alpha, (int, float)) or not 0 < alpha <= 0.2:
        problems.append((f"{KEY}.alpha", f"{alpha!r} is outside (0, 0.2]"))
    return problems


# ------------------------------------------------------------------------------------ the reading


def paired_values(frame: pd.DataFrame, model: str, arm: str, baseline: str, column: str,
                  seeds: Sequence[int]) -> list[float]:
    """Per declared seed, the arm's ``column`` minus the baseline's. A missing run, or one whose value is
    undefined (no response wrote the step), raises naming it."""
    f = frame[frame["model"] == model]
    have = {(r["method"], int(r["seed"])): float(r[column]) for r in f.to_dict("records")}
    missing = [f"{model}/{m} seed {s}" for s in seeds for m in (arm, baseline) if (m, int(s)) not in have]
    if missing:
        raise ValueError(f"{KEY}: declared runs missing: {', '.join(missing[:6])}"
                         + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
                         + "; Holm over the tests that can be read would test a smaller family")
    undefined = [f"{model}/{m} seed {s}" for s in seeds for m in (arm, baseline) if math.isnan(have[(m, int(s))])]
    if undefined:
        raise ValueError(f"{KEY}: {column} is undefined (no response wrote that step) for {', '.join(undefined)}")
    return [have[(arm, int(s))] - have[(baseline, int(s))] for s in seeds]


def _signed_rank_p(d: Sequence[float], test: str, margin: float) -> float:
    """The declared test's p-value by Wilcoxon's signed-rank test (the sensitivity analysis)."""
    if test == "equivalent":
        low, high = wilcoxon_shift(d, -margin, "greater")["p"], wilcoxon_shift(d, margin, "less")["p"]
        return math.nan if math.isnan(low) or math.isnan(high) else max(low, high)
    return wilcoxon_shift(d, margin, test)["p"]


def read_tests(frame: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int]) -> pd.DataFrame:
    """Each declared test of ``design`` (the mechanism design: ``model`` and ``step_errors``) on the
    declared seeds: ``mean`` of the paired differences of the wrong-``=`` outcome with its 95% interval,
    the declared test's ``p`` (and for ``equivalent`` the 90% interval TOST reads), Holm's ``p_holm`` over
    the family, ``decided`` (Holm p below alpha), and the same by the signed-rank test (``p_signed_rank``,
    ``p_signed_rank_holm``, ``decided_signed_rank``)."""
    declared = design["step_errors"]
    alpha = float(declared.get("alpha", 0.05))
    rows = []
    for t in declared["tests"]:
        d = paired_values(frame, design["model"], t["arm"], declared["baseline"], f"wrong_{t['outcome']}", seeds)
        margin = t.get("margin")
        rows.append({"name": t["name"], "arm": t["arm"], "baseline": declared["baseline"], "outcome": t["outcome"],
                     "test": t["test"], "margin": margin, **declared_test(d, t["test"], margin, alpha),
                     "p_signed_rank": _signed_rank_p(d, t["test"], float(margin or 0.0))})
    out = pd.DataFrame(rows)
    out["family_size"] = len(out)
    for p in ("p", "p_signed_rank"):
        out[f"{p}_holm"] = holm(list(out[p]))
    out["decided"] = [not math.isnan(p) and p < alpha for p in out["p_holm"]]
    out["decided_signed_rank"] = [not math.isnan(p) and p < alpha for p in out["p_signed_rank_holm"]]
    return out


def arm_step_means(frame: pd.DataFrame, model: str, arms: Sequence[str], seeds: Sequence[int], steps: int,
                   kind: str = "wrong") -> pd.DataFrame:
    """Per arm, each step's ``kind`` share and the earlier-steps and all-steps shares, as the mean over
    the declared seeds with its 95% t-interval (``<column>``, ``<column>_low``, ``<column>_high``)."""
    f = frame[(frame["model"] == model) & frame["seed"].isin([int(s) for s in seeds])]
    columns = [*(f"{kind}_{k}" for k in range(1, steps + 1)), f"{kind}_earlier", f"{kind}_all"]
    return arm_intervals(f, arms, columns)


# ------------------------------------------------------------------------------------ the report


def _outcome_label(outcome: str, steps: int) -> str:
    return {"earlier": f"steps 1-{steps - 1}", "last": f"step {steps}", "all": f"steps 1-{steps}",
            "last_minus_earlier": f"step {steps} minus steps 1-{steps - 1}"}[outcome]


def _verdict(r: Mapping[str, Any]) -> str:
    verdict = fmt_decision(r["test"], r["decided"], r["margin"])
    if r["decided_signed_rank"] != r["decided"]:
        verdict += "; the signed-rank test " + ("decides it" if r["decided_signed_rank"] else "does not")
    return verdict


def _means_table(means: pd.DataFrame, steps: int, kind: str) -> str:
    columns = [*(f"{kind}_{k}" for k in range(1, steps + 1)), f"{kind}_earlier", f"{kind}_all"]
    rows = [[r["method"], int(r["n_seeds"]), *(fmt_cell(r[c], r[f"{c}_low"], r[f"{c}_high"]) for c in columns)]
            for r in means.to_dict("records")]
    return markdown_table(["arm", "seeds", *(f"step {k}" for k in range(1, steps + 1)), f"steps 1-{steps - 1}",
                           "all steps"], rows, align="lr" + "r" * len(columns))


def step_errors_section(tests: pd.DataFrame, wrong: pd.DataFrame, sloppy: pd.DataFrame,
                        design: Mapping[str, Any], steps: int) -> str:
    """The mechanism report's section: the per-arm per-step shares (wrong ``=``, then sloppy ``~``) and the
    declared tests (:func:`read_tests`)."""
    declared = design["step_errors"]
    rows = []
    for r in tests.to_dict("records"):
        interval = fmt_cell(r["mean"], r["ci_low"], r["ci_high"])
        if r["test"] == "equivalent":
            interval += f"; 90% [{fmt_num(r['tost_low'], 1, 100.0)}, {fmt_num(r['tost_high'], 1, 100.0)}]"
        rows.append([r["name"], f"{r['arm']} - {r['baseline']}", _outcome_label(r["outcome"], steps), r["test"],
                     interval, fmt_p(r["p"]), fmt_p(r["p_holm"]), fmt_p(r["p_signed_rank"]),
                     fmt_p(r["p_signed_rank_holm"]), fmt_num(r["mde"], 1, 100.0), int(r["n_seeds"]), _verdict(r)])
    alpha = declared.get("alpha", 0.05)
    return (f"## Where the arms write wrong arithmetic on {design['model']}, step by step\n\n"
            f"Share of the evaluation responses whose step k is an exact-looking wrong result (`=` with a wrong "
            f"result, judged against the step's own written operands, so an error counts where it is made), "
            f"%, mean over the declared seeds [95% interval]; steps 1-{steps - 1}: the mean of those steps' "
            f"shares.\n\n" + _means_table(wrong, steps, "wrong")
            + "\nThe same for sloppy steps (`~`, an estimate the grammar allows):\n\n"
            + _means_table(sloppy, steps, "sloppy")
            + "\n### Declared tests of the wrong-`=` pattern\n\n"
            + markdown_table(["test", "arms", "wrong `=` share on", "test", "mean, points [95%]", "p", "Holm p",
                              "signed-rank p", "signed-rank Holm p", "MDE 80%", "seeds", "decision"], rows,
                             align="llllrrrrrrrl")
            + f"\nEach test reads the arm's wrong-`=` share minus {declared['baseline']}'s on the same seed, "
              f"declared with its test before the runs; on step {steps} minus steps 1-{steps - 1} the difference "
              f"is the arm's excess at the last step minus its excess at the earlier ones. greater/less: "
              f"one-sided paired t-test against the margin; two-sided: paired t-test of 0; equivalent: two "
              f"one-sided tests within ±margin (90% interval inside it). Holm p: over these {len(tests)} tests "
              f"at alpha {alpha}, a family of its own, separate from the accuracy contrasts above. The "
              f"signed-rank columns are the declared sensitivity analysis (Wilcoxon's signed-rank test on the "
              f"same differences, Holm over the {len(tests)}); the decision notes where it decides otherwise. "
              f"MDE 80%: the two-sided 5% paired t-test's at the observed SD.\n")


def step_error_report(frame: pd.DataFrame, design: Mapping[str, Any], seeds: Sequence[int],
                      steps: int) -> tuple[pd.DataFrame, str]:
    """The declared tests (:func:`read_tests`) and the report section, the arms shown being the baseline
    and the tests' arms, then any other method the frame holds for the model."""
    tests = read_tests(frame, design, seeds)
    declared = design["step_errors"]
    named = [declared["baseline"], *(t["arm"] for t in declared["tests"])]
    others = list(frame.loc[frame["model"] == design["model"], "method"])
    arms = list(dict.fromkeys(named + others))
    means = {kind: arm_step_means(frame, design["model"], arms, seeds, steps, kind) for kind in KINDS}
    return tests, step_errors_section(tests, means["wrong"], means["sloppy"], design, steps)
