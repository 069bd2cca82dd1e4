"""The scorers registered in one place (oar.method.scorer_registry) and their contract
(oar.method.scorer_contract): registration, import paths, the check of every call's output, what a scorer
declares it reads, and a bad name or path stopping the config or the trainer with one line naming it."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import yaml

from oar.experiment.config_error import ConfigError
from oar.method import names, scorer_registry
from oar.method.importance import score
from oar.method.probes import Probe
from oar.method.scorer_contract import NEGATIVE_ROUNDING, ScoringBatch, same_scores_twice
from oar.method.scorer_registry import ScorerError, register_scorer, scorer_spec, unregister_scorer

pytestmark = pytest.mark.quick

ROOT = Path(__file__).resolve().parents[1]


def probes(lengths=(4, 6, 3), prompt=(5, 6, 7)) -> list[Probe]:
    return [Probe(prompt_ids=tuple(prompt), response_ids=tuple(range(10, 12 + n)), reasoning_len=n,
                  conclude_ids=(8,), answer_ids=(9,), answer_kind="boxed", pad_id=0) for n in lengths]


@pytest.fixture
def fresh_name():
    """A registration made in a test is removed after it."""
    made = []
    yield made.append
    for name in made:
        unregister_scorer(name)


def ones(batch):
    return [torch.ones(p.reasoning_len) for p in batch.probes]


def test_a_registered_scorer_scores_and_is_a_method_everywhere(fresh_name):
    fresh_name("halves")

    @register_scorer("halves", needs=())
    def halves(batch):
        return [torch.arange(p.reasoning_len, dtype=torch.float64) / 2 for p in batch.probes]

    result = score("halves", None, probes())
    assert result.scores.dtype == torch.float32 and result.scores[1, :6].tolist() == [0, 0.5, 1, 1.5, 2, 2.5]
    assert result.scores[1, 6:].abs().sum() == 0 and result.reasoning_mask[2].sum() == 3
    assert names.is_method("halves") and names.is_gated("halves") and not names.uses_probe("halves")
    from oar.experiment.config_schema import allowed_names

    assert "halves" in allowed_names("gated_methods")[0] and "halves" in allowed_names("heldout_scorers")[0]


@pytest.mark.parametrize("name, function, needs, message", [
    ("oar_p", ones, (), "'oar_p' is already registered"),
    ("grpo", ones, (), "'grpo' is taken by a method"),
    ("oar_g_rescue", ones, (), "taken by a method"),
    ("My-Scorer", ones, (), "must be lower-case letters"),
    ("fine", ones, ("gradients",), "unknown needs \\['gradients'\\]"),
    ("fine", lambda model, probes: [], (), "must take one positional argument"),
    ("fine", "no colon here", (), "is not an import path"),
])
def test_a_bad_registration_stops_naming_the_scorer(name, function, needs, message):
    with pytest.raises(ScorerError, match=message):
        register_scorer(name, function, needs=needs)
    assert "fine" not in scorer_registry.registered_names()


def test_a_second_registration_of_a_users_name_stops(fresh_name):
    fresh_name("twice")
    register_scorer("twice", ones, needs=())
    with pytest.raises(ScorerError, match="'twice' is already registered"):
        register_scorer("twice", ones, needs=())


def test_scorers_named_by_import_path():
    plain = scorer_spec("user_scorers:last_tokens_first")
    assert plain.needs == {"model"} and plain.name == "user_scorers:last_tokens_first"
    # a function its module registered keeps its registration (name and needs)
    assert scorer_spec("user_scorers:surprise") is scorer_spec("user_surprise")
    result = score("user_scorers:last_tokens_first", None, probes())
    assert result.scores[0, :4].tolist() == [1, 2, 3, 4]
    for path, message in (("no_such_package.scores:f", "cannot import module 'no_such_package.scores'"),
                          ("user_scorers:missing", "module 'user_scorers' has no 'missing'"),
                          ("user_scorers:not_a_function_of_one_argument", "must take one positional argument")):
        with pytest.raises(ScorerError, match=message):
            scorer_spec(path)
    with pytest.raises(ScorerError, match="unknown scorer 'oracle'"):
        score("oracle", None, probes())


@pytest.mark.parametrize("output, message", [
    (lambda b: ones(b)[:-1], "returned 2 score rows for 3 probes"),
    (lambda b: [torch.ones(p.reasoning_len + 1) for p in b.probes],
     r"row 0: scores of shape \(5,\), the reasoning has 4"),
    (lambda b: [torch.ones(p.reasoning_len, dtype=torch.long) for p in b.probes],
     "row 0: a score row must be a floating"),
    (lambda b: torch.ones(3, 4), "returned Tensor, not a list"),
    (lambda b: [torch.ones(p.reasoning_len) for p in b.probes[:2]] + [torch.tensor([1.0, float("nan"), 0.0])],
     "row 2: score nan at reasoning token 1 is not finite"),
    (lambda b: [torch.full((p.reasoning_len,), -0.5) for p in b.probes],
     "row 0: score -0.5 at reasoning token 0 is negative"),
])
def test_an_output_that_breaks_the_contract_stops_naming_the_scorer(fresh_name, output, message):
    fresh_name("broken")
    register_scorer("broken", lambda batch: output(batch), needs=())
    with pytest.raises(ScorerError, match=f"scorer 'broken'.*{message}" if "row" in message or "returned" in message
                       else message):
        score("broken", None, probes())


def test_negative_rounding_is_taken_and_clamped_by_the_gate(fresh_name):
    from oar.method.gate import gate

    fresh_name("rounding")
    register_scorer("rounding", lambda b: [torch.tensor([-NEGATIVE_ROUNDING / 2, 0.0, 2.0, 1.0])] * len(b.probes),
                    needs=())
    result = score("rounding", None, probes((4,)))
    weights = gate(result.scores, result.reasoning_mask, 0.4, 2.0)
    assert weights[0, 0] == weights[0, 1]  # the tiny negative is a zero to the gate


def test_a_signed_scorer_keeps_its_negative_scores_and_the_gate_refuses_it(fresh_name):
    from oar.training.grpo_trainer import MethodSetup
    from oar.training.settings import OARSettings

    fresh_name("signed_push")
    register_scorer("signed_push", lambda b: [torch.tensor([-0.5, 0.0, 0.25])] * len(b.probes), needs=(),
                    signed=True)
    result = score("signed_push", None, probes((3,)))
    assert result.scores[0, :3].tolist() == [-0.5, 0.0, 0.25]  # a sign, not a contract breach
    with pytest.raises(ScorerError, match="'signed_push' is signed"):
        MethodSetup.of("signed_push", OARSettings())


def test_every_call_is_given_the_tokenizer_and_the_policys_name(fresh_name):
    seen = {}
    fresh_name("reads_text")

    @register_scorer("reads_text", needs=())
    def reads_text(batch):
        seen.update(tokenizer=batch.tokenizer, policy=batch.policy)
        return [torch.ones(p.reasoning_len) for p in batch.probes]

    marker = object()
    score("reads_text", None, probes((3,)), tokenizer=marker, policy="chain_f1")
    assert seen == {"tokenizer": marker, "policy": "chain_f1"}


def test_a_group_scorer_gets_whole_groups_and_their_rewards(fresh_name):
    seen = {}
    fresh_name("group_mean")

    @register_scorer("group_mean", needs=("groups",))
    def group_mean(batch):
        seen.update(groups=list(batch.groups), rewards=list(batch.rewards), rows=len(batch.probes))
        return [torch.full((p.reasoning_len,), float(r)) for p, r in zip(batch.probes, batch.rewards)]

    six = probes((3, 3, 3, 3, 3, 3))
    # group 1 (rows 2-3) has no active row, group 2 one: every row of groups 0 and 2 is scored
    result = score("group_mean", None, six, active=[True, False, False, False, False, True],
                   groups=[0, 0, 1, 1, 2, 2], rewards=[1, 0, 1, 1, 0, 1])
    assert seen == {"groups": [0, 0, 2, 2], "rewards": [1, 0, 0, 1], "rows": 4}
    assert result.scored.tolist() == [True, True, False, False, True, True]
    with pytest.raises(ValueError, match="reads groups: give one group per probe"):
        score("group_mean", None, six)


def test_a_reference_model_scorer_without_one_stops(fresh_name):
    fresh_name("needs_reference")
    register_scorer("needs_reference", ones, needs=("reference_model",))
    with pytest.raises(ScorerError, match="'needs_reference' reads a reference model and the call has none"):
        score("needs_reference", None, probes())
    assert score("needs_reference", None, probes(), reference_model=object()).scored.all()


def test_an_attention_scorer_runs_with_eager_attention(tiny_model, fresh_name):
    model, _ = tiny_model
    before = model.config._attn_implementation
    fresh_name("attends")

    @register_scorer("attends", needs=("model", "attentions"))
    def attends(batch):
        rows = []
        for p in batch.probes:
            ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids)])
            attentions = batch.model(input_ids=ids, output_attentions=True).attentions
            last = attentions[-1][0].mean(0)[-1]  # the last token's attention, averaged over heads
            start = len(p.prompt_ids)
            rows.append(last[start: start + p.reasoning_len].float())
        return rows

    result = score("attends", model, probes())
    assert result.scores[0, :4].sum() > 0
    assert model.config._attn_implementation == before  # restored


def test_builtin_scorers_are_deterministic_for_a_seed(tiny_model):
    model, tokenizer = tiny_model
    rows = probes()
    for name in ("oar_g", "random", "entropy"):
        spec = scorer_spec(name)
        batch = ScoringBatch(model=model.eval(), probes=rows, kinds=["as_mean"] * 3, seed=11)
        assert same_scores_twice(spec, batch), name


def test_the_config_takes_a_scorer_by_import_path_and_stops_at_a_bad_one():
    from oar.experiment.config_schema import validate
    from oar.experiment.runs import Registry
    from oar.experiment.config_schema import trainer_keys

    base = yaml.safe_load((ROOT / "tests" / "data" / "registry_config.yaml").read_text())
    good = copy.deepcopy(base)
    good["runs"]["main"]["methods"] = ["grpo", "user_scorers:last_tokens_first"]
    reg = Registry(validate(good), trainer_keys())
    run = next(r for r in reg.runs if "user_scorers" in r)
    assert run == "smollm2/user_scorers.last_tokens_first-tau0.4-beta2.0-seed0"
    assert reg.runs[run]["method"] == "user_scorers:last_tokens_first"
    for method, message in (("user_scorers:missing", "module 'user_scorers' has no 'missing'"),
                            ("oracle", "'oracle' is not one of .* or an import path")):
        bad = copy.deepcopy(base)
        bad["runs"]["main"]["methods"] = ["grpo", method]
        with pytest.raises(ConfigError, match=f"^config error at runs.main.methods.1: .*{message}"):
            validate(bad)


def test_load_config_fills_in_what_snakemake_fills_in():
    """oar does not import Snakemake: its loader fills in the schema's defaults as snakemake.utils.validate
    would (which ignores the name lists)."""
    from oar.experiment.config_schema import load_config

    validate = pytest.importorskip("snakemake.utils").validate
    for name in ("config.yaml", "paper.yaml"):
        expected = yaml.safe_load((ROOT / "config" / name).read_text())
        validate(expected, str(ROOT / "config" / "schema.yaml"))
        assert load_config(ROOT / "config" / name) == expected, name


def test_load_config_stops_at_a_bad_key(tmp_path):
    from oar.experiment.config_schema import load_config

    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    config["training"]["trainer"]["max_stepz"] = 3
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="^config error at training.trainer: .*'max_stepz'"):
        load_config(tmp_path / "bad.yaml")


def test_every_scorer_setting_reaches_every_reader():
    """A scorer setting is one ScorerConfig field: the schema states it with the same default, the run
    settings and OARConfig take it with its check, the held-out scoring script has its option, and the
    run registry passes it to that script (off its default, for a setting added later)."""
    import dataclasses
    import subprocess
    import sys

    from oar.experiment.config_schema import load_schema
    from oar.method.scorer_config import ScorerConfig
    from oar.training.grpo_trainer import OARConfig
    from oar.training.settings import OARSettings, SettingsError

    oar_schema = load_schema()["$defs"]["oar"]["properties"]
    help_text = subprocess.run([sys.executable, str(ROOT / "workflow_scripts" / "score_heldout.py"), "--help"],
                               capture_output=True, text=True, check=True).stdout
    config_fields = {f.name: f for f in dataclasses.fields(OARConfig)}
    for setting in dataclasses.fields(ScorerConfig):
        name = setting.name
        assert oar_schema[name]["default"] == setting.default, name
        assert (getattr(OARSettings(), name) == setting.default
                and config_fields[f"oar_{name}"].default == setting.default)
        assert f"--{name.replace('_', '-')}" in help_text, name
    with pytest.raises(SettingsError, match="settings key 'oar.entropy_top_fraction' must be in \\(0, 1\\], got 0"):
        OARSettings.of({"entropy_top_fraction": 0})
    from validated_registry import validated_registry

    cfg = yaml.safe_load((ROOT / "tests" / "data" / "registry_config.yaml").read_text())
    assert "entropy_top_fraction" not in validated_registry(cfg).scorer_options()
    assert "entropy_top_fraction" not in validated_registry(cfg).run_settings("smollm2", "entropy", 0)["oar"]
    cfg["training"]["oar"]["entropy_top_fraction"] = 0.2
    assert validated_registry(cfg).scorer_options()["entropy_top_fraction"] == 0.2
    assert validated_registry(cfg).run_settings("smollm2", "entropy", 0)["oar"]["entropy_top_fraction"] == 0.2


def test_the_entropy_controls_top_fraction_keeps_each_responses_highest_entropy_tokens(tiny_model):
    """The 80/20 rule's top-20% tokens as a scorer (oar.entropy_top_fraction), by hand and on the model."""
    from oar.method.controls import top_fraction
    from oar.method.scorer_config import ScorerConfig

    assert top_fraction(torch.tensor([0.5, 2.0, 1.0, 3.0, 0.1]), 0.4).tolist() == [0, 2.0, 0, 3.0, 0]
    assert top_fraction(torch.tensor([0.5, 2.0, 1.0]), 0.2).tolist() == [0, 2.0, 0]  # at least one token
    assert top_fraction(torch.tensor([1.0, 1.0, 0.5]), 0.2).tolist() == [1.0, 1.0, 0]  # ties kept
    model, _ = tiny_model
    rows = probes((10, 7))
    full = score("entropy", model, rows)
    top = score("entropy", model, rows, ScorerConfig(entropy_top_fraction=0.2))
    for i, n in enumerate((10, 7)):
        kept = top.scores[i, :n] > 0
        assert kept.sum() == math.ceil(0.2 * n)
        assert torch.equal(top.scores[i, :n][kept], full.scores[i, :n][kept])
        assert full.scores[i, :n][kept].min() >= full.scores[i, :n][~kept].max()


