"""The learning track: does an entry train a frozen policy better than GRPO?

A submission names one or more entries: scorers, which train through OAR's gate (``ktae``: KTAE's magnitude
there), advantage rules, which add their own term to GRPO's advantages with no gate (``ktae_rule``: KTAE's own
rule as its authors combine it, ``oar.method.advantage_rules``), or a TRL setting such as
``grpo_top_entropy``; the table says which each entry is (:func:`what_it_trains`). Each trains
from the frozen policy on N paired seeds beside GRPO and the truth gate on the same seeds (a seed fixes
the prompts and the first rollouts for every arm), with the training, evaluation and every setting of the
policy's own config (:data:`DESIGNS`: ``make run``'s design for ``chain_f1``), so that runs the workflow
already made are reused. ``workflow_scripts/bench_learning.py`` (``make bench-learning``) runs them
through the workflow; :func:`analyse` then applies the declared paired analysis:

- each entry minus GRPO in final held-out accuracy over the paired seeds: mean, 95% t-interval, paired
  t-test; Holm's correction within the entries submitted together (the family); the minimum detectable
  effect at 80% power, unadjusted and at Holm's strictest level;
- Wilcoxon's signed-rank test of the same differences as a sensitivity analysis (Holm-adjusted likewise);
- each entry minus the truth gate (the right scores through the same gate), unadjusted;
- derailment as an outcome of its own: the runs of every arm that end below the untrained policy;
- the verdict, harm and gain apart: ``gain`` or ``harm`` where Holm's p < 0.05 (the sign says which),
  else ``not decided`` (an interval that includes 0 is no evidence of equality).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from oar.analysis.statistics import ALPHA, holm, holm_alpha, mde, paired_t, seed_interval, wilcoxon_shift
from oar.bench.leaderboard import ROOT, _interval, commit, folder, read_entries, write_entry

BASELINE, CEILING = "grpo", "truth"
# Each frozen policy's learning design: the config that trains and evaluates it, where its runs go, and the
# default number of paired seeds (the config's own main seeds).
DESIGNS = {
    "chain_f1": {"config": "config/config.yaml", "results": "results"},
    "chain_d8": {"config": "config/studies/decisive.yaml", "results": "results-bench-d8"},
}
# Entries trained by a TRL setting rather than a scorer through the gate: their method and trainer keys.
TRAINER_ENTRIES = {"grpo_top_entropy": {"method": "grpo", "trainer": {"top_entropy_quantile": 0.2}}}


def what_it_trains(entry: str) -> str:
    """One line on what an entry's arm trains, so that its "minus GRPO" reads as what it is."""
    from oar.method.advantage_rules import rule_spec
    from oar.method.scorer_registry import scorer_spec
    from oar.method.weight_transforms import transform_spec

    if entry in TRAINER_ENTRIES:
        return f"GRPO with TRL's {TRAINER_ENTRIES[entry]['trainer']}"
    rule = rule_spec(entry)
    if rule is not None:
        return f"{rule.description}, no gate"
    transform = transform_spec(entry)
    if transform is not None:
        return f"{transform.description}, through OAR's gate"
    spec = scorer_spec(entry)
    return f"{spec.description or entry}, through OAR's gate (tau, beta, floor of the policy's config)"


class LearningError(ValueError):
    """A learning-track request that cannot be read; the message names the run, file or key."""


