"""At the maths defaults the probes are exactly the probes the workflow's runs were trained with: every
field of each probe of a set of maths responses (boxed, nested, a statement, the last number, none) on
the tiny and the packaged tokenizer, under ``build_probes``' defaults and under a run's (``OARSettings``),
equals tests/fixtures/maths_probes.json, recorded before the conclusion and the answer span became
settings. A change to the default probe changes the published numbers: it fails here first."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from oar.method.probes import ProbeOptions, build_probes
from oar.training.settings import OARSettings

pytestmark = pytest.mark.quick

FIXTURE = Path(__file__).parent / "fixtures" / "maths_probes.json"
PROMPT = "Question: 12 + 7?"
RESPONSES = (
    "We add: 12 + 7 = 19. The final answer is \\boxed{19}.",
    "So x = \\frac{1}{2}, i.e. \\boxed{\\frac{1}{2}}",
    "12 + 7 = 19",
    "Each costs 3 € × 4 → 12 €, so 12 + 7 = 19",
    "Twelve and seven. The answer is 19 dollars.",
    "Therefore, the final answer is \\boxed{(1, 2)}",
    "I am not sure.",
    "Answer: positive",
    "x = \\boxed{4} and then \\boxed{5",
)
# build_probes' own defaults (the held-out scripts, the analysis) and a run's (the trainer's own_conclusion)
OPTIONS = {"build_probes": {}, "run": "run"}


@functools.cache
def tiny_tokenizer():
    from oar.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()


def probe_rows(tokenizer, options) -> list[list]:
    """Every field of each response's probe, as JSON values."""
    prompt = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in RESPONSES]
    if options == "run":
        probes = ProbeOptions.of(OARSettings()).build(tokenizer, [prompt] * len(ids), ids)
    else:
        probes = build_probes(tokenizer, [prompt] * len(ids), ids, **options)
    return [[list(p.prompt_ids), list(p.response_ids), p.reasoning_len, list(p.conclude_ids), list(p.answer_ids),
             p.answer_kind, p.pad_id] for p in probes]


@pytest.mark.parametrize("tokenizer_name", ["tiny", "packaged"])
@pytest.mark.parametrize("option", list(OPTIONS))
def test_the_default_probes_are_the_recorded_ones(tokenizer_name, option, request):
    # the packaged tokenizer's fixture skips where the packaged model is not installed
    tokenizer = tiny_tokenizer() if tokenizer_name == "tiny" else request.getfixturevalue("packaged_tokenizer")
    recorded = json.loads(FIXTURE.read_text())[f"{tokenizer_name}/{option}"]
    rows = probe_rows(tokenizer, OPTIONS[option])
    for response, row, want in zip(RESPONSES, rows, recorded, strict=True):
        assert row == want, response