def test_the_plans_know_every_builtin_scorer():
    """The cost plan prices every built-in scorer (a model-free one at no cost) and calibrates exactly the
    ones that run the model: the plans' lists are the registry's, tested equal."""
    from transformers import LlamaConfig

    from oar.method.names import BASELINE, MODEL_FREE_SCORERS
    from oar.method.scorer_registry import BUILTIN_SCORERS
    from oar.planning import cost_model
    from oar.planning.calibration import CALIBRATED_METHODS
    from oar.planning.shapes import shape_of
    from oar.training.settings import OARSettings

    reading = {n for n in BUILTIN_SCORERS if scorer_spec(n).reads("model")}
    # every scorer that runs the model is calibrated under its own name or a measured one's
    assert {BASELINE} | {cost_model.calibrated_scorer(n) for n in reading} <= set(CALIBRATED_METHODS)
    assert set(CALIBRATED_METHODS) <= {BASELINE} | reading
    assert set(MODEL_FREE_SCORERS) == set(BUILTIN_SCORERS) - reading
    shape = shape_of(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=512))
    oar = vars(OARSettings())
    for name in BUILTIN_SCORERS:
        work = cost_model.scoring_work(shape, name, oar, prompt=32, reasoning=64, probe=110, keep=8, scored=4, group=4)
        assert (work.flops > 0) == (name in reading), name