def design_config(policy: str, entries: Sequence[str], seeds: Sequence[int] | None = None,
                  trainer_entry: str | None = None) -> tuple[dict, dict]:
    """The validated workflow config that trains ``entries`` (scorers through the gate) beside the policy's
    own arms, and the overlay that makes it from the policy's config: ``runs.main`` trains the policy
    alone with the config's methods plus the entries, on ``seeds`` (default: the config's). With
    ``trainer_entry`` (:data:`TRAINER_ENTRIES`) every run takes that entry's trainer setting, in a results
    folder of its own (its run ids are the plain ones')."""
    import yaml

    from oar.experiment.config_schema import validate
    from oar.experiment.runs import deep_merge
    from oar.models import frozen

    if policy not in DESIGNS:
        raise LearningError(f"no learning design for policy {policy!r}; designed: {sorted(DESIGNS)}")
    design = DESIGNS[policy]
    base = yaml.safe_load((ROOT / design["config"]).read_text(encoding="utf-8"))
    main = base["runs"]["main"]
    methods = list(dict.fromkeys([*main["methods"], *entries]))
    # the submission declares its own family (its entries), so the config's primary comparisons are not read
    overlay: dict[str, Any] = {"results": design["results"], "analysis": {"primary": None},
                               "runs": {"main": {"models": [policy], "methods": methods,
                                                 "seeds": [int(s) for s in (seeds or main["seeds"])]}}}
    shipped = frozen.index().get(policy)
    if shipped:  # trained from the shipped file, whatever recipe seed the policy's config pretrains
        overlay["models"] = {policy: {"seed": shipped["recipe"]["seed"],
                                      "frozen": {"policy": policy, "sha256": frozen.weights_sha256(policy)}}}
    if trainer_entry:
        overlay["results"] = f"{design['results']}-{trainer_entry}"
        overlay["training"] = {"trainer": dict(TRAINER_ENTRIES[trainer_entry]["trainer"])}
    return validate(deep_merge(base, overlay)), overlay


