"""Did the paper reproduce? The claims file (config/paper_claims.yaml), its checks when a config loads, the
verdict rule on each kind of claim, and the reproduction table built end to end by the table job from the
rehearsal's run registry and analysis files."""

import copy
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml

from oar.analysis import reproduction
from oar.analysis.statistics import mde, seed_sd
from oar.experiment.config_error import ConfigError
from oar.experiment.runs import deep_merge
from validated_registry import validated_registry

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]
RULE = {"claims": "config/paper_claims.yaml", "rule": "interval", "level": 0.95, "resolution": 1.0}


def _config(*names) -> dict:
    out: dict = {}
    for name in names:
        out = deep_merge(out, yaml.safe_load((ROOT / "config" / name).read_text()))
    return out


def _claims() -> list[dict]:
    return reproduction.read_claims(ROOT / "config" / "paper_claims.yaml")


# ------------------------------------------------------------------------------ the claims file


def test_the_claims_file_holds_every_figure_and_claim_the_paper_reports_with_what_it_refers_to():
    claims = _claims()
    figures = {(c["model"], c["method"], c["benchmark"]): c["value"] for c in claims if c["kind"] == "figure"}
    assert figures == {("qwen2.5-7b", "grpo", "gsm8k_test"): 90.5, ("qwen2.5-7b", "grpo", "math500"): 75.8,
                       ("qwen2.5-7b", "grpo", "average"): 51.3, ("qwen2.5-7b", "oar_g", "gsm8k_test"): 92.4,
                       ("qwen2.5-7b", "oar_g", "math500"): 78.7, ("qwen2.5-7b", "oar_p", "average"): 53.7}
    costs = {c["method"]: c["value"] for c in claims if c["kind"] == "cost_ratio"}
    assert costs == {"oar_g": 1.4, "oar_p": 4.2}
    orderings = {(c["group"], reproduction._arm_label(c["higher"]), c["relation"],
                  reproduction._arm_label(c["lower"])) for c in claims if c["kind"] == "ordering"}
    assert orderings == {("main", "OAR-G", ">", "GRPO"), ("main", "OAR-P", ">=", "OAR-G"),
                         ("gating", "OAR-P (tau 0.4)", ">", "OAR-P (tau 0)"),
                         ("gating", "OAR-P (tau 0.4)", ">", "OAR-P (tau 1)"),
                         ("probes", "OAR-P (AS-Mean)", ">", "OAR-P (LT-Logits)"),
                         ("probes", "OAR-P (AS-Mean)", ">", "OAR-P (AS-Joint)")}
    for c in claims:
        assert all(c.get(k) for k in ("id", "source", "model", "benchmark", "metric", "sampling")), c["id"]


def test_the_paper_config_declares_the_rule_and_makes_the_table_the_testbed_does_not():
    reg = validated_registry(_config("paper.yaml"))
    assert reg.config["analysis"]["reproduction"] == RULE and "reproduction" in reg.tables
    assert len(reg.reproduction["claim_list"]) == len(_claims())
    rehearsal = validated_registry(_config("paper.yaml", "rehearsal.yaml"))
    assert "reproduction" in rehearsal.tables and not any(rehearsal.reproduction["on_gpu"].values())
    testbed = validated_registry(_config("config.yaml"))
    assert "reproduction" not in testbed.tables and testbed.reproduction is None
    # the report lists categories by name: the reproduction table's comes before "Figures" and "Tables"
    from oar.experiment.tables import table

    assert sorted([table("reproduction").category, table("main_table").category, "Figures"])[0] == \
        table("reproduction").category


def _with_claims(tmp_path, change) -> dict:
    claims = copy.deepcopy(_claims())
    change(claims)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": claims}))
    return deep_merge(_config("paper.yaml"), {"analysis": {"reproduction": {"claims": str(path)}}})


