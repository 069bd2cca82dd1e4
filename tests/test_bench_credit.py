"""The token-credit benchmark's ground-truth track end to end on a small chain policy: a response set
sampled, written and verified by its hash; entries scored call by call and ranked against the parsed
decisive tokens; the leaderboard files; and the bad inputs that stop it, each named."""

from __future__ import annotations

import argparse
import gzip
import json
import math

import numpy as np
import pytest
import torch

from oar.bench import __main__ as bench_cli
from oar.bench import credit, leaderboard, response_set
from oar.bench.response_set import ResponseSet, ResponseSetError, ResponseSetSpec

SPEC = ResponseSetSpec("tiny_chain", "chain_test", "config/config.yaml", problems=6, group=4, max_new_tokens=64,
                       batch_prompts=2)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A small chain policy: the chain_f1 recipe's task (a remark a step, a sloppy step a quarter of the time)
    in one 64-wide layer, 120 updates."""
    from oar.training.pretrain import write_testbed_model

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("bench") / "policy"
    write_testbed_model({"filler": 1, "error_rate": 0.25, "layers": 1, "hidden": 64, "updates": 120,
                         "batch_size": 16, "learning_rate": 0.01, "check_prompts": 4, "check_group": 4,
                         "min_mixed_groups": 0.0}, out, threads=1)
    return out


@pytest.fixture(scope="module")
def sampled(policy, tmp_path_factory):
    rows = response_set.sample(SPEC, policy, log=lambda *_: None)
    path = tmp_path_factory.mktemp("set") / "tiny.jsonl.gz"
    digest = response_set.write(rows, path)
    return rows, path, digest


@pytest.fixture(scope="module")
def loaded(policy, sampled):
    from oar.models.loading import load_model

    rows, path, digest = sampled
    model, tokenizer = load_model(policy, dtype="float32", device="cpu", threads=1)
    return ResponseSet("tiny_chain", SPEC, response_set.read_verified(path, digest), digest, "0" * 64), model, tokenizer


def test_a_response_set_is_sampled_again_to_the_same_bytes_and_parsed(policy, sampled):
    rows, path, digest = sampled
    again = response_set.sample(SPEC, policy, log=lambda *_: None)
    assert response_set.content_sha256(response_set.encode_lines(again)) == digest
    assert gzip.decompress(path.read_bytes()) == response_set.encode_lines(rows)
    assert len(rows) == 24 and [r["problem"] for r in rows[:5]] == [0, 0, 0, 0, 1]
    parsed = [r for r in rows if r["decisive"]]
    assert parsed, "no response of the small policy parses: the fixture's policy is too weak"
    for r in parsed:
        assert r["final_step"] and set(r["final_step"]) <= set(r["decisive"])
        step_positions = sorted(p for s in r["steps"] for p in s["positions"])
        assert step_positions == sorted(r["decisive"])
        assert all(s["relation"] in "=~" for s in r["steps"])
    summary = response_set.summary(rows)
    assert summary["responses"] == 24 and summary["problems"] == 6


def test_a_response_file_that_is_not_the_hashed_one_stops_naming_it(sampled, tmp_path):
    rows, path, digest = sampled
    changed = [dict(rows[0], correct=not rows[0]["correct"]), *rows[1:]]
    other = tmp_path / "other.jsonl.gz"
    response_set.write(changed, other)
    with pytest.raises(ResponseSetError, match=r"other.jsonl.gz: sha256 .* the index says"):
        response_set.read_verified(other, digest)
    (tmp_path / "broken.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(ResponseSetError, match="broken.jsonl.gz: not a gzip file"):
        response_set.read_verified(tmp_path / "broken.jsonl.gz", digest)
    with pytest.raises(ResponseSetError, match="missing"):
        response_set.read_verified(tmp_path / "absent.jsonl.gz", digest)


def test_the_truth_scorer_ranks_perfectly_and_the_controls_near_chance(loaded):
    responses, model, tokenizer = loaded
    truth = credit.run_entry("truth", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    r = truth["result"]
    assert r["ranked"] > 0 and r["responses"] == 24
    assert r["average_precision"]["mean"] == 1.0 and r["recall"]["mean"] == 1.0
    assert truth["policy_sha256"] == "0" * 64 and truth["response_set_sha256"] == responses.sha256
    position = credit.run_entry("position", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)["result"]
    assert 0.0 < position["average_precision"]["mean"] < 1.0
    assert position["chance"] == r["chance"]  # chance depends on the responses, not on the scorer
    assert 0.0 < r["chance"]["average_precision"] < 1.0


def test_every_entry_keeps_the_contract_on_the_response_set(loaded):
    """The four entries run through the registry on real groups: one finite, non-negative score per
    reasoning token (KTAE reads the groups and rewards, PRIME a second model, the attention eager weights)."""
    responses, model, tokenizer = loaded
    probes = responses.probes(tokenizer)
    for entry in ("top_entropy", "ktae", "prime", "answer_attention"):
        scores, _ = credit.score_rows(entry, model, probes, responses.rows, reference_model=model, log=lambda *_: None)
        assert [len(s) for s in scores] == [p.reasoning_len for p in probes]
        assert all(np.all(np.isfinite(s)) and np.all(s >= 0) for s in scores), entry
    # PRIME of the policy against itself is 0 everywhere; TRL's mask keeps at most a fifth plus ties
    same, _ = credit.score_rows("prime", model, probes, responses.rows, reference_model=model, log=lambda *_: None)
    assert all(np.all(s == 0) for s in same)
    masks, _ = credit.score_rows("top_entropy", model, probes, responses.rows, log=lambda *_: None)
    assert set(np.concatenate(masks).tolist()) <= {0.0, 1.0}


@pytest.mark.parametrize("scorer, message", [
    ("bench_scorers:global_generator", "gave other scores for the same seed the second time"),
    ("bench_scorers:not_finite", "not finite"),
    ("user_scorers:wrong_length", "the reasoning has"),
    ("no_such_scorer", "unknown scorer 'no_such_scorer'"),
])
def test_a_scorer_that_breaks_the_rules_stops_naming_it(loaded, scorer, message):
    responses, model, tokenizer = loaded
    with pytest.raises(ValueError, match=message) as error:
        credit.run_entry(scorer, "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    assert scorer in str(error.value) and "\n" not in str(error.value)


def test_the_leaderboard_ranks_entries_by_average_precision(loaded, tmp_path):
    responses, model, tokenizer = loaded
    for entry in ("truth", "position", "random"):
        record = credit.run_entry(entry, "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
        leaderboard.write_entry(tmp_path, "credit", "tiny_chain", record["version"], entry, record)
    assert record["version"] == response_set.BENCHMARK_VERSION
    table, text = leaderboard.write_credit_table(tmp_path, "tiny_chain", response_set.BENCHMARK_VERSION)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[2].startswith("| 1 | `truth`† | 1.000")  # marked: it reads the answer key
    assert "† reads the answer key" in text
    # the leaderboard ends with chance's row, then the step-level table with chance's localisation last
    assert "chance (a random ranking, expected)" in lines[5]  # header, rule, three entries, chance
    assert lines[-1].startswith("| chance (a step drawn uniformly) |")
    assert (table.parent / "leaderboard.csv").is_file()
    page = tmp_path / "page.md"
    page.write_text("before\n<!-- leaderboard:credit:tiny_chain -->\nold\n"
                    "<!-- /leaderboard:credit:tiny_chain -->\nafter\n")
    leaderboard.write_docs(page, "credit:tiny_chain", text)
    assert "old" not in page.read_text() and "`truth`" in page.read_text() and page.read_text().endswith("after\n")
    with pytest.raises(ValueError, match="no markers"):
        leaderboard.write_docs(page, "credit:other", text)
    # `python -m oar.bench leaderboard` rebuilds the same table into the page (no learning entries: no table)
    page.write_text("<!-- leaderboard:credit:tiny_chain -->\n<!-- /leaderboard:credit:tiny_chain -->\n")
    bench_cli.board(argparse.Namespace(out=tmp_path, policy="tiny_chain", docs=page))
    assert text.rstrip() in page.read_text() and not (tmp_path / "learning").exists()


def test_the_erring_step_is_read_against_the_later_right_steps():
    """A wrong response whose first step is sloppy: its `~` at position 2 against the later right steps'
    `=` at 6 and 10; scores that rank the `~` above one and tied with the other give (1 + 0.5) / 2."""
    row = {"problem": 0, "sample": 0, "reasoning_len": 12, "correct": False,
           "decisive": [2, 3, 6, 7, 10, 11],
           "steps": [{"positions": [2, 3], "relation": "~", "relation_at": 2, "right": False},
                     {"positions": [6, 7], "relation": "=", "relation_at": 6, "right": True},
                     {"positions": [10, 11], "relation": "=", "relation_at": 10, "right": True}]}
    scores = np.zeros(12)
    scores[[2, 10]] = 5.0
    scores[6] = 1.0
    m = credit.response_metrics(scores, row)
    assert m["erring"] == pytest.approx(0.75)
    # k = ceil(1.2) = 2: the top two are 2 and 10, both decisive
    assert m["recall"] == 1.0 and m["step_recall"] == {1: 0.5, 2: 0.0, 3: 0.5}
    # tied with 6 at the top, 2 and 10 share the two places with it: 2/3 of a place each in expectation
    scores[6] = 5.0
    tied = credit.response_metrics(scores, row)
    assert tied["recall"] == pytest.approx(1.0) and tied["step_recall"] == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 1 / 3})
    assert m["chance_recall"] == pytest.approx(2 * 6 / 12 / 2) and m["chance_step"] == pytest.approx(2 / 12)
    assert math.isnan(credit.response_metrics(scores, {**row, "correct": True})["erring"])
    with pytest.raises(credit.BenchError, match="11 scores for 12 reasoning tokens"):
        credit.response_metrics(scores[:11], row)
    assert credit.response_metrics(scores, {**row, "decisive": []}) is None


def test_calls_hold_whole_groups_of_consecutive_problems():
    assert credit.calls([0, 0, 1, 1, 2, 2, 3], groups_per_call=2) == [[0, 1, 2, 3], [4, 5, 6]]
    assert json.dumps(credit.calls([5, 5], 16)) == "[[0, 1]]"


# ------------------------------------------------------------------ integrity: what an entry is given and leaves


def test_a_plain_function_cannot_read_the_answer_key_and_a_declared_one_is_marked(loaded, registered):
    """The response set attaches the parsed positions to every probe; only a scorer that declares
    ``parsed_steps`` finds them there, and its record says it reads the ground truth."""
    responses, model, tokenizer = loaded
    assert all(p.decisive is not None for p in responses.probes(tokenizer))  # attached, as the issue found
    with pytest.raises(credit.BenchError) as stopped:
        credit.run_entry("bench_scorers:reads_the_answer_key", "tiny_chain", model, tokenizer, responses,
                         log=lambda *_: None)
    assert str(stopped.value) == ("scorer 'bench_scorers:reads_the_answer_key' raised TypeError: 'NoneType' object "
                                  "is not iterable (call 0, problems 0-5)")
    from bench_scorers import reads_the_answer_key
    from oar.method.scorer_registry import register_scorer

    registered("answer_key")
    register_scorer("answer_key", reads_the_answer_key, needs=("parsed_steps",))
    record = credit.run_entry("answer_key", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    assert record["result"]["recall"]["mean"] == 1.0
    assert record["reads"] == ["parsed_steps"] and record["ground_truth"] is True
    truth = credit.run_entry("truth", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    entropy = credit.run_entry("entropy", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    ktae = credit.run_entry("ktae", "tiny_chain", model, tokenizer, responses, log=lambda *_: None)
    assert (truth["reads"], truth["ground_truth"]) == (["parsed_steps"], True)
    assert (entropy["reads"], entropy["ground_truth"]) == (["model"], False)
    assert (ktae["reads"], ktae["ground_truth"]) == (["groups"], False)


def test_entries_that_ask_for_attentions_or_hidden_states_pass_the_digest(loaded):
    """transformers installs its inert output-capturing hooks on a model's first forward that asks for
    attentions or hidden states; on a model that never did, such an entry is not taken for one that left
    hooks behind (the digest installs them first)."""
    from transformers import AutoModelForCausalLM

    responses, model, tokenizer = loaded
    for entry in ("answer_attention", "shear"):
        fresh = AutoModelForCausalLM.from_config(model.config)
        fresh.load_state_dict(model.state_dict())
        record = credit.run_entry(entry, "tiny_chain", fresh, tokenizer, responses, log=lambda *_: None)
        assert record["result"]["ranked"] > 0, entry


@pytest.mark.parametrize("scorer, change", [
    ("bench_scorers:hooks_the_model", "changed the hooks of module 'lm_head' (0 to 1) of the policy"),
    ("bench_scorers:halves_rotary_frequencies", "changed the values of buffer 'model.rotary_emb.inv_freq' of the "
                                                "policy"),
])
def test_an_entry_that_leaves_the_model_changed_stops_naming_it(loaded, scorer, change):
    """Neither change touches a parameter, so no call's fingerprint sees it; the digest around the entry does."""
    from transformers import AutoModelForCausalLM

    responses, model, tokenizer = loaded
    copy = AutoModelForCausalLM.from_config(model.config)
    copy.load_state_dict(model.state_dict())
    with pytest.raises(credit.BenchError) as stopped:
        credit.run_entry(scorer, "tiny_chain", copy, tokenizer, responses, reference_model=copy, log=lambda *_: None)
    assert str(stopped.value).startswith(f"scorer {scorer!r} {change} during its entry") and "\n" not in str(
        stopped.value)


