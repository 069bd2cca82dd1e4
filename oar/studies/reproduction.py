"""Whether the paper reproduced (``analysis.reproduction``; config/paper.yaml): the paper's claims
(config/paper_claims.yaml) read against this run by the verdict rule the config declares before the run, in
the reproduction table (oar.analysis.reproduction), the report's first. The claims file is checked when the
config loads: a claim naming a model, benchmark, metric, method or group the config does not know stops the
workflow before any job, naming the claim's key.
"""

from __future__ import annotations

from pathlib import Path

from oar.config_error import ConfigError
from oar.studies.registry import Study, Table

CATEGORY = "Did the paper reproduce?"  # the report's first category (categories are listed by name)


def claims_path(declared: str) -> Path:
    """The claims file: as given when it exists from the working directory (or is absolute), else relative to
    this source tree (where config/paper_claims.yaml lives)."""
    path = Path(declared).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return Path(__file__).resolve().parents[2] / path


def _claims(reg) -> list[dict]:
    from oar.analysis.reproduction import read_claims

    declared = reg.config["analysis"]["reproduction"]["claims"]
    path = claims_path(declared)
    if not path.is_file():
        raise ConfigError("analysis.reproduction.claims", f"{declared}: no such file")
    try:
        return read_claims(path)
    except ValueError as e:
        raise ConfigError("analysis.reproduction.claims", str(e)) from None


def check(reg) -> None:
    """Every claim names what this config has: its models, its benchmarks, a known metric, method and group."""
    design = reg.config["analysis"].get("reproduction")
    if not design:
        return
    from oar.analysis.reproduction import check_claims
    from oar.method.names import METHODS

    groups = [g for g, spec in reg.config["runs"].items() if isinstance(spec, dict)]  # the registry's groups
    problems = check_claims(_claims(reg), list(reg.config["models"]), list(reg.config["evaluation"]["benchmarks"]),
                            list(METHODS), groups)
    if problems:
        where, message = problems[0]
        raise ConfigError(f"{design['claims']} {where}", message)


def design(reg) -> dict | None:
    """The declared rule, the claims, and what the table reads them against: each group's benchmarks, which
    groups run, and which models train on a GPU (the paper's cost ratios are a GPU's)."""
    declared = reg.config["analysis"].get("reproduction")
    if not declared:
        return None
    return {**dict(declared), "claim_list": _claims(reg),
            "benchmarks": {g: reg.group_benchmarks(g) for g in reg.groups if reg.groups[g]},
            "on_gpu": {m: bool(reg.resources.resource_set("train", m).get("gpu")) for m in reg.config["models"]}}


def decision_rules(config) -> dict:
    """The verdict rule as declared (the table says where and when)."""
    return {"analysis.reproduction": config["analysis"].get("reproduction")}


def _reads(reg, rules) -> dict:
    groups = sorted({c["group"] for c in reg.reproduction["claim_list"] if c.get("group") and reg.groups[c["group"]]})
    return {"claims": str(claims_path(reg.reproduction["claims"])),
            "accuracy": [f"{reg.results}/analysis/accuracy/{g}.csv" for g in groups],
            "curves": f"{reg.results}/analysis/credit/{reg.cost_group}.csv"}


def build_table(smk):
    import pandas as pd

    from oar.analysis.reproduction import reproduction_frame, reproduction_table

    design = smk.params.designs["reproduction"]
    accuracy = {Path(f).name.removesuffix(".csv"): pd.read_csv(f) for f in smk.input.accuracy}
    frame = reproduction_frame(design["claim_list"], design, accuracy, design["benchmarks"],
                               pd.read_csv(smk.input.curves), design["on_gpu"])
    return reproduction_table(frame, design, design["claims"])


STUDY = Study(
    name="reproduction", key="analysis.reproduction", check=check, design=design, decision_rules=decision_rules,
    tables=(Table("reproduction", made=lambda reg: bool(reg.reproduction), reads=_reads, build=build_table,
                  decided=True, category=CATEGORY),),
)
