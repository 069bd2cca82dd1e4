"""The decisive testbed's parts: distractor notes and longer chains (oar.data.chains), the token classes
of the gradient-share table, the truth scorer, probes that continue a response's own conclusion, the
substitute token, and the config checks that tie them to the chain task."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from oar.data import chains
from oar.data.catalogue import chain_split, chain_steps
from oar.data.datasets import load_dataset_records
from oar.grading.grader import grade
from oar.method.gate import gate
from oar.method.importance import score
from oar.method.probes import CONCLUDE_TEXT, build_probes, conclusion_start, substitute_token_id, token_char_spans
from oar.training.pretrain import GradientShare, build_model, build_tokenizer, PretrainSettings


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(416, distractors=True)


def test_distractor_notes_add_free_words_but_no_decisive_token():
    p = chains.problem("test", 4, steps=5)
    plain, ok = chains.solution(p, random.Random(3), error_rate=0.0)
    noted, ok_noted = chains.solution(p, random.Random(3), error_rate=0.0, distractors=6)
    assert ok and ok_noted and grade(noted, str(p.answer)).correct
    assert noted.count(chains.DISTRACTOR_NOTE) == 5
    words = [w.strip(".") for note in noted.split(chains.DISTRACTOR_NOTE)[1:] for w in note.split(".")[0].split()]
    assert len(words) == 30 and set(words) <= set(chains.DISTRACTOR_WORDS)
    # the same decisive tokens: relations and results only
    keep = lambda t: [t[s:e] for s, e in chains.decisive_spans(t)]  # noqa: E731
    assert keep(noted) == keep(plain)
    # without notes, the random draws are those of a solution without the knob (existing policies unchanged)
    assert chains.solution(p, random.Random(5), 1, 0.3) == chains.solution(p, random.Random(5), 1, 0.3, 0)


def test_knobs_out_of_range_are_named():
    p = chains.problem("test", 0)
    with pytest.raises(ValueError, match="distractors must be an integer in 0..32"):
        chains.solution(p, random.Random(0), distractors=33)
    with pytest.raises(ValueError, match="steps must be an integer in 1..6"):
        PretrainSettings(steps=7)


def test_each_distractor_word_is_one_token_and_policies_without_notes_keep_their_vocabulary(tokenizer):
    for word in chains.DISTRACTOR_WORDS:
        assert len(tokenizer(" " + word, add_special_tokens=False)["input_ids"]) == 1, word
    text = chains.solution(chains.problem("test", 1), random.Random(0), 1, 0.25)[0]
    assert build_tokenizer(416).tokenize(text) == build_tokenizer(416, distractors=False).tokenize(text)


def test_long_chains_are_a_dataset_of_their_own():
    assert chain_steps("chain_train") == 3 and chain_steps("chain5_test") == 5 and chain_steps("gsm8k_test") is None
    test = chain_split("test", 5)
    assert all(len(p.ops) == 5 for p in test)
    train = {p.text for p in chain_split("train", 5)}
    assert not train & {p.text for p in test}
    rows = load_dataset_records("chain5_test").records
    assert [r["problem"] for r in rows] == [p.text for p in test]


def test_token_classes_follow_the_grammar(tokenizer):
    p = chains.problem("test", 2, steps=5)
    text, _ = chains.solution(p, random.Random(0), filler=1, error_rate=0.4, distractors=3)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded, starts, ends = token_char_spans(tokenizer, ids)
    classes = chains.token_classes(decoded, starts, ends)
    by_class = {name: "".join(decoded[s:e] for s, e, c in zip(starts, ends, classes) if c == name)
                for name in chains.TOKEN_CLASSES}
    assert by_class["relation"].replace(" ", "") == "".join(m[3] for m in chains._EQUATION.findall(text))
    assert by_class["result"] == "".join(m[4] for m in chains._EQUATION.findall(text))
    assert by_class["distractor"].split() == [w for note in text.split("Note: ")[1:]
                                              for w in note.split(".")[0].split()]
    assert by_class["template"].startswith(" Therefore") and by_class["template"].endswith("}.")
    assert len(by_class["remark"].split()) == 5  # the first word of each step's remark
    positions = chains.decisive_tokens(decoded, starts, ends)
    assert [classes[j] for j in positions] == [c for c in classes if c in ("relation", "result")]


def test_gradient_share_puts_the_mass_where_the_policy_is_free(tokenizer):
    """On an untrained model every token is uncertain, so the mass follows the token counts; the sizes are
    ||e_y - pi||, at most sqrt(2)."""
    model = build_model(PretrainSettings(layers=1, hidden=32), tokenizer).eval()
    share = GradientShare()
    prompt = torch.tensor([tokenizer("Start", add_special_tokens=False)["input_ids"]])
    text = chains.solution(chains.problem("test", 0), random.Random(0), 0, 0.0, 4)[0]
    response = torch.tensor([tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        share.add(model, tokenizer, torch.cat([prompt, response], dim=1), prompt.shape[1], 1.0)
    out = share.summary()
    assert out["responses"] == 1 and out["tokens"] == response.shape[1] - 1  # eos left out
    classes = out["classes"]
    assert sum(c["token_share"] for c in classes.values()) == pytest.approx(1.0)
    assert sum(c["gradient_share"] for c in classes.values()) == pytest.approx(1.0)
    assert classes["distractor"]["token_share"] == pytest.approx(12 / out["tokens"])
    assert all(0 < c["mean_norm"] <= 2 ** 0.5 for c in classes.values() if c["mean_norm"] == c["mean_norm"])


def _probe(tokenizer, text, **kwargs):
    prompt = tokenizer("Start with 3. Add 1. What is the result?", add_special_tokens=False)["input_ids"]
    response = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    (probe,) = build_probes(tokenizer, [prompt], [response], **kwargs)
    return probe, response


def test_the_probe_continues_the_response_own_conclusion(tokenizer):
    text = "3 + 1 = 4. Note: owl cat. Therefore, the final answer is \\boxed{4}."
    own, response = _probe(tokenizer, text, own_conclusion=True)
    appended, _ = _probe(tokenizer, text)
    reasoning = tokenizer.decode(response[: own.reasoning_len])
    assert reasoning.endswith("owl cat.") and own.reasoning_len < appended.reasoning_len
    # the probe is the response itself up to the answer: no repeated template
    assert tokenizer.decode(own.ids("as_mean")).count("Therefore") == 1
    assert tokenizer.decode(list(own.prompt_ids) + response)[: len(tokenizer.decode(own.ids("as_mean")))] == \
        tokenizer.decode(own.ids("as_mean"))
    assert tokenizer.decode(appended.ids("as_mean")).count("Therefore") == 2
    assert own.answer_ids == appended.answer_ids
    # a box at the end of a computation keeps the computation as reasoning and appends the template
    maths = "3 + 1 = \\boxed{4}."
    kept, _ = _probe(tokenizer, maths, own_conclusion=True)
    assert kept.conclude_ids == tuple(tokenizer(CONCLUDE_TEXT, add_special_tokens=False)["input_ids"])
    stated = "x. So the answer is $\\boxed{"
    assert conclusion_start(stated, stated.index("\\")) == 2
    assert conclusion_start("x = 3 so \\boxed{", 9) is None


def test_the_substitute_is_a_setting(tokenizer):
    probe, _ = _probe(tokenizer, "3 + 1 = 4. Therefore, the final answer is \\boxed{4}.", substitute=".")
    assert probe.pad_id == tokenizer(".", add_special_tokens=False)["input_ids"][0] != tokenizer.pad_token_id
    assert substitute_token_id(tokenizer, "pad") == tokenizer.pad_token_id
    with pytest.raises(ValueError, match="'Note: owl' is 3 tokens"):
        substitute_token_id(tokenizer, "Note: owl")


def _ground_truth_scored(tokenizer, text: str, scorer: str, missing: str):
    """``text``'s probe scored by a truth scorer, which stops (``missing``) until training attaches the parsed
    positions; with the text of each reasoning token."""
    from oar.training.grpo_trainer import with_decisive_tokens

    probe, response = _probe(tokenizer, text, own_conclusion=True)
    with pytest.raises(ValueError, match=missing):
        score(scorer, torch.nn.Linear(1, 1), [probe])
    probe = with_decisive_tokens(tokenizer, probe)
    decoded, starts, ends = token_char_spans(tokenizer, response[: probe.reasoning_len])
    pieces = [decoded[a:b] for a, b in zip(starts, ends)]
    return probe, score(scorer, torch.nn.Linear(1, 1), [probe]), pieces


def test_the_truth_gate_boosts_exactly_the_decisive_tokens(tokenizer):
    text = "3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. Therefore, the final answer is \\boxed{10}."
    probe, result, pieces = _ground_truth_scored(tokenizer, text, "truth",
                                                 "scorer 'truth' needs the decisive positions")
    marked = "".join(piece for j, piece in enumerate(pieces) if result.scores[0, j] == 1)
    assert marked.replace(" ", "") == "~5=10"
    weights = gate(result.scores, result.reasoning_mask, tau=0.4, beta=2.0)[0, : probe.reasoning_len]
    decisive = result.scores[0, : probe.reasoning_len] == 1
    # binary scores tie at the quantile: the rest keep one weight and the decisive tokens get 1 + beta times it
    assert torch.allclose(weights[decisive] / weights[~decisive].mean(), torch.tensor(3.0))
    assert weights.sum().item() == pytest.approx(probe.reasoning_len)


def test_the_graded_truth_gate_suppresses_the_choices_that_cannot_change_the_answer(tokenizer):
    from oar.training.grpo_trainer import with_decisive_tokens

    text = "3 + 1 ~ 5. Note: owl cat teal. 5 * 2 = 10. Therefore, the final answer is \\boxed{10}."
    probe, result, pieces = _ground_truth_scored(
        tokenizer, text, "truth_graded", "scorer 'truth_graded' needs the decisive and irrelevant positions")
    scores = result.scores[0, : probe.reasoning_len]

    def marked(value):
        return "".join(piece for j, piece in enumerate(pieces) if scores[j] == value)

    assert marked(1.0).replace(" ", "") == "~5=10"
    assert marked(0.0).split() == ["owl", "cat", "teal"]
    assert (scores == 0.5).sum() == probe.reasoning_len - len(probe.decisive) - 3  # what the text before forces
    weights = gate(result.scores, result.reasoning_mask, tau=0.4, beta=2.0)[0, : probe.reasoning_len]
    binary = score("truth", torch.nn.Linear(1, 1), [probe])
    binary_weights = gate(binary.scores, binary.reasoning_mask, tau=0.4, beta=2.0)[0, : probe.reasoning_len]
    # the note's words fall in the suppression band, to the floor; the truth gate leaves them at the rest's weight
    irrelevant, forced, decisive = scores == 0.0, scores == 0.5, scores == 1.0
    assert torch.allclose(weights[irrelevant] / weights[forced].mean(), torch.tensor(0.1))
    assert torch.allclose(weights[decisive] / weights[forced].mean(), torch.tensor(3.0))
    assert torch.allclose(binary_weights[irrelevant], binary_weights[forced].mean())
    assert weights.sum().item() == pytest.approx(probe.reasoning_len)
    # without such words (no notes, no remarks) the two gates weigh every token alike
    plain, _ = _probe(tokenizer, "3 + 1 ~ 5. 5 * 2 = 10. Therefore, the final answer is \\boxed{10}.",
                      own_conclusion=True)
    plain = with_decisive_tokens(tokenizer, plain)
    same = [score(name, torch.nn.Linear(1, 1), [plain]) for name in ("truth", "truth_graded")]
    assert torch.equal(*(gate(r.scores, r.reasoning_mask, tau=0.4, beta=2.0) for r in same))


def test_the_final_step_truth_gate_boosts_only_the_last_steps_decisive_tokens(tokenizer):
    text = "3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. 10 - 4 = 6. Therefore, the final answer is \\boxed{6}."
    probe, result, pieces = _ground_truth_scored(
        tokenizer, text, "truth_final", "scorer 'truth_final' needs the last step's decisive positions")
    scores = result.scores[0, : probe.reasoning_len]
    assert "".join(p for j, p in enumerate(pieces) if scores[j] == 1).replace(" ", "") == "=6"
    assert set(probe.final_step) < set(probe.decisive)  # earlier steps' decisive tokens score 0 here
    weights = gate(result.scores, result.reasoning_mask, tau=0.4, beta=2.0)[0, : probe.reasoning_len]
    final = scores == 1
    assert torch.allclose(weights[final] / weights[~final].mean(), torch.tensor(3.0))
    assert weights.sum().item() == pytest.approx(probe.reasoning_len)


def _registry(cfg):
    from validated_registry import validated_registry

    return validated_registry(cfg)


def _config(name="config.yaml"):
    from pathlib import Path

    import yaml

    return yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / name).read_text())


def test_the_truth_scorer_and_long_chains_are_checked_before_any_job():
    from oar.experiment.config_error import ConfigError

    cfg = _config()
    cfg["runs"]["main"]["methods"] = ["grpo", "truth"]
    cfg["analysis"]["primary"] = None  # its declared arms are not run here
    assert "chain_f1/truth-tau0.4-beta2.0-seed0" in _registry(cfg).runs
    cfg["data"]["arith_train"] = {"source": "generated"}
    cfg["training"]["dataset"] = "arith_train"
    with pytest.raises(ConfigError, match="^config error at runs.main.methods: method 'truth'"):
        _registry(cfg)
    cfg["runs"]["main"]["methods"] = ["grpo", "truth_graded"]
    with pytest.raises(ConfigError, match="^config error at runs.main.methods: method 'truth_graded'"):
        _registry(cfg)
    cfg["runs"]["main"]["methods"] = ["grpo", "truth_final"]
    with pytest.raises(ConfigError, match="^config error at runs.main.methods: method 'truth_final'"):
        _registry(cfg)
    cfg = _config()
    cfg["models"]["chain_f1"]["pretrain"]["steps"] = 5
    with pytest.raises(ConfigError, match="^config error at models.chain_f1.pretrain: the shipped chain_f1 was "
                                          "pretrained by another recipe: steps 5"):
        _registry(cfg)
    cfg["models"]["chain_f1"].pop("frozen")  # a recipe of one's own: pretrained, not the shipped file
    with pytest.raises(ConfigError, match="^config error at models.chain_f1.pretrain.steps: 5 steps"):
        _registry(cfg)
    cfg["models"]["chain_f1"]["pretrain"]["distractors"] = 40
    with pytest.raises(Exception, match="40 is greater than the maximum of 32"):
        _registry(cfg)


def test_step_attribution_reads_recall_per_step_and_the_blame_on_the_erring_relation():
    from oar.analysis.causal_recall import recall_table
    from oar.analysis.chain_truth import step_attribution

    tokens = ["3", " +", " 1", " ~", " 5", ".", " Note:", " owl", ".", " 5", " *", " 2", " =", " 1", "0", "."]
    erring, later = tokens.index(" ~"), tokens.index(" =")
    responses = [{"index": 0, "reasoning_tokens": tokens, "correct": False}]
    blame_first = [0.0] * len(tokens)
    blame_first[erring] = 5.0
    blame_last = [0.0] * len(tokens)
    blame_last[later], blame_last[erring] = 5.0, 1.0
    out = step_attribution(responses, {"good": [{"index": 0, "scores": blame_first}],
                                       "late": [{"index": 0, "scores": blame_last}]}, fraction=0.1)
    # top 10% of 16 tokens is 2 tokens: the good scorer holds the erring relation (half of step 1's tokens)
    assert out["by_step"]["good"]["1"]["mean"] == pytest.approx(0.5)
    assert out["by_step"]["late"]["2"]["mean"] == pytest.approx(1 / 3)
    assert out["erring"]["good"]["share_erring_heavier"]["mean"] == 1.0
    assert out["erring"]["late"]["share_erring_heavier"]["mean"] == 0.0
    assert out["erring"]["late"]["later_correct_weight"]["mean"] > out["erring"]["late"]["erring_weight"]["mean"]
    recall = {"summary": {}, "responses": 1, "empty_oracle": 0,
              "ground_truth": {"summary": {}, "oracle_agreement": {}, "steps": out}}
    _, text = recall_table(recall)
    assert "### Per chain step" in text and "step 2" in text and "erring `~`" in text


def test_the_gradient_share_table_reads_every_chain_policy():
    from oar.analysis.gradient_share import gradient_share_table

    classes = {name: {"token_share": 1 / 6, "gradient_share": 0.5 if name == "distractor" else 0.1, "mean_norm": 0.5}
               for name in chains.TOKEN_CLASSES}
    summary = {"pretrain": {"check": {"gradient_share": {"responses": 8, "tokens": 96, "classes": classes},
                                      "mean_completion_tokens": 12.0}}}
    frame, text = gradient_share_table({"chain_d16": summary})
    assert set(frame["token_class"]) == set(chains.TOKEN_CLASSES)
    assert "| chain_d16 | distractor | 16.7 | 50.0 |" in text
    with pytest.raises(ValueError, match="'old': its summary has no gradient share"):
        gradient_share_table({"old": {"pretrain": {"check": {}}}})


def test_the_earlier_steps_truth_gate_is_the_truth_gate_without_the_last_step(tokenizer):
    from oar.method.names import METHODS, PARSED_SCORERS

    text = "3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. 10 - 4 = 6. Therefore, the final answer is \\boxed{6}."
    probe, result, pieces = _ground_truth_scored(
        tokenizer, text, "truth_early", "scorer 'truth_early' needs the decisive and last-step positions")
    scores = result.scores[0, : probe.reasoning_len]
    assert "".join(p for j, p in enumerate(pieces) if scores[j] == 1).replace(" ", "") == "~5=10"
    # the 2x2 of where truth credit goes: earlier steps + last step = the truth gate, with no overlap
    final = score("truth_final", torch.nn.Linear(1, 1), [probe]).scores
    truth = score("truth", torch.nn.Linear(1, 1), [probe]).scores
    assert torch.equal(result.scores + final, truth) and not (result.scores * final).any()
    # training attaches the parsed positions for it, and the trainer accepts it as a method
    assert "truth_early" in PARSED_SCORERS and "truth_early" in METHODS


def test_step_credit_shares_say_where_each_gate_puts_the_weight(tokenizer):
    """The mechanism's mediator: uniform weights (GRPO's) put on each step's decisive tokens exactly their
    share of the tokens; the final-step truth gate puts more than that on the last step and less on the
    earlier ones, the truth gate more on both; a response without parsed positions has none."""
    from oar.method.metrics import STEP_CREDIT, step_credit_shares

    text = "3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. 10 - 4 = 6. Therefore, the final answer is \\boxed{6}."
    probe, final, _ = _ground_truth_scored(tokenizer, text, "truth_final", "needs the last step's decisive positions")
    truth = score("truth", torch.nn.Linear(1, 1), [probe])
    r = probe.reasoning_len
    final_tokens, early_tokens = len(set(probe.final_step)), len(set(probe.decisive) - set(probe.final_step))
    assert final_tokens > 0 and early_tokens > 0

    uniform = step_credit_shares(torch.ones(1, r), [probe])[0]
    assert uniform.tolist() == pytest.approx([final_tokens / r, early_tokens / r] * 2)
    by_final = step_credit_shares(gate(final.scores, final.reasoning_mask, 0.4, 2.0), [probe])[0]
    assert by_final[0] > by_final[2] and by_final[1] < by_final[3]
    by_truth = step_credit_shares(gate(truth.scores, truth.reasoning_mask, 0.4, 2.0), [probe])[0]
    assert by_truth[0] > by_truth[2] and by_truth[1] > by_truth[3]
    unparsed = replace(probe, decisive=None, final_step=None)
    assert torch.isnan(step_credit_shares(torch.ones(1, r), [unparsed])).all()
    assert len(STEP_CREDIT) == uniform.numel()


def _chain_rollout_weights(tokenizer, tmp_path):
    """Two chain responses to one prompt, padded as the trainer receives them, their probes as the trainer
    builds them (OARConfig's defaults), and ``weights(method, ratio=1.0)``: the trainer's own token weights
    of them for a method (``oar.final_step_ratio`` = ratio) on a one-layer policy."""
    from types import SimpleNamespace

    from oar.method.probes import probes_from_padded
    from oar.training.grpo_trainer import MethodSetup, OARConfig, OARTrainer, with_decisive_tokens

    model = build_model(PretrainSettings(layers=1, hidden=32), tokenizer).eval()
    texts = ["3 + 1 ~ 5. Note: owl cat. 5 * 2 = 10. 10 - 4 = 6. Therefore, the final answer is \\boxed{6}.",
             "3 + 1 = 4. 4 * 2 = 8. Note: teal. 8 - 4 = 4. Therefore, the final answer is \\boxed{4}."]
    prompt = tokenizer("Start with 3. Add 1. What is the result?", add_special_tokens=False)["input_ids"]
    responses = [tokenizer(t + tokenizer.eos_token, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, responses))
    output = {"prompt_ids": torch.tensor([prompt] * 2), "prompt_mask": torch.ones(2, len(prompt), dtype=torch.long),
              "completion_ids": torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in responses]),
              "completion_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses]),
              "advantages": torch.tensor([1.0, -1.0])}

    def weights(method, ratio=1.0, **oar):
        args = OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", oar_method=method,
                         per_device_train_batch_size=2, num_generations=2, oar_substitute=".", seed=1,
                         oar_final_step_ratio=ratio, **oar)
        trainer = OARTrainer.__new__(OARTrainer)  # a trainer without TRL's set-up: what _token_weights reads
        trainer.args, trainer.processing_class, trainer.model = args, tokenizer, model
        trainer.state = SimpleNamespace(global_step=0)
        trainer.accelerator = SimpleNamespace(unwrap_model=lambda m: m, process_index=0)
        # what OARTrainer.__init__ builds once a run
        trainer._setup, trainer._reference_model = MethodSetup.of(method, args.oar_settings()), None
        return trainer._token_weights(output)[0]

    probes = [with_decisive_tokens(tokenizer, p) for p in probes_from_padded(
        tokenizer, output["prompt_ids"], output["prompt_mask"], output["completion_ids"], output["completion_mask"],
        substitute=".", own_conclusion=True)]
    return output, probes, weights


def test_the_rescue_holds_oar_gs_credit_on_the_last_step_to_the_rest_in_the_trainer(tokenizer, tmp_path):
    """Method oar_g_rescue: the trainer scores with OAR-G, attaches the parsed positions and gives the
    last step's decisive tokens the mean weight of the rest; every other token keeps OAR-G's weight up to
    the one factor that restores the mass."""
    torch.manual_seed(0)
    output, probes, weights = _chain_rollout_weights(tokenizer, tmp_path)
    plain, rescued = weights("oar_g"), weights("oar_g_rescue")
    for i, p in enumerate(probes):
        r, held = p.reasoning_len, sorted(set(p.final_step))
        assert held and not torch.equal(plain[i, held], rescued[i, held])
        rest = [t for t in range(r) if t not in held]
        factor = rescued[i, rest] / plain[i, rest]
        assert torch.allclose(factor, factor[0].expand_as(factor))  # the rest keeps OAR-G's shape
        assert torch.allclose(rescued[i, held], (plain[i, rest].mean() * factor[0]).expand(len(held)))
        assert rescued[i, :r].sum().item() == pytest.approx(plain[i, :r].sum().item(), rel=1e-5)
        assert torch.equal(rescued[i, r:], plain[i, r:])


def test_the_step_balance_holds_each_sentence_to_its_token_share_in_the_trainer(tokenizer, tmp_path):
    """Method oar_g_steps, and oar_g with oar_step_balance: the trainer splits each response's reasoning into its
    sentences ('\\.\\s'), scores with OAR-G and rescales each sentence's weights to sum to its number of tokens,
    the ranking within a sentence and the reasoning's mass kept; a delimiter that splits neither response (the
    maths default, a blank line) stops at the first batch naming the field."""
    from oar.method.steps import step_labels

    torch.manual_seed(0)
    output, probes, weights = _chain_rollout_weights(tokenizer, tmp_path)
    plain = weights("oar_g")
    balanced = weights("oar_g_steps", oar_step_delimiter=r"\.\s")
    assert torch.equal(weights("oar_g", oar_step_balance=True, oar_step_delimiter=r"\.\s"), balanced)
    for i, (p, labels) in enumerate(zip(probes, step_labels(tokenizer, probes, r"\.\s"))):
        r, labels = p.reasoning_len, torch.tensor(labels)
        assert len(labels.unique()) >= 4  # three equations and a note or two
        for k in labels.unique():
            step = (labels == k).nonzero().flatten()
            assert balanced[i, step].sum().item() == pytest.approx(len(step), rel=1e-5)
            factor = balanced[i, step] / plain[i, step]
            assert torch.allclose(factor, factor[0].expand_as(factor))  # the step keeps OAR-G's shape
        assert balanced[i, :r].sum().item() == pytest.approx(r, rel=1e-5)
        assert torch.equal(balanced[i, r:], plain[i, r:])
    with pytest.raises(ValueError, match=r"^OARConfig field 'oar_step_delimiter' '\\n\\n' splits none of the 2"):
        weights("oar_g_steps")


def test_the_placebo_holds_as_many_of_oar_gs_other_top_tokens_and_never_the_last_steps_in_the_trainer(tokenizer,
                                                                                                     tmp_path):
    """Method oar_g_placebo: the trainer scores with OAR-G and holds, per response, as many of its
    highest-weighted reasoning tokens outside the last step's decisive tokens as that step has, to the
    mean weight of the rest; the last step's decisive tokens keep OAR-G's weight up to the mass factor."""
    from oar.method.interventions import top_outside

    torch.manual_seed(0)
    output, probes, weights = _chain_rollout_weights(tokenizer, tmp_path)
    plain, placebo = weights("oar_g"), weights("oar_g_placebo")
    mask = torch.zeros_like(plain, dtype=torch.bool)
    for i, p in enumerate(probes):
        mask[i, : p.reasoning_len] = True
    chosen = top_outside(plain, mask, [p.final_step for p in probes])
    for i, p in enumerate(probes):
        r, final, held = p.reasoning_len, sorted(set(p.final_step)), chosen[i]
        assert len(held) == len(final) and not set(held) & set(final)
        assert all(plain[i, h] >= plain[i, t] for h in held for t in range(r) if t not in held and t not in final)
        rest = [t for t in range(r) if t not in held]
        factor = placebo[i, rest] / plain[i, rest]
        assert torch.allclose(factor, factor[0].expand_as(factor))  # the last step's tokens included
        assert torch.allclose(placebo[i, held], (plain[i, rest].mean() * factor[0]).expand(len(held)))
        assert placebo[i, :r].sum().item() == pytest.approx(plain[i, :r].sum().item(), rel=1e-5)


def test_the_dose_sets_the_last_steps_weight_to_r_times_the_earlier_steps_in_the_trainer(tokenizer, tmp_path):
    """Method truth_dose: the trainer scores with the truth gate, attaches the parsed positions and sets
    the last step's decisive tokens to oar.final_step_ratio times the earlier steps' decisive tokens'
    weight, the mass kept; at ratio 1 its weights are the truth gate's, bit for bit."""
    output, probes, weights = _chain_rollout_weights(tokenizer, tmp_path)
    truth = weights("truth")
    assert torch.equal(weights("truth_dose", 1.0), truth)
    dosed = weights("truth_dose", 4.0)
    for i, p in enumerate(probes):
        r, final = p.reasoning_len, sorted(set(p.final_step))
        earlier = sorted(set(p.decisive) - set(p.final_step))
        assert final and earlier
        assert (dosed[i, final] / dosed[i, earlier].mean()).tolist() == pytest.approx([4.0] * len(final), rel=1e-5)
        assert dosed[i, :r].sum().item() == pytest.approx(truth[i, :r].sum().item(), rel=1e-5)
        assert torch.equal(dosed[i, r:], truth[i, r:])
    with pytest.raises(ValueError, match="'oar.final_step_ratio' must be a finite number above 0"):
        weights("truth_dose", 0.0)
