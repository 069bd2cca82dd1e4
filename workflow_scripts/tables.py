"""Write one table (CSV + Markdown) from cached analysis files (Snakemake ``script:``; the tables
themselves are built by ``oar.analysis``, each in the module of its question). The table is the ``name``
wildcard."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import snakemake_only  # noqa: E402

# Under Snakemake this is the job's `snakemake` object; from the shell (--help included) it exits
# here, before the heavy imports below.
smk = snakemake_only(globals(), "tables.py", "the tables are built by oar.analysis") if __name__ == "__main__" else None

import pandas as pd  # noqa: E402

from oar.analysis.accuracy import accuracy_table  # noqa: E402
from oar.analysis.causal_recall import recall_table  # noqa: E402
from oar.analysis.cost import cost_table  # noqa: E402
from oar.analysis.fidelity import fidelity_table  # noqa: E402
from oar.analysis.gradient_share import gradient_share_table  # noqa: E402
from oar.analysis.grid import grid_table  # noqa: E402
from oar.analysis.length_sweep import length_sweep_table  # noqa: E402
from oar.analysis.outcomes import base_accuracy, threshold_rule  # noqa: E402
from oar.analysis.paired import paired_table  # noqa: E402
from oar.analysis.table_file import write_table  # noqa: E402


def _credit(smk):
    return pd.read_csv(smk.input.credit) if "credit" in smk.input.keys() else None


def _with_step_errors(frame, md, outcomes, design, smk):
    """The mechanism table with its step-error tests: their rows (kind "step error" after the contrasts'
    "contrast") and their section."""
    from oar.analysis import step_errors
    from oar.data.catalogue import chain_steps

    steps = chain_steps(smk.params.paired_benchmark)
    meta = outcomes.set_index("run")[["model", "method", "seed"]].to_dict("index")
    errors = step_errors.step_error_frame(step_errors.samples_by_run(smk.input.summaries), meta, steps)
    tests, section = step_errors.step_error_report(errors, design, design["seeds"], steps)
    return (pd.concat([frame.assign(kind="contrast"), tests.assign(kind="step error")], ignore_index=True),
            md + "\n" + section)


def build(smk):
    name = smk.wildcards.name
    p = smk.params
    if name == "main_table":
        return accuracy_table(pd.read_csv(smk.input.accuracy), p.benchmarks, "Main table",
                              methods=p.main_methods, credit=_credit(smk))
    if name == "ablation_gating":
        return accuracy_table(pd.read_csv(smk.input.accuracy), p.benchmarks,
                              "Gating ablation (bi-level vs boost-only vs suppress-only)",
                              show=("tau",), credit=_credit(smk), gate_tests=True)
    if name == "ablation_probe":
        return accuracy_table(pd.read_csv(smk.input.accuracy), p.benchmarks, "Outcome-probe ablation",
                              show=("probe",), credit=_credit(smk))
    if name == "controls":
        return accuracy_table(pd.read_csv(smk.input.accuracy), p.benchmarks, "Controls",
                              credit=_credit(smk))
    if name == "ablation_grid":
        return grid_table(pd.read_csv(smk.input.accuracy), p.benchmarks)
    if name == "causal_recall":
        return recall_table(json.loads(Path(smk.input.recall).read_text()))
    if name == "fidelity":
        return fidelity_table(json.loads(Path(smk.input.fidelity).read_text()))
    if name == "paired_differences":
        return paired_table(pd.read_csv(smk.input.differences),
                            threshold_rule(p.reward_threshold, p.reward_gain),
                            primary=p.primary, not_run=p.not_run)
    if name == "decisive":
        from oar.analysis import decisive

        metric = (p.primary or {}).get("metric", "final_accuracy")
        return decisive.decisive_table(
            decisive.level_readings(pd.read_csv(smk.input.differences), p.levels, metric),
            decisive.level_trends(pd.read_csv(smk.input.outcomes), p.levels, p.baseline, metric), p.baseline)
    if name == "upper_bound":
        from oar.analysis import upper_bound
        acc = pd.read_csv(smk.input.accuracy)
        base = base_accuracy(acc, p.paired_benchmark)
        design = p.upper_bound
        if design["model"] not in base:
            raise ValueError(f"no {p.paired_benchmark} accuracy of the untrained {design['model']} (the derailment "
                             "outcome's reference)")
        reading = upper_bound.read_upper_bound(pd.read_csv(smk.input.outcomes), design, design["seeds"],
                                               base[design["model"]], pd.read_csv(smk.input.curves))
        return upper_bound.upper_bound_table(reading, design, upper_bound.plan(design))
    if name == "mechanism":
        from oar.analysis import mechanism
        design = p.mechanism
        outcomes = pd.read_csv(smk.input.outcomes)
        derailed = None
        if design.get("derailment"):
            base = base_accuracy(pd.read_csv(smk.input.accuracy), p.paired_benchmark)
            if design["model"] not in base:
                raise ValueError(f"no {p.paired_benchmark} accuracy of the untrained {design['model']} (the derailment "
                                 "outcome's reference)")
            derailed = mechanism.derailment(outcomes, design, design["seeds"], base[design["model"]])
        weights = mechanism.mediator(outcomes, design, design["seeds"])
        frame, md = mechanism.mechanism_table(mechanism.read_contrasts(outcomes, design, design["seeds"]), design,
                                              weights=weights, derailed=derailed)
        if len(weights):  # the mediator was logged: the exploratory regression on it
            from oar.analysis.step_credit import ratio_regression, ratio_regression_text
            of_model = outcomes[(outcomes["model"] == design["model"]) & outcomes["seed"].isin(design["seeds"])]
            md += ratio_regression_text(ratio_regression(of_model, list(weights["method"])))
        if design.get("step_errors"):
            frame, md = _with_step_errors(frame, md, outcomes, design, smk)
        return _with_dose_response(smk, frame, md, outcomes) if p.dose_response else (frame, md)
    if name == "length_sweep":
        acc = pd.read_csv(smk.input.accuracy)
        base = acc[(acc["method"] == "base") & (acc["benchmark"] == p.paired_benchmark)]
        return length_sweep_table(pd.read_csv(smk.input.outcomes),
                                  threshold_rule(p.reward_threshold, p.reward_gain),
                                  base=base_accuracy(acc, p.paired_benchmark),
                                  lengths=dict(zip(base["model"], base["mean_response_tokens"])))
    if name == "gradient_share":
        summaries = {Path(f).name.removesuffix(".summary.json"): json.loads(Path(f).read_text())
                     for f in smk.input.summaries}
        return gradient_share_table(summaries)
    if name == "step_credit":
        from oar.analysis.step_credit import step_credit_table
        return step_credit_table(pd.read_csv(smk.input.curves))
    if name == "cost":
        return cost_table(pd.read_csv(smk.input.cost), p.train_threads)
    raise ValueError(f"unknown table {name!r}")


def _with_dose_response(smk, frame, md, outcomes):
    """The mechanism table with the declared dose-response as its last section (rows of kind level,
    slope and page after the contrasts'), GRPO on the same seeds shown for scale."""
    from oar.analysis import dose_response

    p = smk.params
    design = p.dose_response
    reading = dose_response.read_dose_response(pd.read_csv(smk.input.dose_accuracy), design, p.paired_benchmark,
                                               pd.read_csv(smk.input.dose_curves))
    reference = dose_response.reference_arm(outcomes, design, p.baseline)
    rows, section = dose_response.dose_response_section(reading, design, reference)
    frame = frame if "kind" in frame else frame.assign(kind="contrast")
    return pd.concat([frame, rows], ignore_index=True), md + "\n" + section


DECIDED = ("paired_differences", "decisive", "upper_bound", "mechanism")  # tables that apply declared decision rules


def declared(smk) -> str:
    """Beneath a table that applies declared decision rules: where each was declared (its commit), the
    commits its runs were made at, and whether each rule came before them."""
    if smk.wildcards.name not in DECIDED:
        return ""
    from oar.analysis import provenance
    found = [provenance.declaration(k, v, smk.params.configfiles) for k, v in smk.params.decision_rules.items()]
    return provenance.declarations_text(found) + provenance.runs_text(found, smk.params.decided_runs)


if __name__ == "__main__":
    frame, markdown = build(smk)
    markdown += declared(smk)
    write_table(frame, markdown, smk.output.csv, smk.output.md)
    print(markdown)