@pytest.mark.parametrize("index, key, value, expected", [
    (3, "benchmark", "gsm8k", "claims[3].benchmark: oar_g_gsm8k: unknown benchmark 'gsm8k'"),
    (0, "model", "qwen2.5-72b", "claims[0].model: grpo_gsm8k: unknown model 'qwen2.5-72b'"),
    (1, "metric", "maj@16", "claims[1].metric: grpo_math500: unknown metric 'maj@16'"),
    (6, "group", "mains", "claims[6].group: oar_g_above_grpo: unknown group 'mains'"),
    (5, "method", "oar_x", "claims[5].method: oar_p_average: {'method': 'oar_x'} is not an arm"),
    (7, "relation", ">>", "claims[7].relation: oar_p_at_least_oar_g: unknown relation '>>'"),
])
def test_a_claim_the_config_cannot_read_stops_with_one_line_naming_its_key(tmp_path, index, key, value, expected):
    cfg = _with_claims(tmp_path, lambda claims: claims[index].update({key: value}))
    with pytest.raises(ConfigError) as e:
        validated_registry(cfg)
    message = str(e.value)
    assert "\n" not in message and expected in message
    assert message.startswith(f"config error at {tmp_path / 'claims.yaml'} claims[{index}].{key}:")


@pytest.mark.parametrize("missing", ["rule", "level", "resolution", "claims"])
def test_a_verdict_rule_missing_from_the_config_stops_naming_the_key(missing):
    cfg = _config("paper.yaml")
    del cfg["analysis"]["reproduction"][missing]
    with pytest.raises(ConfigError) as e:
        validated_registry(cfg)
    assert str(e.value) == f"config error at analysis.reproduction: '{missing}' is a required property"


def test_a_claims_file_that_is_not_there_stops_naming_the_key():
    cfg = deep_merge(_config("paper.yaml"), {"analysis": {"reproduction": {"claims": "config/no_such_claims.yaml"}}})
    with pytest.raises(ConfigError, match=r"^config error at analysis.reproduction.claims: config/no_such"):
        validated_registry(cfg)


# ------------------------------------------------------------------------------ the verdict rule


def _accuracy(values: dict, benchmark="gsm8k_test", model="qwen2.5-7b") -> pd.DataFrame:
    """Accuracy rows as analysis/accuracy/<group>.csv holds them: method -> per-seed pass@1 (fractions)."""
    rows = []
    for method, per_seed in values.items():
        for seed, v in enumerate(per_seed):
            rows.append({"run": f"{model}/{method}-seed{seed}", "model": model, "method": method, "tau": None,
                         "beta": None, "probe": None, "seed": seed, "benchmark": benchmark, "pass@1": v,
                         "ci_low": v - 0.02, "ci_high": v + 0.02, "num_problems": 1319, "samples_per_problem": 1})
    return pd.DataFrame(rows)


FIGURE = next(c for c in _claims() if c["id"] == "grpo_gsm8k")  # GRPO GSM8K 90.5


@pytest.mark.parametrize("per_seed, verdict", [
    ([0.903, 0.906, 0.904, 0.907, 0.905], "reproduced"),  # tight around 90.5
    ([0.880, 0.882, 0.879, 0.881, 0.883], "lower"),
    ([0.930, 0.931, 0.929, 0.932, 0.930], "higher"),
    ([0.87, 0.94, 0.89, 0.93, 0.90], "undecided"),  # 90.5 inside, but seeds too noisy to resolve 1 point
    ([0.905], "undecided"),  # one seed: no interval over seeds
])
def test_a_figure_is_reproduced_only_inside_an_interval_that_resolves_the_resolution(per_seed, verdict):
    row = reproduction.figure_verdict(FIGURE, _accuracy({"grpo": per_seed}), ["gsm8k_test"], RULE)
    assert row["verdict"] == verdict, row["reason"]
    x = [100 * v for v in per_seed]
    assert row["run"] == pytest.approx(np.mean(x)) and row["difference"] == pytest.approx(np.mean(x) - 90.5)
    if len(x) > 1:
        assert row["mde"] == pytest.approx(mde(seed_sd(x), len(x)))
        assert row["interval"] == "seeds" and row["ci_low"] < row["run"] < row["ci_high"]
    else:  # the single evaluation's bootstrap over problems is shown, as in the main table
        assert row["interval"] == "problems" and row["ci_low"] == pytest.approx(88.5)


