"""The trivial baselines and the 2026 entries of the token-credit benchmark, each on an example worked by hand:
surprisal, the no-model structure heuristics, the inverted-importance control (arXiv 2602.09331), the
EGCA-style first-divergence oracle and TEMPO's prefix-tree credit."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from oar.method.first_divergence import divergence_char, first_divergence_scores, problem_from_statement
from oar.method.gate import gate
from oar.method.inverted_importance import inverted, inverted_rows
from oar.method.prefix_tree import prefix_values, tempo_scores
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import GROUND_TRUTH_NEEDS, NEEDS, scorer_spec
from oar.method.structure_heuristics import marks, relation_spans, structure_scores, token_scores
from oar.method.surprisal import surprisal_scores

pytestmark = pytest.mark.quick

FROZEN = "oar/models/frozen/chain_f1"


@pytest.fixture(scope="module")
def chain_tokenizer():
    from pathlib import Path

    return AutoTokenizer.from_pretrained(Path(__file__).resolve().parents[1] / FROZEN)


def _probe(prompt_ids, response_ids, reasoning_len, pad_id=0) -> Probe:
    return Probe(prompt_ids=tuple(prompt_ids), response_ids=tuple(response_ids), reasoning_len=reasoning_len,
                 conclude_ids=(), answer_ids=(), pad_id=pad_id)


def _text_probe(tokenizer, prompt: str, response: str) -> Probe:
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    return _probe(tokenizer(prompt, add_special_tokens=False)["input_ids"], ids, len(ids), tokenizer.pad_token_id)


# ------------------------------------------------------------------------------- surprisal


class Bigram(torch.nn.Module):
    """A model whose next-token distribution depends on the current token only: row ``u`` of ``P``."""

    def __init__(self, probabilities):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(probabilities).log())
        self.config = SimpleNamespace(_attn_implementation="sdpa")

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        return SimpleNamespace(logits=self.table[input_ids][:, -logits_to_keep:])


def test_surprisal_is_minus_log_p_of_each_sampled_token_worked_by_hand():
    model = Bigram([[0.25, 0.5, 0.25], [0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    # probe 1: prompt [2], reasoning 0 1 1 -> -log P[2][0], -log P[0][1], -log P[1][1]
    # probe 2 (shorter, so left-padded in the same forward): prompt [0, 2], reasoning 2 2 -> -log 0.8 twice
    probes = [_probe([2], [0, 1, 1, 0], 3), _probe([0, 2], [2, 2], 2)]
    rows = surprisal_scores(model, probes, ScorerConfig())
    assert rows[0].tolist() == pytest.approx([-math.log(0.1), -math.log(0.5), -math.log(0.25)], rel=1e-6)
    assert rows[1].tolist() == pytest.approx([-math.log(0.8)] * 2, rel=1e-6)


def test_surprisal_is_the_plain_forwards_reading_on_a_real_model(model_and_tokenizer):
    from random_probes import random_probe

    model, tokenizer = model_and_tokenizer
    generator = torch.Generator().manual_seed(3)
    probes = [random_probe(tokenizer, generator, 4, 7, 2), random_probe(tokenizer, generator, 6, 3, 0)]
    rows = surprisal_scores(model, probes, ScorerConfig())
    for p, row in zip(probes, rows):
        ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len])])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, len(p.prompt_ids) - 1 : -1].float(), -1)
        expected = -logp.gather(-1, ids[0, len(p.prompt_ids):, None]).squeeze(-1)
        assert torch.allclose(row, expected, atol=1e-5)


# ------------------------------------------------------------------------------- structure heuristics

# characters: 0 '7', 6 '~', 8 '1', 17 '=', 19 '3', 28 '=', 30-32 '-12'
EQUATIONS = "7 - 6 ~ 1. 1 * 3 = 3. 3 * 3 = -12."


def test_the_relations_and_the_integers_after_them_are_found_by_hand():
    assert relation_spans(EQUATIONS) == [((6, 7), (8, 9), "~"), ((17, 18), (19, 20), "="), ((28, 29), (30, 33), "=")]
    assert relation_spans("x = y") == [((2, 3), None, "=")]  # a sign without an integer after it marks itself only
    assert marks(EQUATIONS, "last_step_digits") == [((30, 33), 1.0)]
    assert marks(EQUATIONS, "last_step") == [((28, 29), 1.0), ((30, 33), 1.0)]
    assert marks(EQUATIONS, "step_results") == [((8, 9), 1.0), ((19, 20), 1.0), ((30, 33), 1.0)]
    assert marks(EQUATIONS, "relations_and_results") == [((6, 7), 1.0), ((8, 9), 1.0), ((17, 18), 1.0),
                                                         ((19, 20), 1.0), ((28, 29), 1.0), ((30, 33), 1.0)]
    assert marks(EQUATIONS, "tilde_first")[0] == ((6, 7), 2.0)
    assert marks("no relation here", "last_step") == []
    with pytest.raises(ValueError, match="unknown structure heuristic"):
        marks(EQUATIONS, "first_step")


def test_a_token_scores_where_it_overlaps_a_marked_span():
    # tokens '3' ' =' ' ' '-1' '2' '.' over "3 = -12." (characters 0, 1-2, 3, 4-5, 6, 7)
    starts, ends = [0, 1, 3, 4, 6, 7], [1, 3, 4, 6, 7, 8]
    assert token_scores(starts, ends, marks("3 = -12.", "last_step")).tolist() == [0, 1, 0, 1, 1, 0]
    assert token_scores(starts, ends, [((2, 3), 2.0), ((1, 5), 1.0)]).tolist() == [0, 2, 1, 1, 0, 0]


def test_the_heuristics_on_the_testbeds_tokens(chain_tokenizer):
    response = "7 - 6 ~ 1. So far so good. 1 * 3 = 3. Moving on. 3 * 3 = 9. That looks right."
    probe = _text_probe(chain_tokenizer, "Start with 7.", response)
    pieces = [chain_tokenizer.decode([i]) for i in probe.response_ids]

    def marked(rule):
        row = structure_scores([probe], chain_tokenizer, rule, rule)[0]
        return [(pieces[j], row[j].item()) for j in range(len(pieces)) if row[j] > 0]

    assert marked("last_step_digits") == [("9", 1.0)]
    assert marked("last_step") == [(" =", 1.0), ("9", 1.0)]
    assert marked("step_results") == [("1", 1.0), ("3", 1.0), ("9", 1.0)]
    assert marked("tilde_first") == [(" ~", 2.0), ("1", 1.0), (" =", 1.0), ("3", 1.0), (" =", 1.0), ("9", 1.0)]
    with pytest.raises(ValueError, match="'step_results' reads the reasoning tokens' text"):
        structure_scores([probe], None, "step_results", "step_results")


# ------------------------------------------------------------------------------- inverted importance


def test_inverted_scores_are_worked_by_hand():
    # (1 + max)(1 + min) / (1 + s) - 1 with max 7, min 0: 8 / 1 - 1, 8 / 2 - 1, 8 / 8 - 1
    assert inverted(torch.tensor([0.0, 1.0, 7.0])).tolist() == [7.0, 3.0, 0.0]
    assert inverted(torch.tensor([1.0, 3.0])).tolist() == [3.0, 1.0]  # (4)(2)/2 - 1, (4)(2)/4 - 1
    assert inverted(torch.tensor([2.0, 2.0])).tolist() == [2.0, 2.0]  # all alike: left as it was
    assert inverted(torch.zeros(0)).numel() == 0
    assert [r.tolist() for r in inverted_rows([torch.tensor([0.0, 3.0]), torch.tensor([1.0])])] == [[3.0, 0.0], [1.0]]


def test_the_gate_sees_the_inverted_scores_normalised_importance_mirrored():
    # log(1 + s) of [0, 1, 7] is [0, 1, 3] log 2: normalised [0, 1/3, 1]; inverted [7, 3, 0]: [1, 2/3, 0] = 1 - n
    scores = torch.tensor([[0.0, 1.0, 7.0]])
    mirrored = torch.tensor([[7.0, 3.0, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    assert torch.allclose(gate(inverted(scores[0])[None], mask, 0.4, 2.0), gate(mirrored, mask, 0.4, 2.0))
    # and not a plain reversal of the scores ([7, 1, 0], normalised [1, 1/3, 0])
    assert not torch.allclose(gate(mirrored, mask, 0.4, 2.0), gate(torch.tensor([[7.0, 1.0, 0.0]]), mask, 0.4, 2.0))
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        s = torch.rand(9, generator=generator, dtype=torch.float64) * 5
        n = torch.log1p(s)
        n = (n - n.min()) / (n.max() - n.min())
        m = torch.log1p(inverted(s))
        assert torch.allclose((m - m.min()) / (m.max() - m.min()), 1 - n, atol=1e-12)


def test_oar_g_inverted_is_oar_gs_scores_inverted(model_and_tokenizer):
    from random_probes import random_probe

    from oar.method.importance import score

    model, tokenizer = model_and_tokenizer
    generator = torch.Generator().manual_seed(5)
    probes = [random_probe(tokenizer, generator, 4, 6, 2), random_probe(tokenizer, generator, 3, 4, 2)]
    plain = score("oar_g", model, probes, seed=11).scores
    flipped = score("oar_g_inverted", model, probes, seed=11).scores
    for i, p in enumerate(probes):
        assert torch.allclose(flipped[i, : p.reasoning_len], inverted(plain[i, : p.reasoning_len]), atol=1e-6)


# ------------------------------------------------------------------------------- first divergence

STATEMENT = "Start with 7. Subtract 6, then multiply by 3, then multiply by 3. What is the result?"


def test_the_reference_chain_is_read_from_the_problem_statement():
    from oar.data.chains import problem

    p = problem_from_statement(f"<|im_start|>user\n{STATEMENT}\n\nPlease reason step by step.")
    assert (p.start, p.ops, p.values) == (7, (("-", 6), ("*", 3), ("*", 3)), [1, 3, 9])
    for i in range(20):  # the inverse of ChainProblem.text
        q = problem("test", i, steps=5)
        p = problem_from_statement(q.text)
        assert (p.start, p.ops, p.values) == (q.start, q.ops, q.values)
    assert problem_from_statement("What is 2 + 3?") is None
    assert problem_from_statement("Start with 7. Divide by 2. What is the result?") is None


def test_the_first_divergence_is_the_first_wrong_result_and_its_first_departing_character():
    p = problem_from_statement(STATEMENT)
    # a ~ that gives the reference's value is no divergence: every result is the reference's
    assert divergence_char("7 - 6 ~ 1. So far so good. 1 * 3 = 3. Moving on. 3 * 3 = 9.", p) is None
    # the third step is an estimate with another value: "3 * 3 ~ 14." departs from "3 * 3 = 9." at the ~
    text = "7 - 6 = 1. This step is done. 1 * 3 = 3. That looks right. 3 * 3 ~ 14."
    assert divergence_char(text, p) == text.index("~")
    # an exact-looking wrong result departs at its first wrong digit: "1 * 3 = 13." against "1 * 3 = 3."
    text = "7 - 6 = 1. 1 * 3 = 13. 13 * 3 = 39."
    assert divergence_char(text, p) == text.index("13")
    # only the first divergence counts: step one already departs (at its result's digit)
    assert divergence_char("7 - 6 = 2. 2 * 3 ~ 7.", p) == 8


def test_the_oracle_scores_one_token_of_a_wrong_response_and_ties_a_right_one(chain_tokenizer):
    wrong = _text_probe(chain_tokenizer, STATEMENT, "7 - 6 = 1. This step is done. 1 * 3 = 3. 3 * 3 ~ 14.")
    right = _text_probe(chain_tokenizer, STATEMENT, "7 - 6 ~ 1. Keep going. 1 * 3 = 3. 3 * 3 = 9.")
    rows = first_divergence_scores([wrong, right], chain_tokenizer)
    pieces = [chain_tokenizer.decode([i]) for i in wrong.response_ids]
    assert rows[0].sum() == 1 and pieces[int(rows[0].argmax())] == " ~"
    assert rows[1].tolist() == [1.0] * right.reasoning_len  # GRPO's uniform credit
    with pytest.raises(ValueError, match="'first_divergence', row 0: the prompt states no chain problem"):
        first_divergence_scores([_text_probe(chain_tokenizer, "What is 2 + 3?", "2 + 3 = 5.")], chain_tokenizer)
    with pytest.raises(ValueError, match="no tokenizer"):
        first_divergence_scores([wrong], None)


# ------------------------------------------------------------------------------- TEMPO


def test_the_prefix_tree_values_and_the_td_terms_are_worked_by_hand():
    # one group: A = 1 2 3 (reward 1), B = 1 2 4 (0), C = 1 5 6 (1), D = 7 8 (0)
    # V(root) 1/2; V(1) 2/3, V(7) 0; V(1 2) 1/2, V(1 5) 1; each whole response its reward
    responses = [[1, 2, 3], [1, 2, 4], [1, 5, 6], [7, 8]]
    rewards = [1.0, 0.0, 1.0, 0.0]
    values = prefix_values(responses, rewards)
    assert values[0] == pytest.approx([1 / 2, 2 / 3, 1 / 2, 1])
    assert values[2] == pytest.approx([1 / 2, 2 / 3, 1, 1])
    assert values[3] == pytest.approx([1 / 2, 0, 0])
    # a second group of one response tells nothing: 0 everywhere
    signed = tempo_scores(responses + [[1, 2, 3]], [3, 3, 3, 1, 3], [0, 0, 0, 0, 9], rewards + [1.0], signed=True)
    assert signed[0].tolist() == pytest.approx([1 / 6, -1 / 6, 1 / 2])
    assert signed[1].tolist() == pytest.approx([1 / 6, -1 / 6, -1 / 2])
    assert signed[2].tolist() == pytest.approx([1 / 6, 1 / 3, 0])
    assert signed[3].tolist() == pytest.approx([-1 / 2])  # reasoning of one token: the tree is the whole list
    assert signed[4].tolist() == [0, 0, 0]
    magnitude = tempo_scores(responses, [3, 3, 3, 2], [0] * 4, rewards)
    assert magnitude[1].tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 2])
    assert magnitude[3].tolist() == pytest.approx([1 / 2, 0])
    with pytest.raises(ValueError, match="one each per response"):
        tempo_scores(responses, [3], [0] * 4, rewards)


# ------------------------------------------------------------------------------- registrations


def test_each_entry_declares_what_it_reads():
    reads = {name: scorer_spec(name).needs for name in (
        "surprisal", "last_step_digits", "last_step", "step_results", "relations_and_results", "tilde_first",
        "oar_g_inverted", "first_divergence", "tempo", "tempo_signed")}
    assert reads["surprisal"] == {"model"}
    assert all(reads[n] == set() for n in ("last_step_digits", "last_step", "step_results", "relations_and_results",
                                           "tilde_first"))
    assert reads["oar_g_inverted"] == scorer_spec("oar_g").needs
    assert reads["first_divergence"] == {"reference_solution"} and "reference_solution" in NEEDS
    assert reads["first_divergence"] <= GROUND_TRUTH_NEEDS and "parsed_steps" in GROUND_TRUTH_NEEDS
    assert reads["tempo"] == reads["tempo_signed"] == {"groups"}
    assert scorer_spec("tempo_signed").signed and not scorer_spec("tempo").signed
