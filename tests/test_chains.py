"""The testbed's chain task (oar.data.chains): problems, solutions with filler and errors, the parsed decisive
tokens, the prepared datasets, and the ground truth the recall analysis scores against."""

from __future__ import annotations

import random

import pytest

from oar.data import chains
from oar.analysis.chain_truth import ground_truth_tokens, oracle_agreement
from oar.data.catalogue import CHAIN_STEPS, chain_split
from oar.data.datasets import load_dataset_records
from oar.grading.grader import grade


def test_problems_are_deterministic_and_stay_in_range():
    a = [chains.problem("train", i) for i in range(300)]
    assert a == [chains.problem("train", i) for i in range(300)]
    for p in a:
        assert len(p.ops) == 3 and 2 <= p.start <= 9
        assert all(0 <= v <= chains.MAX_VALUE for v in p.values)
    assert "Start with" in a[0].text and a[0].text.endswith("What is the result?")


def test_a_correct_solution_ends_in_the_probe_template_and_grades_right():
    p = chains.problem("test", 3)
    text, ok = chains.solution(p, random.Random(0))
    assert ok and text.endswith(f"Therefore, the final answer is \\boxed{{{p.answer}}}.")
    assert grade(text, str(p.answer)).correct
    # one equation per step, each starting from the previous result
    assert chains.results(text) == p.values
    spans = chains.decisive_spans(text)
    assert [text[s:e] for s, e in spans[::2]] == ["="] * 3 and [int(text[s:e]) for s, e in spans[1::2]] == p.values


def test_filler_lengthens_the_response_but_not_its_decisive_tokens():
    p = chains.problem("test", 5)
    lengths, decisive = [], []
    for filler in range(chains.MAX_FILLER + 1):
        text, ok = chains.solution(p, random.Random(1), filler=filler)
        assert ok
        lengths.append(len(text))
        decisive.append([text[s:e] for s, e in chains.decisive_spans(text)])
        assert sum(text.count(r) for r in chains.REMARKS) == filler * len(p.ops)
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)
    assert all(d == decisive[0] for d in decisive)


def test_a_wrong_result_makes_a_consistent_chain_to_a_wrong_answer():
    rng = random.Random(2)
    wrong = 0
    for i in range(400):
        p = chains.problem("x", i)
        text, ok = chains.solution(p, rng, error_rate=0.3)
        values = chains.results(text)
        assert len(values) == 3
        # an equation written with = holds, one written with ~ is off, and the chain goes on from what is written
        for k, (a, op, b, rel, c) in enumerate(chains._EQUATION.findall(text)):
            assert (chains.apply(int(a), op, int(b)) == int(c)) == (rel == "=")
            if k:
                assert int(a) == values[k - 1]
        assert ok == (values[-1] == p.answer)
        wrong += not ok
    assert 0.3 * 400 < wrong < 0.8 * 400  # 1 - 0.7^3 = 0.66 (an off-by-k can be undone by a later step only rarely)


@pytest.mark.parametrize("kwargs,key", [({"filler": 4}, "filler"), ({"filler": -1}, "filler"),
                                        ({"error_rate": 1.0}, "error_rate")])
def test_knobs_out_of_range_name_the_knob(kwargs, key):
    with pytest.raises(ValueError, match=key):
        chains.solution(chains.problem("x", 0), random.Random(0), **kwargs)


def test_prepared_splits_are_disjoint_and_answer_as_the_problem_says():
    train = load_dataset_records("chain_train").records
    test = load_dataset_records("chain_test").records
    assert len(test) == 200 and len(train) == 2000
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    for p, r in zip(chain_split("test"), test):
        assert r["problem"] == p.text and r["answer"] == str(p.answer) and len(p.ops) == CHAIN_STEPS


def test_ground_truth_marks_exactly_the_tokens_of_the_step_results():
    from oar.training.pretrain import build_tokenizer

    tokenizer = build_tokenizer(416)
    text, _ = chains.solution(chains.problem("test", 7), random.Random(0), filler=1, error_rate=0.5)
    assert "~" in text
    reasoning = text[: text.index("Therefore")]
    ids = tokenizer(reasoning, add_special_tokens=False)["input_ids"]
    tokens = [tokenizer.decode([t]) for t in ids]
    [truth] = ground_truth_tokens([{"index": 0, "reasoning_len": len(tokens), "reasoning_tokens": tokens}])
    marked = "".join(tokens[j] for j in truth["causal"])
    decisive = "".join(reasoning[s:e] for s, e in chains.decisive_spans(reasoning))
    assert marked.replace(" ", "") == decisive  # relations and result digits, nothing else


def test_oracle_agreement_counts_overlap_per_response():
    truth = [{"index": 0, "causal": [1, 2]}, {"index": 1, "causal": [5]}]
    oracle = [{"index": 0, "causal": [2, 3, 4, 6]}, {"index": 1, "causal": [5]}]
    out = oracle_agreement(oracle, truth)
    assert out["precision"]["mean"] == pytest.approx((1 / 4 + 1) / 2)
    assert out["recall"]["mean"] == pytest.approx((1 / 2 + 1) / 2)
    assert out["jaccard"]["mean"] == pytest.approx((1 / 5 + 1) / 2)
    with pytest.raises(ValueError, match="no ground truth"):
        oracle_agreement([{"index": 9, "causal": []}], truth)


def test_step_errors_judge_each_step_by_its_own_operands():
    # step 2 is sloppy, step 3 exact-looking but wrong; step 4 is right given step 3's written result
    text = "3 + 1 = 4. Note: owl cat. 4 * 2 ~ 9. 9 - 4 = 6. 6 + 1 = 7."
    assert chains.step_errors(text) == [None, "sloppy", "wrong", None]
    rng = random.Random(0)
    right, _ = chains.solution(chains.problem("test", 0, 5), rng)
    assert chains.step_errors(right) == [None] * 5
