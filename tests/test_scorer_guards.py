"""No silent surprises for a TRL user: OARConfig trains the paper's OAR-G unless told otherwise and the
trainer says what trains; a GRPOConfig, or no config, is handled as GRPOTrainer's user expects; a scorer
that changes the model's weights stops, named (oar.method.weight_fingerprint); all-zero scores are warned
of once; a user's scorer is tried on a made-up batch when the trainer is built (oar.training.scorer_checks)."""

from __future__ import annotations

import logging

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from oar.method.importance import score
from oar.method.probes import ProbeOptions
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import ScorerError, register_scorer, scorer_spec
from oar.method.weight_fingerprint import (SAMPLES, ModelDigest, WeightFingerprint, digests, first_change,
                                           first_digest_change, fingerprints)
from oar.training.grpo_trainer import OARConfig, OARTrainer
from oar.training.scorer_checks import CHECK_REWARDS, check_on_made_up_batch, made_up_probes
from test_trainer import dataset, make_trainer, parity_reward

TRAINER_LOG = "oar.training.grpo_trainer"


def reasoning_ones(batch):
    return [torch.ones(p.reasoning_len) for p in batch.probes]


# ------------------------------------------------------------------ the method, the config, the names


def test_oar_method_defaults_to_the_papers_oar_g_and_the_trainer_says_what_trains(tiny_model_dir, tmp_path,
                                                                                  caplog):
    assert OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False).oar_method == "oar_g"
    caplog.set_level(logging.INFO, logger=TRAINER_LOG)
    trainer = make_trainer(tiny_model_dir, tmp_path / "default", oar_tau=0.3)  # no oar_method
    assert trainer._setup.method == "oar_g"
    lines = [r.getMessage() for r in caplog.records if r.name == TRAINER_LOG and r.levelno == logging.INFO]
    assert lines == ["OARTrainer trains 'oar_g': token advantages from scorer 'oar_g' (OAR-G: |gradient x input| "
                     "of the outcome's divergence at a noised point) through the gate (tau 0.3, beta 2.0, floor 0.1)"]
    caplog.clear()
    make_trainer(tiny_model_dir, tmp_path / "grpo", oar_method="grpo")
    lines = [r.getMessage() for r in caplog.records if r.name == TRAINER_LOG and r.levelno == logging.INFO]
    assert lines == ["OARTrainer trains 'grpo': GRPO's advantages, unchanged (stock GRPOTrainer)"]


def test_a_grpo_config_is_refused_in_one_line_naming_oar_config(tiny_model_dir, tmp_path):
    with pytest.raises(TypeError) as raised:
        make_trainer(tiny_model_dir, tmp_path, config_cls=GRPOConfig)
    message = str(raised.value)
    assert "\n" not in message and "OARConfig" in message and "got GRPOConfig" in message


def test_no_config_makes_one_as_grpo_trainer_does(tiny_model_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.chdir(tmp_path)  # the made config's output_dir is relative, as GRPOTrainer's
    # GRPOConfig's bf16 default (True) needs a bf16 GPU; on this CPU, let it pass as one would (bf16 autocast
    # runs on CPU too), so that both trainers build with their made configs
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    built = {}
    for cls in (GRPOTrainer, OARTrainer):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        built[cls] = cls(model=model, reward_funcs=parity_reward, train_dataset=dataset(),
                         processing_class=AutoTokenizer.from_pretrained(tiny_model_dir)).args
    stock, ours = built[GRPOTrainer], built[OARTrainer]
    assert type(ours) is OARConfig and ours.oar_method == "oar_g"
    assert stock.output_dir.endswith("-GRPO") and ours.output_dir == stock.output_dir[: -len("GRPO")] + "OAR"
    # everything else is GRPOConfig's defaults, as GRPOTrainer made them
    assert ours.learning_rate == stock.learning_rate and ours.num_generations == stock.num_generations


def test_oar_config_goes_through_trls_parser_with_its_checks(tmp_path):
    from trl import TrlParser

    parser = TrlParser(OARConfig)
    (config,) = parser.parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false",
                                              "--oar_method", "oar_p", "--oar_tau", "0.3"])
    assert (config.oar_method, config.oar_tau) == ("oar_p", 0.3)
    with pytest.raises(ValueError, match="^OARConfig field 'oar_beta' must be"):
        parser.parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false",
                                      "--oar_beta", "-1"])