ORDERING = next(c for c in _claims() if c["id"] == "oar_g_above_grpo")
AT_LEAST = next(c for c in _claims() if c["id"] == "oar_p_at_least_oar_g")


def _paired(gain, noise, seeds=10, first="oar_g", second="grpo", seed=3):
    rng = np.random.default_rng(seed)
    base = 0.5 + rng.normal(0, 0.02, seeds)
    return pd.concat([
        _accuracy({second: list(base)}, "average_of_one"),
        _accuracy({first: list(base + gain + rng.normal(0, noise, seeds))}, "average_of_one")])


@pytest.mark.parametrize("gain, noise, verdict", [
    (0.03, 0.003, "reproduced"),
    (-0.03, 0.003, "contradicted"),
    (0.0, 0.03, "undecided"),  # MDE far above 1 point
    (0.0, 0.001, "not reproduced"),  # the design sees 1 point and finds nothing
])
def test_an_ordering_reads_the_paired_interval_against_zero_and_the_mde(gain, noise, verdict):
    row = reproduction.ordering_verdict(ORDERING, _paired(gain, noise), ["average_of_one"], RULE)
    assert row["verdict"] == verdict, row["reason"]
    assert row["n"] == 10 and row["interval"] == "paired seeds"


def test_at_least_holds_within_the_resolution_and_one_seed_decides_nothing():
    # OAR-P 0.3 points under OAR-G, tightly: no worse than the 1-point resolution, so >= holds
    close = _paired(-0.003, 0.0005, first="oar_p", second="oar_g")
    assert reproduction.ordering_verdict(AT_LEAST, close, ["average_of_one"], RULE)["verdict"] == "reproduced"
    one = _paired(0.05, 0.0, seeds=1, first="oar_p", second="oar_g")
    row = reproduction.ordering_verdict(AT_LEAST, one, ["average_of_one"], RULE)
    assert row["verdict"] == "undecided" and row["n"] == 1
    missing = _accuracy({"oar_g": [0.5, 0.6]}, "average_of_one")
    assert reproduction.ordering_verdict(AT_LEAST, missing, ["average_of_one"], RULE)["verdict"] == "not run"


COST = next(c for c in _claims() if c["id"] == "oar_p_cost")  # OAR-P 4.2x GRPO


def _curves(ratio, steps=40, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"model": "qwen2.5-7b", "method": m, "run": f"{m}-seed0", "step": i + 1,
                          "step_time_s": scale * (1 + rng.normal(0, 0.02))}
                         for m, scale in (("grpo", 10.0), ("oar_p", 10.0 * ratio)) for i in range(steps)])


def test_a_cost_ratio_is_read_against_the_median_step_ratio_on_a_gpu_only():
    assert reproduction.cost_verdict(COST, _curves(4.2), RULE, on_gpu=True)["verdict"] == "reproduced"
    row = reproduction.cost_verdict(COST, _curves(3.0), RULE, on_gpu=True)
    assert row["verdict"] == "lower" and row["run"] == pytest.approx(3.0, rel=0.03) and row["ci_high"] < 4.2
    assert reproduction.cost_verdict(COST, _curves(4.2), RULE, on_gpu=False)["verdict"] == "undecided"
    assert reproduction.cost_verdict(COST, _curves(4.2).head(40), RULE, on_gpu=True)["verdict"] == "not run"


# ------------------------------------------------------------------------------ the table job, end to end


