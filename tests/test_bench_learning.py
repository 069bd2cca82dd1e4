"""The token-credit benchmark's learning track: a submission's runs are the policy config's own (make run's
GRPO and truth-gate runs are reused), the declared paired analysis on outcomes worked by hand, and a
request whose runs are missing stops naming the run."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from oar.analysis import statistics
from oar.bench import learning


def test_a_submission_trains_the_policy_config_s_own_runs():
    """GRPO's and the truth gate's run ids are make run's (config/config.yaml), so a machine that ran it trains
    only the entries; TRL's 80/20 arm is GRPO's run under its trainer key, in a folder of its own."""
    from oar.experiment.config_schema import load_config, trainer_keys
    from oar.experiment.runs import Registry

    made = Registry(load_config(learning.ROOT / "config/config.yaml"), trainer_keys())
    plain, trl = learning.parts("chain_f1", ["ktae", "grpo_top_entropy"])
    assert plain["seeds"] == [0, 1, 2, 3, 4]
    assert set(plain["arms"]["grpo"]) | set(plain["arms"]["truth"]) <= set(made.groups["main"])
    assert plain["arms"]["ktae"] == [f"chain_f1/ktae-tau0.4-beta2.0-seed{s}" for s in range(5)]
    assert learning.targets(plain, "chain_f1")[0] == "results/eval/chain_f1/base/chain_test/summary.json"
    assert trl["arms"] == {"grpo_top_entropy": [f"chain_f1/grpo-seed{s}" for s in range(5)]}
    assert trl["overlay"]["training"]["trainer"] == {"top_entropy_quantile": 0.2}
    assert trl["overlay"]["results"] == "results-grpo_top_entropy"
    assert all(t.startswith("results-grpo_top_entropy/") for t in learning.targets(trl, "chain_f1"))
    with pytest.raises(learning.LearningError, match="an arm of every submission"):
        learning.parts("chain_f1", ["truth"])


def test_ktae_s_own_rule_trains_beside_its_magnitude_through_the_gate_each_named_for_what_it_is():
    """``ktae_rule`` (GRPO's advantage plus KTAE's signed key value, no gate) has no tau or beta in its run id;
    ``ktae`` is KTAE's magnitude through OAR's gate; the table says which each is."""
    (plain,) = learning.parts("chain_f1", ["ktae", "ktae_rule"])
    assert plain["arms"]["ktae_rule"] == [f"chain_f1/ktae_rule-seed{s}" for s in range(5)]
    assert plain["arms"]["ktae"] == [f"chain_f1/ktae-tau0.4-beta2.0-seed{s}" for s in range(5)]
    assert learning.what_it_trains("ktae_rule").startswith("KTAE's own rule: GRPO's advantage plus the signed")
    assert learning.what_it_trains("ktae_rule").endswith("no gate")
    assert "through OAR's gate" in learning.what_it_trains("ktae")


def test_the_declared_paired_analysis_worked_by_hand():
    grpo, truth = [0.60, 0.62, 0.58], [0.61, 0.60, 0.59]
    harmful, mixed = [0.50, 0.52, 0.49], [0.62, 0.61, 0.60]
    outcomes = pd.DataFrame([{"arm": arm, "seed": s, "run": f"{arm}-{s}", "final_accuracy": v}
                             for arm, values in (("grpo", grpo), ("truth", truth), ("ktae", harmful), ("e2", mixed))
                             for s, v in zip((0, 1, 2), values)])
    frame = learning.analyse(outcomes, ["ktae", "e2"], untrained=0.55).set_index("arm")
    d_ktae = [h - g for h, g in zip(harmful, grpo)]
    d_e2 = [m - g for m, g in zip(mixed, grpo)]
    t_ktae, t_e2 = statistics.paired_t(d_ktae), statistics.paired_t(d_e2)
    assert frame.at["ktae", "vs_grpo_mean"] == pytest.approx(sum(d_ktae) / 3)
    holm = statistics.holm([t_ktae["p"], t_e2["p"]])
    assert frame.at["ktae", "p_holm"] == pytest.approx(holm[0]) and frame.at["e2", "p_holm"] == pytest.approx(holm[1])
    assert frame.at["ktae", "verdict"] == "harm" and frame.at["e2", "verdict"] == "not decided"
    assert frame.at["ktae", "derailed"] == 3 and frame.at["grpo", "derailed"] == 0  # below the untrained 0.55
    assert frame.at["ktae", "vs_truth_mean"] == pytest.approx(sum(h - t for h, t in zip(harmful, truth)) / 3)
    assert frame.at["ktae", "mde_holm"] == pytest.approx(statistics.mde(t_ktae["sd"], 3, alpha=0.025))
    wilcoxon = statistics.wilcoxon_shift(d_ktae, 0.0, "two-sided")["p"]
    assert frame.at["ktae", "wilcoxon_p"] == pytest.approx(wilcoxon)
    assert math.isnan(frame.at["grpo", "p_holm"]) and frame.at["grpo", "verdict"] == ""


def test_a_request_whose_runs_are_missing_stops_naming_the_run(tmp_path, monkeypatch):
    monkeypatch.setitem(learning.DESIGNS, "chain_f1", {"config": "config/config.yaml", "results": str(tmp_path)})
    with pytest.raises(learning.LearningError, match=r"run chain_f1/base has no evaluation \(.*summary.json\)"):
        learning.read_outcomes("chain_f1", ["ktae"], [0, 1])


def test_the_learning_leaderboard_says_harm_and_gain_apart():
    outcomes = pd.DataFrame([{"arm": arm, "seed": s, "run": f"{arm}-{s}", "final_accuracy": v}
                             for arm, values in (("grpo", [0.60, 0.62, 0.58]), ("truth", [0.61, 0.60, 0.59]),
                                                 ("ktae", [0.50, 0.52, 0.49]))
                             for s, v in zip((0, 1, 2), values)])
    rows = {r["arm"]: r for r in learning.analyse(outcomes, ["ktae"], untrained=0.55).to_dict("records")}
    record = {"entry": "ktae", "track": "learning", "version": 1, "policy": "chain_f1", "policy_sha256": "6bd2" * 16,
              "submitted_with": ["ktae"], "seeds": [0, 1, 2], "result": rows["ktae"], "grpo": rows["grpo"],
              "truth": rows["truth"], "made_with": {"commit": "abcdef0123456789", "dirty": False, "created": "x"}}
    frame, text = learning.learning_table([record])
    lines = [line for line in text.splitlines() if line.startswith("| `")]
    assert lines[0].startswith("| `grpo` | 60.0 [") and "0 of 3" in lines[0]
    assert lines[2].startswith("| `ktae` | 50.3 [") and "| harm |" in lines[2] and "3 of 3" in lines[2]
    assert "untrained accuracy 55.0%" in text and frame.loc[0, "verdict"] == "harm"
    assert f"- `ktae`: {learning.what_it_trains('ktae')}" in text.splitlines()


@pytest.mark.parametrize("policy", ["chain_f1", "chain_d8"])
def test_each_policy_trains_from_its_shipped_file(policy):
    """The learning design starts from the shipped weights, named by their hash and recipe seed, also
    where the policy's config pretrains another seed of the recipe (decisive.yaml's chain_d8)."""
    from oar.models import frozen

    cfg, overlay = learning.design_config(policy, ["ktae"])
    spec = cfg["models"][policy]
    assert spec["frozen"] == {"policy": policy, "sha256": frozen.weights_sha256(policy)}
    assert spec["seed"] == frozen.index()[policy]["recipe"]["seed"]
    assert "ktae" in cfg["runs"]["main"]["methods"] and cfg["runs"]["main"]["models"] == [policy]


def test_an_entry_that_reads_a_reference_model_is_refused_before_any_job_without_a_kl_term():
    """PRIME's implicit reward reads a second model; a workflow run has one only as the KL term's reference."""
    from validated_registry import validated_registry

    from oar.experiment.config_error import ConfigError

    cfg, _ = learning.design_config("chain_f1", ["prime"])
    with pytest.raises(ConfigError, match=r"^config error at runs\.main\.methods: method 'prime' reads a reference "
                                          r"model.*training\.trainer\.beta"):
        validated_registry(cfg)
    cfg["training"]["trainer"]["beta"] = 0.04
    assert any("/prime-" in run for run in validated_registry(cfg).runs)