# ------------------------------------------------------------------ the weight fingerprint


def one_mutation_each():
    """Ways a scorer could change the weights, each with what the fingerprint must say."""
    def in_place(model):
        with torch.no_grad():
            model.model.layers[1].self_attn.o_proj.weight.add_(1e-3)

    def through_data(model):
        model.model.layers[0].mlp.up_proj.weight.data.mul_(0.5)

    def data_replaced(model):
        layer = model.model.layers[1].self_attn.q_proj
        layer.weight.data = layer.weight.data + 1.0

    def swapped(model):
        layer = model.model.layers[0].self_attn.k_proj
        layer.weight = torch.nn.Parameter(layer.weight.detach().clone())

    def backward(model):
        model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()

    return [(in_place, "wrote parameter 'model.layers.1.self_attn.o_proj.weight' in place"),
            (through_data, "changed the values of parameter 'model.layers.0.mlp.up_proj.weight' (through .data)"),
            (data_replaced, "changed the values of parameter 'model.layers.1.self_attn.q_proj.weight'"),
            (swapped, "replaced or removed parameter 'model.layers.0.self_attn.k_proj.weight'"),
            (backward, "left a gradient on parameter")]


@pytest.mark.parametrize("mutate, said", one_mutation_each(), ids=lambda x: getattr(x, "__name__", ""))
def test_the_fingerprint_sees_each_way_of_changing_the_weights(mutate, said):
    from oar.models.tiny import build_tiny_model

    model = build_tiny_model(seed=0)[0]
    models = {"the policy": model}
    before = fingerprints(models)
    assert first_change(before, models) is None
    model(input_ids=torch.tensor([[1, 2, 3]]))  # a forward, eval or train mode, changes nothing
    model.eval()
    assert first_change(before, models) is None
    mutate(model)
    change = first_change(before, models)
    assert change is not None and said in change and change.endswith("of the policy")


def test_the_fingerprint_takes_nan_weights_as_unchanged():
    from oar.models.tiny import build_tiny_model

    model = build_tiny_model(seed=0)[0]
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    assert WeightFingerprint.of(model).change_since(WeightFingerprint.of(model)) is None


def test_a_scorer_that_changes_the_weights_stops_naming_it(tiny_model, registered):
    from transformers import AutoModelForCausalLM

    model, tokenizer = tiny_model
    model = AutoModelForCausalLM.from_config(model.config)  # a copy of its own: the scorer changes it
    registered("nudges")

    @register_scorer("nudges", needs=("model",))
    def nudges(batch):
        for p in batch.model.parameters():
            p.data.add_(1e-3)  # through .data: no version bump
        return reasoning_ones(batch)

    probes = made_up_probes(tokenizer, ProbeOptions())
    with pytest.raises(ScorerError, match=r"^scorer 'nudges' changed the values of parameter '.*' \(through \.data\) "
                                          r"of the policy \(batch\.model\): a scorer leaves the models as it found"):
        score("nudges", model, probes)
    registered("leaves_grad")

    @register_scorer("leaves_grad", needs=("model",))
    def leaves_grad(batch):
        with torch.enable_grad():
            batch.model(input_ids=torch.tensor([[1, 2]])).logits.sum().backward()  # not autograd.grad
        return reasoning_ones(batch)

    with pytest.raises(ScorerError, match="^scorer 'leaves_grad' left a gradient on parameter"):
        score("leaves_grad", model, probes)


def test_a_scorer_that_changes_the_reference_model_stops_naming_it(tiny_model, registered):
    from transformers import AutoModelForCausalLM

    model, tokenizer = tiny_model
    reference = AutoModelForCausalLM.from_config(model.config)
    registered("moves_reference")

    @register_scorer("moves_reference", needs=("model", "reference_model"))
    def moves_reference(batch):
        with torch.no_grad():
            batch.reference_model.model.norm.weight.mul_(2)
        return reasoning_ones(batch)

    with pytest.raises(ScorerError, match="^scorer 'moves_reference' wrote parameter 'model.norm.weight' in place of "
                                          "the reference model"):
        score("moves_reference", model, made_up_probes(tokenizer, ProbeOptions()), reference_model=reference)