def _tables_job():
    spec = importlib.util.spec_from_file_location("tables_job", ROOT / "workflow_scripts" / "tables.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    return job


def _rehearsal_inputs(reg, tmp_path):
    """The analysis files the rehearsal's table job reads, as its rules write them: each group's accuracy rows
    for every run it evaluates (a tiny random model answers nothing: pass@1 0 with a zero-width bootstrap) and
    the cost group's training curves (two logged steps a run, as the rehearsal's max_steps)."""
    files = {}
    for group in sorted({c["group"] for c in reg.reproduction["claim_list"] if c.get("group")}):
        meta = reg.run_meta(reg.eval_runs(group))
        rows = [{"run": run, **m, "benchmark": b, "pass@1": 0.0, "ci_low": 0.0, "ci_high": 0.0, "num_problems": 2,
                 "samples_per_problem": 16 if b.startswith(("aime", "amc")) else 1}
                for run, m in meta.items() for b in reg.group_benchmarks(group)]
        files[group] = tmp_path / f"{group}.csv"
        pd.DataFrame(rows).to_csv(files[group], index=False)
    curves = [{"run": run, **m, "step": step, "step_time_s": 0.03 * (1 + step / 10)}
              for run, m in reg.run_meta(reg.groups[reg.cost_group]).items() for step in (1, 2)]
    pd.DataFrame(curves).to_csv(tmp_path / "curves.csv", index=False)
    return files


def test_the_table_job_builds_the_rehearsal_table_with_every_claim_undecided(tmp_path):
    reg = validated_registry(_config("paper.yaml", "rehearsal.yaml"))
    files = _rehearsal_inputs(reg, tmp_path)
    from oar.experiment.tables import table

    declared_inputs = table("reproduction").reads(reg, None)
    assert Path(declared_inputs["claims"]).resolve() == ROOT / "config" / "paper_claims.yaml"
    assert [Path(f).name for f in declared_inputs["accuracy"]] == ["gating.csv", "main.csv", "probes.csv"]
    assert declared_inputs["curves"].endswith(f"/analysis/credit/{reg.cost_group}.csv")
    smk = SimpleNamespace(
        wildcards=SimpleNamespace(name="reproduction"),
        input=SimpleNamespace(claims=declared_inputs["claims"], accuracy=[str(f) for f in files.values()],
                              curves=str(tmp_path / "curves.csv")),
        params=SimpleNamespace(designs={"reproduction": reg.reproduction},
                               configfiles=[str(ROOT / "config" / n) for n in ("paper.yaml", "rehearsal.yaml")],
                               decision_rules={"analysis.reproduction": reg.config["analysis"]["reproduction"]},
                               decided_runs=[]))
    frame, md = _tables_job().build(smk)
    assert list(frame["id"]) == [c["id"] for c in _claims()]
    # one seed, a CPU: nothing the tiny run shows can decide a claim of the paper
    assert set(frame["verdict"]) == {"undecided"}, frame[["id", "verdict", "reason"]]
    assert (frame[frame["kind"] == "figure"]["difference"] == -frame[frame["kind"] == "figure"]["paper"]).all()
    costs = frame[frame["kind"] == "cost_ratio"]
    assert (costs["reason"] == "measured without a GPU: the paper's ratio is a GPU's").all()
    assert costs["run"].notna().all()
    assert md.startswith("## Did the paper reproduce?\n\n14 claims of the paper (config/paper_claims.yaml): "
                         "14 undecided.")
    assert "| GRPO GSM8K = 90.5 | qwen2.5-7b | 90.5 | 0.0 [0.0, 0.0] (problems; n 1) | -90.5 |" in md
    note = _tables_job().declared(smk)
    assert "`analysis.reproduction` in `paper.yaml`" in note


def test_the_landing_page_and_the_caption_say_how_the_verdicts_are_decided():
    captions = pytest.importorskip("test_report_captions")
    paper = captions.resolved(ROOT / "config" / "paper.yaml")
    landing = captions.render("workflow.rst", paper)
    assert "Did the paper reproduce?" in landing and "config/paper_claims.yaml" in landing
    assert landing.index("Did the paper reproduce?") < landing.index("How to read this report")
    assert "95% interval over seeds" in landing and "resolution 1.0 points" in landing
    caption = captions.render("table.rst", paper, "reproduction")
    assert caption.startswith("Did the paper reproduce?") and "interval, resolution 1.0 points" in caption
    testbed = captions.render("workflow.rst", captions.resolved(ROOT / "config" / "config.yaml"))
    assert "Did the paper reproduce?" not in testbed