def parts(policy: str, entries: Sequence[str], seeds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """A submission as the workflow runs it: per config (the plain one, and one per trainer entry) its
    overlay, its run registry and the run ids of the arms it trains, ``{arm: [run id per seed]}``."""
    from oar.experiment.config_schema import trainer_keys
    from oar.experiment.runs import Registry

    unknown = [e for e in entries if e in (BASELINE, CEILING)]
    if unknown:
        raise LearningError(f"{unknown[0]!r} is an arm of every submission, not an entry")
    scorers = [e for e in entries if e not in TRAINER_ENTRIES]
    out = []
    for trainer_entry, arms in [(None, [BASELINE, CEILING, *scorers]),
                                *((e, [e]) for e in entries if e in TRAINER_ENTRIES)]:
        config, overlay = design_config(policy, scorers if trainer_entry is None else [], seeds, trainer_entry)
        registry = Registry(config, trainer_keys())
        chosen = [int(s) for s in config["runs"]["main"]["seeds"]]
        ids = {arm: [registry.run_id(policy, TRAINER_ENTRIES[arm]["method"] if arm in TRAINER_ENTRIES else arm, s)
                     for s in chosen] for arm in arms}
        out.append({"overlay": overlay, "config": DESIGNS[policy]["config"], "registry": registry, "arms": ids,
                    "seeds": chosen})
    return out


def targets(part: Mapping[str, Any], policy: str) -> list[str]:
    """The evaluation summaries of a part the analysis reads (the untrained policy's with the plain part)."""
    runs = [r for ids in part["arms"].values() for r in ids]
    if BASELINE in part["arms"]:
        runs.insert(0, f"{policy}/base")
    return list(dict.fromkeys(part["registry"].summaries(runs)))


def read_outcomes(policy: str, entries: Sequence[str],
                  seeds: Sequence[int] | None = None) -> tuple[pd.DataFrame, float]:
    """Final accuracy per arm and seed (the mean over the config's benchmarks), and the untrained policy's;
    a missing evaluation stops naming its run and file."""
    from oar.analysis.run_outputs import read_summary

    def accuracy(registry, run: str) -> float:
        values = []
        for path in registry.summaries([run]):
            if not Path(path).is_file():
                raise LearningError(f"learning track: run {run} has no evaluation ({path}); train it first "
                                    f"(make bench-learning ENTRIES='{' '.join(entries)}' POLICY={policy})")
            values.append(float(read_summary(path)["pass@1"]))
        return sum(values) / len(values)

    rows, untrained = [], math.nan
    for part in parts(policy, entries, seeds):
        registry = part["registry"]
        if BASELINE in part["arms"]:
            untrained = accuracy(registry, f"{policy}/base")
        rows += [{"arm": arm, "seed": seed, "run": run, "final_accuracy": accuracy(registry, run)}
                 for arm, ids in part["arms"].items() for seed, run in zip(part["seeds"], ids)]
    return pd.DataFrame(rows), untrained


def analyse(outcomes: pd.DataFrame, entries: Sequence[str], untrained: float) -> pd.DataFrame:
    """The declared paired analysis of a submission (see the module), one row per arm."""
    by_seed = {arm: dict(zip(g["seed"], g["final_accuracy"])) for arm, g in outcomes.groupby("arm", sort=False)}
    rows = []
    for arm in [BASELINE, CEILING, *entries]:
        values = by_seed[arm]
        mean, low, high = seed_interval(list(values.values()))
        row: dict[str, Any] = {"arm": arm, "seeds": len(values), "accuracy": mean, "accuracy_low": low,
                               "accuracy_high": high, "derailed": sum(v < untrained for v in values.values()),
                               "untrained": untrained}
        if arm in entries:
            for other, prefix in ((BASELINE, "vs_grpo"), (CEILING, "vs_truth")):
                seeds = sorted(set(values) & set(by_seed[other]))
                d = [values[s] - by_seed[other][s] for s in seeds]
                t = paired_t(d)
                row.update({f"{prefix}_mean": t["mean"], f"{prefix}_low": t["ci_low"], f"{prefix}_high": t["ci_high"],
                            f"{prefix}_p": t["p"], f"{prefix}_sd": t["sd"], f"{prefix}_pairs": t["n"]})
                if other == BASELINE:
                    row.update(mde=t["mde"],
                               wilcoxon_p=wilcoxon_shift(d, 0.0, "two-sided")["p"] if len(d) > 1 else math.nan)
        rows.append(row)
    frame = pd.DataFrame(rows)
    is_entry = frame["arm"].isin(entries)
    family = int(is_entry.sum())
    for column, adjusted in (("vs_grpo_p", "p_holm"), ("wilcoxon_p", "wilcoxon_p_holm")):
        values = iter(holm(list(frame.loc[is_entry, column])))
        frame[adjusted] = [next(values) if e else math.nan for e in is_entry]
    frame["mde_holm"] = [mde(sd, n, alpha=holm_alpha(family)) if e else math.nan
                         for sd, n, e in zip(frame.get("vs_grpo_sd", math.nan), frame.get("vs_grpo_pairs", 0),
                                             is_entry)]
    frame["verdict"] = [("gain" if m > 0 else "harm") if e and p < ALPHA else ("not decided" if e else "")
                        for m, p, e in zip(frame.get("vs_grpo_mean", math.nan), frame["p_holm"], is_entry)]
    return frame


def run_record(policy: str, entries: Sequence[str], seeds: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """One leaderboard record per entry of a submission, each with the whole submission's analysis."""
    from oar.bench.response_set import BENCHMARK_VERSION
    from oar.models.frozen import weights_sha256

    outcomes, untrained = read_outcomes(policy, entries, seeds)
    frame = analyse(outcomes, entries, untrained)
    made = commit()
    rows = frame.to_dict("records")
    arms_rows = {r["arm"]: r for r in rows}
    return [{"entry": e, "track": "learning", "version": BENCHMARK_VERSION, "policy": policy,
             "policy_sha256": weights_sha256(policy), "submitted_with": list(entries),
             "seeds": sorted(int(s) for s in outcomes["seed"].unique()), "result": arms_rows[e],
             "grpo": arms_rows[BASELINE], "truth": arms_rows[CEILING],
             "runs": outcomes[outcomes["arm"] == e]["run"].tolist(), "made_with": made} for e in entries]


def _points(s: Mapping[str, Any], prefix: str) -> str:
    return _interval({"mean": s.get(f"{prefix}_mean"), "ci_low": s.get(f"{prefix}_low"),
                      "ci_high": s.get(f"{prefix}_high")}, 100, 1)


def learning_table(entries: Sequence[Mapping[str, Any]]) -> tuple[pd.DataFrame, str]:
    """The learning leaderboard of one policy and version: GRPO's and the truth gate's rows (of the newest
    submission), then every entry with its submission's analysis."""
    if not entries:
        raise ValueError("no entries to tabulate")
    newest = max(entries, key=lambda e: e["made_with"].get("created", ""))

    def accuracy(r: Mapping[str, Any]) -> str:
        return _interval({"mean": r["accuracy"], "ci_low": r["accuracy_low"], "ci_high": r["accuracy_high"]}, 100, 1)

    rows = [[f"`{arm}`", accuracy(newest[arm]), "", "", "", "", "", "",
             f"{newest[arm]['derailed']} of {newest[arm]['seeds']}", "",
             ""] for arm in (BASELINE, CEILING)]
    records, trains = [], []
    for e in sorted(entries, key=lambda e: -(e["result"].get("vs_grpo_mean") or -math.inf)):
        trains.append(f"- `{e['entry']}`: {what_it_trains(e['entry'])}")
        r = e["result"]
        rows.append([f"`{e['entry']}`", accuracy(r), _points(r, "vs_grpo"), f"{r['vs_grpo_p']:.3f}",
                     f"{r['p_holm']:.3f} ({len(e['submitted_with'])})",
                     f"{100 * r['mde']:.1f} / {100 * r['mde_holm']:.1f}",
                     f"{r['wilcoxon_p_holm']:.3f}", _points(r, "vs_truth"), f"{r['derailed']} of {r['seeds']}",
                     r["verdict"], e["made_with"]["commit"][:10] + ("+" if e["made_with"].get("dirty") else "")])
        records.append({"entry": e["entry"], **{k: v for k, v in r.items() if k != "arm"},
                        "submitted_with": " ".join(e["submitted_with"]), "commit": e["made_with"]["commit"]})
    header = ["arm", "final accuracy, % [95% CI]", "minus GRPO, points [95% CI]", "p", "Holm p (family)",
              "MDE, points (Holm)", "Wilcoxon Holm p", "minus truth gate, points [95% CI]", "below untrained",
              "verdict", "commit"]
    text = (f"Benchmark version {newest['version']}, policy `{newest['policy']}` (weights sha256 "
            f"`{newest['policy_sha256'][:16]}...`, untrained accuracy {100 * newest['grpo']['untrained']:.1f}%), "
            f"paired seeds {newest['seeds']}.\n\n" + "\n".join(
                ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(map(str, r)) + " |"
                                                                                 for r in rows]) + "\n"
            + "\nWhat each entry trains:\n\n" + "\n".join(trains) + "\n")
    return pd.DataFrame(records), text


def write_learning_table(out: str | Path, policy: str, version: int) -> tuple[Path, str]:
    from oar.analysis.table_file import write_table

    frame, text = learning_table(read_entries(out, "learning", policy, version))
    where = folder(out, "learning", policy, version)
    write_table(frame, f"## Token-credit benchmark: learning track, `{policy}`\n\n" + text,
                where / "leaderboard.csv", where / "leaderboard.md")
    return where / "leaderboard.md", text


def main(args) -> None:
    """``python -m oar.bench learning``: analyse a finished submission and add its rows."""
    import datetime

    from oar.bench.leaderboard import write_docs
    from oar.bench.response_set import BENCHMARK_VERSION

    records = run_record(args.policy, args.entries, args.seeds)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for record in records:
        record["made_with"]["created"] = created
        print(f"wrote {write_entry(args.out, 'learning', args.policy, BENCHMARK_VERSION, record['entry'], record)}")
    table, text = write_learning_table(args.out, args.policy, BENCHMARK_VERSION)
    print(text)
    print(f"wrote {table}")
    if args.docs:
        write_docs(args.docs, f"learning:{args.policy}", text)
        print(f"wrote the table into {args.docs}")
