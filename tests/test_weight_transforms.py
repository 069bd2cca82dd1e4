"""Interventions as registered weight transforms (oar.method.weight_transforms): a new one is a few lines in
one place and trains through the trainer's own path, and the three built-ins give, bit for bit, what the
trainer's calls of oar.method.interventions gave before they were registered."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from oar.method import names
from oar.method.gate import gate
from oar.method.importance import score
from oar.method.interventions import hold_to_rest, hold_top_outside, set_to_ratio
from oar.method.probes import Probe, probes_from_padded
from oar.method.scorer_registry import ScorerError, register_scorer
from oar.method.weight_transforms import register_transform, transform_spec, unregister_transform
from oar.training.grpo_trainer import MethodSetup, OARConfig, OARTrainer, scoring_seed, with_decisive_tokens
from oar.training.pretrain import PretrainSettings, build_model, build_tokenizer
from oar.training.settings import OARSettings

pytestmark = pytest.mark.quick

TEXTS = ["3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. 10 - 4 = 6. Therefore, the final answer is \\boxed{6}.",
         "3 + 1 = 4. 4 * 2 = 8. Note: teal. 8 - 4 = 4. Therefore, the final answer is \\boxed{4}."]


@pytest.fixture(scope="module")
def rollout():
    """Two chain responses to one prompt, padded as TRL hands them to the trainer, and a one-layer policy."""
    tokenizer = build_tokenizer(416, distractors=True)
    torch.manual_seed(0)
    model = build_model(PretrainSettings(layers=1, hidden=32), tokenizer).eval()
    prompt = tokenizer("Start with 3. Add 1. What is the result?", add_special_tokens=False)["input_ids"]
    responses = [tokenizer(t + tokenizer.eos_token, add_special_tokens=False)["input_ids"] for t in TEXTS]
    width = max(map(len, responses))
    output = {"prompt_ids": torch.tensor([prompt] * 2), "prompt_mask": torch.ones(2, len(prompt), dtype=torch.long),
              "completion_ids": torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in responses]),
              "completion_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses]),
              "advantages": torch.tensor([1.0, -1.0])}
    return SimpleNamespace(tokenizer=tokenizer, model=model, output=output)


def trainer_for(rollout, tmp_path, method: str, **oar) -> OARTrainer:
    """An OARTrainer without TRL's set-up, holding what its ``_token_weights`` reads (``__init__`` builds the
    same ``MethodSetup``)."""
    args = OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", oar_method=method,
                     per_device_train_batch_size=2, num_generations=2, oar_substitute=".", seed=1, **oar)
    trainer = OARTrainer.__new__(OARTrainer)
    trainer.args, trainer.processing_class, trainer.model = args, rollout.tokenizer, rollout.model
    trainer.state = SimpleNamespace(global_step=0)
    trainer.accelerator = SimpleNamespace(unwrap_model=lambda m: m, process_index=0)
    trainer._setup, trainer._reference_model = MethodSetup.of(method, args.oar_settings()), None
    return trainer


def test_a_new_intervention_is_one_registration_and_trains_through_the_trainers_path(rollout, tmp_path):
    """The worked example: an intervention that doubles the weight of every parsed decisive token is the
    function and its registration below; it is then a method (config, names, the trainer) with no other
    file touched, and the trainer's weights are the gate's weights with the function applied."""

    @register_transform("truth_doubled", "truth", settings=(), kind="example",
                        description="the truth gate's weights with every decisive token's weight doubled")
    def double_decisive(weights, reasoning_mask, probes, settings):
        doubled = weights.clone()
        for row, probe in enumerate(probes):
            doubled[row, list(probe.decisive)] *= 2
        return doubled

    try:
        assert names.is_method("truth_doubled") and names.scorer_of("truth_doubled") == "truth"
        assert names.reads_parsed_steps("truth_doubled") and names.is_gated("truth_doubled")
        with pytest.raises(ScorerError, match="'truth_doubled' is taken by a method"):
            register_scorer("truth_doubled", lambda batch: [], needs=())
        plain = trainer_for(rollout, tmp_path, "truth")
        doubled = trainer_for(rollout, tmp_path, "truth_doubled")
        truth_weights, truth_counts = plain._token_weights(rollout.output)
        weights, counts = doubled._token_weights(rollout.output)
        probes = doubled._probes(rollout.output, rollout.output["completion_mask"].bool())
        expected = truth_weights.clone()
        for row, probe in enumerate(probes):
            assert probe.decisive
            expected[row, list(probe.decisive)] *= 2
        assert torch.equal(weights, expected) and not torch.equal(weights, truth_weights)
        assert counts["scored"] == truth_counts["scored"] == 2.0
    finally:
        unregister_transform("truth_doubled")
    assert not names.is_method("truth_doubled") and transform_spec("truth_doubled") is None


def test_a_bad_registration_stops_naming_the_intervention():
    for name, scorer, message in (("Bad", "truth", "must be lower-case"), ("oar_g_rescue", "oar_g", "already"),
                                  ("fine", "no_such_scorer", "not a registered scorer"),
                                  ("truth", "truth", "a scorer is registered under it")):
        with pytest.raises(ValueError, match=message):
            register_transform(name, scorer, lambda w, m, p, s: w)
    with pytest.raises(ValueError, match="built in"):
        unregister_transform("truth_dose")


def test_the_builtins_are_the_mechanism_tests_and_names_reads_them():
    assert names.RESCUES == {"oar_g_rescue": "oar_g"} and names.PLACEBOS == {"oar_g_placebo": "oar_g"}
    assert names.DOSES == {"truth_dose": "truth"}
    assert names.INTERVENED == {"oar_g_rescue": "oar_g", "oar_g_placebo": "oar_g", "truth_dose": "truth",
                                "oar_g_steps": "oar_g"}
    assert transform_spec("truth_dose").settings == ("final_step_ratio",)
    # the mechanism's read the parsed positions; the step balance reads the response's own steps alone
    assert all(transform_spec(m).reads_parsed_steps for m in names.INTERVENED if m != "oar_g_steps")
    assert transform_spec("oar_g_steps").reads == frozenset({"steps"})


def _old_token_weights(trainer: OARTrainer, output) -> torch.Tensor:
    """The trainer's weights as computed before the interventions were registered: the gate, then an
    if/elif over the methods calling oar.method.interventions (kept here, verbatim in what it computes)."""
    args = trainer.args
    completion_mask = output["completion_mask"].bool()
    probes = probes_from_padded(trainer.processing_class, output["prompt_ids"], output["prompt_mask"],
                                output["completion_ids"], completion_mask,
                                fallback_last_number=args.oar_fallback_last_number,
                                own_conclusion=args.oar_own_conclusion, substitute=args.oar_substitute,
                                answer_statement=args.oar_answer_statement)
    probes = [with_decisive_tokens(trainer.processing_class, p) for p in probes]
    scores = score(names.scorer_of(args.oar_method), trainer.model, probes, args.oar_settings().scorer_config(),
                   active=(output["advantages"] != 0).cpu(), width=completion_mask.shape[1], probe=None,
                   seed=scoring_seed(args.seed, 0, 0), reference_model=None)
    weights = gate(scores.scores, scores.reasoning_mask, args.oar_tau, args.oar_beta, args.oar_floor)
    if args.oar_method == "oar_g_rescue":
        weights = hold_to_rest(weights, scores.reasoning_mask, [p.final_step for p in probes])
    elif args.oar_method == "oar_g_placebo":
        weights = hold_top_outside(weights, scores.reasoning_mask, [p.final_step for p in probes])
    elif args.oar_method == "truth_dose":
        weights = set_to_ratio(weights, scores.reasoning_mask, [p.final_step for p in probes],
                               [set(p.decisive) - set(p.final_step) for p in probes], args.oar_final_step_ratio)
    return weights.to(output["advantages"].device) * completion_mask


@pytest.mark.parametrize("method, oar", [("oar_g_rescue", {}), ("oar_g_placebo", {}),
                                         ("truth_dose", {"oar_final_step_ratio": 1.0}),
                                         ("truth_dose", {"oar_final_step_ratio": 4.0}), ("oar_g", {})])
def test_the_registered_transforms_give_exactly_the_old_calls_weights(rollout, tmp_path, method, oar):
    trainer = trainer_for(rollout, tmp_path, method, **oar)
    weights, _ = trainer._token_weights(rollout.output)
    assert torch.equal(weights, _old_token_weights(trainer, rollout.output))


def test_each_transform_equals_its_intervention_on_random_weights():
    """Directly, on random weights and parsed positions: each registered function is its old call."""
    generator = torch.Generator().manual_seed(7)
    weights = torch.rand(3, 12, generator=generator, dtype=torch.float32) + 0.1
    mask = torch.zeros(3, 12, dtype=torch.bool)
    mask[:, :9] = True
    decisive, final = [(1, 3, 6, 8), (0, 2, 5), ()], [(6, 8), (5,), ()]
    probes = [Probe(prompt_ids=(1,), response_ids=tuple(range(12)), reasoning_len=9, conclude_ids=(2,),
                    answer_ids=(3,), answer_kind="boxed", pad_id=0, decisive=d, final_step=f)
              for d, f in zip(decisive, final)]
    settings = OARSettings(final_step_ratio=3.0)
    old = {"oar_g_rescue": hold_to_rest(weights, mask, final),
           "oar_g_placebo": hold_top_outside(weights, mask, final),
           "truth_dose": set_to_ratio(weights, mask, final, [set(d) - set(f) for d, f in zip(decisive, final)], 3.0)}
    for method, expected in old.items():
        assert torch.equal(transform_spec(method).transform(weights, mask, probes, settings), expected), method
