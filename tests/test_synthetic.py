"""oar.data.synthetic: the generated word problems and their 'generated' data source."""

import re

import pytest

from oar.data import synthetic
from oar.data.data_error import DataError
from oar.data.datasets import build_dataset, load_dataset_records
from oar.data.sources import packaged_path

# The answer of each template from the numbers in its text, in order of appearance.
RECOMPUTE = {
    "bare_add": lambda a, b: a + b,
    "bare_sub": lambda a, b: a - b,
    "bare_mul": lambda a, b: a * b,
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda total, b: total // b,
    "add_sub": lambda a, b, c: a + b - c,
    "mul_add": lambda a, b, c: a * b + c,
    "mul_sub": lambda a, b, c: a * b - c,
    "add_add": lambda a, b, c: a + b + c,
}


def test_every_answer_follows_from_the_text():
    problems = list(synthetic.generate(seed=7, count=400))
    assert {p.template for p in problems} == set(RECOMPUTE) - {"bare_add", "bare_sub", "bare_mul"}
    assert {p.level for p in problems} == {1, 2}
    for p in problems:
        numbers = [int(x) for x in re.findall(r"\d+", p.problem)]
        assert RECOMPUTE[p.template](*numbers) == p.answer, p
        assert p.answer > 0
    divisions = [p for p in problems if p.template == "div"]
    assert all(int(re.findall(r"\d+", p.problem)[0]) % int(re.findall(r"\d+", p.problem)[1]) == 0 for p in divisions)


def test_single_digit_facts_and_their_disjoint_splits():
    facts = synthetic.facts()
    assert len(facts) == len({p.problem for p in facts}) == 81 + 81 + 64
    assert {p.template for p in facts} == {"bare_add", "bare_sub", "bare_mul"}
    for p in facts:
        numbers = list(map(int, re.findall(r"\d+", p.problem)))
        assert p.problem.startswith("What is ") and RECOMPUTE[p.template](*numbers) == p.answer
        assert 1 <= p.answer <= 81 and all(n <= 18 for n in numbers)
    train, test = synthetic.fact_split("train"), synthetic.fact_split("test")
    assert len(test) == synthetic.TEST_FACTS and len(train) == len(facts) - synthetic.TEST_FACTS
    assert not {p.problem for p in train} & {p.problem for p in test}
    assert synthetic.fact_split("test") == test  # the same partition every time
    assert {p.template for p in test} == {"bare_add", "bare_sub", "bare_mul"}
    assert {p.problem for p in synthetic.generate(seed=7, count=50, levels=(0,))} <= {p.problem for p in facts}
    with pytest.raises(ValueError, match="part"):
        synthetic.fact_split("dev")


def test_generation_is_deterministic_per_index_and_seed():
    assert synthetic.problem(3, 10) == synthetic.problem(3, 10) == list(synthetic.generate(3, 11))[10]
    assert [p.problem for p in synthetic.generate(3, 50)] != [p.problem for p in synthetic.generate(4, 50)]
    assert {p.level for p in synthetic.generate(3, 50, levels=(1,))} == {1}
    with pytest.raises(ValueError, match="levels"):
        synthetic.problem(0, 0, levels=(3,))


def test_generated_source_and_overlap_with_the_test_split():
    test = load_dataset_records("arith_test", source="generated").records
    assert len(test) == 100 and test[0]["id"] == "arith_test/0" and {r["level"] for r in test} == {0}
    train = build_dataset("arith_train", source="generated", against={"arith_test": test}, on_overlap="error")
    assert len(train.records) == 126  # disjoint by construction: the overlap check finds nothing
    test_texts = {r["problem"] for r in test}
    assert not any(r["problem"] in test_texts for r in train.records)
    with pytest.raises(DataError, match="generated"):
        packaged_path("arith_train")
    with pytest.raises(DataError, match="not generated"):
        load_dataset_records("gsm8k_test", source="generated")
