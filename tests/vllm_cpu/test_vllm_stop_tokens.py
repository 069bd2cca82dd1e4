"""The vLLM evaluation backend stops chat-format responses at the template's end-of-turn token, on the
real engine (model: tests/end_of_turn_model.py, eos <|endoftext|>, turns ended by <|im_end|>)."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("vllm")

from end_of_turn_model import END_OF_TURN, EOS, PROBLEM, build_end_of_turn_model  # noqa: E402
from vllm import SamplingParams  # noqa: E402

from oar.evaluation.generation import VLLMGenerator  # noqa: E402
from oar.prompting import build_prompt, encode_prompts  # noqa: E402

N, MAX_NEW = 8, 24


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    model_dir = build_end_of_turn_model(tmp_path_factory.mktemp("models") / "end-of-turn")
    generator = VLLMGenerator(model_dir, dtype="float32", max_model_len=256)
    yield generator
    del generator
    gc.collect()


def test_vllm_backend_stops_at_end_of_turn(generator):
    tokenizer = generator.tokenizer
    eos, end_of_turn = (tokenizer.convert_tokens_to_ids(t) for t in (EOS, END_OF_TURN))
    assert tokenizer.eos_token_id == eos and generator.stop_ids == [eos, end_of_turn]
    prompt = build_prompt(PROBLEM, tokenizer)
    (prompt_ids,) = encode_prompts(tokenizer, [prompt])

    # What the engine does without the stop list (its eos only): responses run on past <|im_end|>.
    (plain,) = generator.llm.generate([{"prompt_token_ids": prompt_ids}],
                                      SamplingParams(n=N, temperature=1.0, max_tokens=MAX_NEW, seed=3), use_tqdm=False)
    ran_on = [list(o.token_ids) for o in plain.outputs if end_of_turn in list(o.token_ids)[:-1]]
    assert ran_on, "the test model should write <|im_end|> mid-response"

    (got,) = generator.generate([prompt], n=N, temperature=1.0, max_new_tokens=MAX_NEW, seed=3)
    assert len(got) == N
    assert all(o.finish_reason == "stop" and o.num_tokens < MAX_NEW for o in got), got
    # The request again with the engine's own SamplingParams, to see the tokens: each ends at its first
    # <|im_end|>, the stop token kept as the last token (as the transformers backend counts it).
    (again,) = generator.llm.generate([{"prompt_token_ids": prompt_ids}],
                                      SamplingParams(n=N, temperature=1.0, max_tokens=MAX_NEW, seed=3,
                                                     stop_token_ids=generator.stop_ids), use_tqdm=False)
    for out, sample in zip(got, again.outputs, strict=True):
        tokens = list(sample.token_ids)
        assert tokens.index(end_of_turn) == len(tokens) - 1 == out.num_tokens - 1