def test_the_determinism_repeat_runs_before_the_other_calls(loaded, registered):
    responses, model, tokenizer = loaded
    seeds = []
    registered("counts_calls")
    from oar.method.scorer_registry import register_scorer

    register_scorer("counts_calls", lambda b: seeds.append(b.seed) or [torch.ones(p.reasoning_len) for p in b.probes],
                    needs=())
    probes = responses.probes(tokenizer)
    credit.score_rows("counts_calls", model, probes, responses.rows, groups_per_call=2, log=lambda *_: None)
    assert seeds == [0, 0, 1, 2]  # call 0 twice, then the rest
    lines: list[str] = []
    with pytest.raises(credit.BenchError, match="gave other scores for the same seed the second time"):
        credit.score_rows("bench_scorers:global_generator", model, probes, responses.rows, groups_per_call=2,
                          log=lines.append)
    assert lines == []  # stopped before the first call's progress line, the other calls never run


def test_a_bad_row_is_named_by_problem_and_sample(loaded):
    responses, model, tokenizer = loaded
    probes, rows = responses.probes(tokenizer), responses.rows
    members = [i for i in credit.calls([r["problem"] for r in rows], 2)[1] if probes[i].reasoning_len > 0]
    row = rows[members[-1]]
    with pytest.raises(credit.BenchError) as stopped:
        credit.score_rows("bench_scorers:nan_on_last_row_of_call_1", model, probes, rows, groups_per_call=2,
                          log=lambda *_: None)
    assert str(stopped.value) == (f"scorer 'bench_scorers:nan_on_last_row_of_call_1', problem {row['problem']}, "
                                  f"sample {row['sample']}: score nan at reasoning token 0 is not finite")