def test_the_digest_sees_what_a_calls_fingerprint_cannot():
    """The exact digest (taken around a benchmark entry) sees every mutation the per-call fingerprint sees
    but a gradient (which a call checks), and three it cannot: a write between its samples, a buffer, a hook."""
    from oar.models.tiny import build_tiny_model

    def between_samples(model):
        weight = model.model.embed_tokens.weight
        step = max(1, weight.numel() // SAMPLES)
        weight.data.view(-1)[1 : step * SAMPLES : step] += 1.0  # the positions right after the sampled ones

    def buffer(model):
        model.model.rotary_emb.inv_freq.mul_(0.5)

    def hook(model):
        model.model.norm.register_forward_pre_hook(lambda module, args: None)

    unseen = [(between_samples, "changed the values of parameter 'model.embed_tokens.weight'"),
              (buffer, "changed the values of buffer 'model.rotary_emb.inv_freq'"),
              (hook, "changed the hooks of module 'model.norm' (0 to 1)")]
    for mutate, said in [*one_mutation_each()[:4], *unseen]:
        model = build_tiny_model(seed=0)[0]
        models = {"the policy": model}
        before, sampled = digests(models), fingerprints(models)
        model(input_ids=torch.tensor([[1, 2, 3]]))
        assert first_digest_change(before, models) is None
        mutate(model)
        change = first_digest_change(before, models)
        assert change is not None and change.endswith("of the policy"), mutate.__name__
        if (mutate, said) in unseen:
            assert change.startswith(said) and first_change(sampled, models) is None, mutate.__name__
    model = build_tiny_model(seed=0)[0]
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    assert ModelDigest.of(model).change_since(ModelDigest.of(model)) is None


# ------------------------------------------------------------------ a scorer sees only what it declares


def test_a_scorer_is_handed_only_what_it_declares(tiny_model, registered):
    """The parsed positions on the probes (the answer key) reach only a scorer that declares parsed_steps,
    the model only one that declares model; the fingerprint still watches the real model."""
    from dataclasses import replace

    model, tokenizer = tiny_model
    probes = [replace(p, decisive=(0,), final_step=(0,), irrelevant=()) for p in
              made_up_probes(tokenizer, ProbeOptions())]
    seen = {}

    def looks(name):
        def scorer(batch):
            seen[name] = (batch.model, [(p.decisive, p.final_step, p.irrelevant) for p in batch.probes])
            return reasoning_ones(batch)
        return scorer

    for name, needs in (("sees_nothing", ()), ("sees_model", ("model",)), ("sees_key", ("parsed_steps",)),
                        ("sees_both", ("model", "parsed_steps"))):
        registered(name)
        register_scorer(name, looks(name), needs=needs)
        score(name, model, probes)
    hidden, shown = [(None, None, None)] * len(probes), [((0,), (0,), ())] * len(probes)
    assert seen["sees_nothing"] == (None, hidden) and seen["sees_model"] == (model, hidden)
    assert seen["sees_key"] == (None, shown) and seen["sees_both"] == (model, shown)
    assert probes[0].decisive == (0,)  # the caller's probes are left as they were
    # every built-in that declares no model scores as before without one (truth reads the key it declares)
    for name in ("position", "random", "truth", "truth_graded", "truth_final", "truth_early"):
        assert score(name, model, probes).scored.all(), name
    registered("reaches_model")

    @register_scorer("reaches_model", needs=())
    def reaches_model(batch):  # through a reference of its own, not batch.model
        with torch.no_grad():
            model_copy.model.norm.weight.add_(1.0)
        return reasoning_ones(batch)

    from transformers import AutoModelForCausalLM

    model_copy = AutoModelForCausalLM.from_config(model.config)
    with pytest.raises(ScorerError, match="^scorer 'reaches_model' wrote parameter 'model.norm.weight' in place of the "
                                          "policy"):
        score("reaches_model", model_copy, probes)


def test_a_bad_row_is_named_by_its_index_in_the_callers_probes(tiny_model, registered):
    """The scorer is handed only the active rows; its bad row is named as the caller numbers it."""
    from oar.method.scorer_contract import ScorerRowError

    model, tokenizer = tiny_model
    probes = made_up_probes(tokenizer, ProbeOptions())
    registered("nan_first")
    register_scorer("nan_first", lambda b: [torch.full((p.reasoning_len,), float("nan")) for p in b.probes],
                    needs=())
    with pytest.raises(ScorerRowError, match=r"^scorer 'nan_first', row 1: score nan at reasoning token 0 is not "
                                             r"finite$") as raised:
        score("nan_first", model, probes, active=[False, True])
    assert raised.value.row == 1


# ------------------------------------------------------------------ the check at construction, all-zero scores


def test_a_broken_users_scorer_stops_the_trainer_at_construction(tiny_model_dir, tmp_path, registered):
    with pytest.raises(ScorerError, match=r"^scorer 'user_scorers:wrong_length', row 0: scores of shape") as raised:
        make_trainer(tiny_model_dir, tmp_path / "path", oar_method="user_scorers:wrong_length")
    assert "OARTrainer's check at construction" in "\n".join(raised.value.__notes__)
    registered("sets_weights")

    @register_scorer("sets_weights", needs=("model",))
    def sets_weights(batch):
        with torch.no_grad():
            next(batch.model.parameters()).zero_()
        return reasoning_ones(batch)

    with pytest.raises(ScorerError, match="^scorer 'sets_weights' wrote parameter '.*' in place of the policy"):
        make_trainer(tiny_model_dir, tmp_path / "registered", oar_method="sets_weights")


def test_the_check_meets_each_need_it_can_and_leaves_the_random_generators(tiny_model, registered):
    model, tokenizer = tiny_model
    options, config, seen = ProbeOptions(), ScorerConfig(), []
    registered("draws")

    @register_scorer("draws", needs=("model", "probe", "groups", "attentions"))
    def draws(batch):
        seen.append((list(batch.kinds), list(batch.groups), list(batch.rewards)))
        torch.rand(3)  # against the contract (the global generator), and harmless to the run here
        return reasoning_ones(batch)

    state = torch.get_rng_state()
    assert check_on_made_up_batch(scorer_spec("draws"), model, tokenizer, options, config)
    assert torch.equal(torch.get_rng_state(), state)
    assert seen == [([config.probe] * 2, [0, 0], list(CHECK_REWARDS))]  # both rows have their answer span
    assert not check_on_made_up_batch(scorer_spec("oar_g"), model, tokenizer, options, config)  # built in
    with torch.device("meta"):  # a process that holds no weights yet (FSDP's low-memory loading)
        empty = type(model)(model.config)
    assert not check_on_made_up_batch(scorer_spec("draws"), empty, tokenizer, options, config) and len(seen) == 1
    registered("reads_steps")
    register_scorer("reads_steps", lambda b: seen.append("called") or reasoning_ones(b), needs=("parsed_steps",))
    assert not check_on_made_up_batch(scorer_spec("reads_steps"), model, tokenizer, options, config)
    assert seen[-1] != "called"


def test_all_zero_scores_warn_once_a_run(tiny_model_dir, tmp_path, registered, caplog):
    registered("zeros")
    register_scorer("zeros", lambda b: [torch.zeros(p.reasoning_len) for p in b.probes], needs=())
    caplog.set_level(logging.WARNING, logger=TRAINER_LOG)
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="zeros", max_steps=2)
    trainer.train()
    assert trainer.state.global_step == 2 and all(log["oar/frac_scored"] > 0 for log in trainer.state.log_history
                                                  if "oar/frac_scored" in log)
    warned = [r.getMessage() for r in caplog.records if r.name == TRAINER_LOG and r.levelno == logging.WARNING]
    assert warned == ["scorer 'zeros' gave 0 to every reasoning token of every row it scored at step 0: the gate "
                      "then gives every token weight 1, GRPO's uniform advantages (warned once a run)"]
    caplog.clear()
    make_trainer(tiny_model_dir, tmp_path / "ones", oar_method="position").train()
    assert not [r for r in caplog.records if r.name == TRAINER_LOG and r.levelno == logging.WARNING]