def test_a_scorer_that_raises_stops_the_command_in_one_line(monkeypatch, capsys):
    """On the shipped chain_f1 (two problems): one line naming the scorer, the exception and the call;
    --traceback raises it whole."""
    from oar.models.frozen import policy_dir

    if not (policy_dir("chain_f1") / "model.safetensors").is_file():
        pytest.skip("the shipped chain_f1 weights are not in this checkout")
    run = ["credit", "--problems", "2", "--cpu-kernels", "none", "--scorer", "bench_scorers:raises"]
    with pytest.raises(SystemExit) as stopped:
        bench_cli.main(run)
    assert str(stopped.value) == ("python -m oar.bench credit: scorer 'bench_scorers:raises' raised RuntimeError: "
                                  "no such feature ... (call 0, problems 0-1)")
    with pytest.raises(credit.BenchError) as raised:
        bench_cli.main([*run, "--traceback"])
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_an_entry_after_one_that_changed_the_model_is_unaffected(capsys):
    """The issue's case: entropy after a scorer that leaves the policy changed scored its own numbers, as
    alone; the command exits naming the scorer that changed it."""
    from oar.models.frozen import policy_dir

    if not (policy_dir("chain_f1") / "model.safetensors").is_file():
        pytest.skip("the shipped chain_f1 weights are not in this checkout")
    run = ["credit", "--problems", "2", "--cpu-kernels", "none"]
    bench_cli.main([*run, "--scorer", "entropy"])
    alone = [line for line in capsys.readouterr().out.splitlines() if line.startswith("entropy: recall")]
    with pytest.raises(SystemExit) as stopped:
        bench_cli.main([*run, "--scorer", "bench_scorers:hooks_the_model", "--scorer", "entropy"])
    after = [line for line in capsys.readouterr().out.splitlines() if line.startswith("entropy: recall")]
    assert len(alone) == 1 and [a.rsplit(" (", 1)[0] for a in after] == [alone[0].rsplit(" (", 1)[0]]
    assert str(stopped.value).startswith("python -m oar.bench credit: scorer 'bench_scorers:hooks_the_model' changed "
                                         "the hooks of module 'lm_head' (0 to 1) of the policy during its entry")
