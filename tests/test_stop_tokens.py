"""Chat-format responses stop at the chat template's end-of-turn token, not only at eos: on the
transformers backend, in training (TRL's generation) and in vLLM's settings (the vLLM engine itself:
tests/vllm_cpu/test_vllm_stop_tokens.py). The model: tests/end_of_turn_model.py (Qwen2.5 base's layout,
eos <|endoftext|>, turns ended by <|im_end|>)."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from end_of_turn_model import END_OF_TURN, EOS, PROBLEM, build_end_of_turn_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from oar.evaluation.generation import TransformersGenerator, end_of_turn_token_id, eos_token_ids
from oar.models.tiny import build_tiny_tokenizer
from oar.prompting import build_prompt, encode_prompts, prompt_messages
from oar.training.grpo_trainer import OARTrainer
from oar.training.run import build_config, stop_at_end_of_turn
from oar.training.settings import resolve_settings

N, MAX_NEW = 8, 24


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_end_of_turn_model(tmp_path_factory.mktemp("models") / "end-of-turn")


def ids(tokenizer):
    return tokenizer.convert_tokens_to_ids(EOS), tokenizer.convert_tokens_to_ids(END_OF_TURN)


def test_end_of_turn_token_is_read_from_the_chat_template(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eos, end_of_turn = ids(tokenizer)
    assert tokenizer.eos_token_id == eos != end_of_turn
    assert end_of_turn_token_id(tokenizer) == end_of_turn
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert eos_token_ids(model, tokenizer) == [eos, end_of_turn]
    assert eos_token_ids(model, tokenizer, chat=False) == [eos]  # plain-text prompts: eos only
    plain = build_tiny_tokenizer()
    plain.chat_template = None
    assert end_of_turn_token_id(plain) is None


def test_transformers_backend_stops_at_end_of_turn(model_dir):
    generator = TransformersGenerator(model_dir, batch_size=N, device="cpu", dtype="float32")
    tokenizer, model = generator.tokenizer, generator.model
    eos, end_of_turn = ids(tokenizer)
    prompt = build_prompt(PROBLEM, tokenizer)
    got = generator.generate([prompt], n=N, temperature=1.0, top_p=1.0, max_new_tokens=MAX_NEW, seed=5)[0]

    # The same draws (one batch, seeded as the generator seeds it), stopping only at eos: what generation
    # did before. Each response writes <|im_end|> and runs on past it.
    (prompt_ids,) = encode_prompts(tokenizer, [prompt])
    torch.manual_seed(5)
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt_ids] * N),
                                   attention_mask=torch.ones(N, len(prompt_ids), dtype=torch.long),
                                   max_new_tokens=MAX_NEW, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                   eos_token_id=[eos], pad_token_id=tokenizer.pad_token_id, repetition_penalty=1.0)
    ran_on = 0
    for out, row in zip(got, reference[:, len(prompt_ids):].tolist(), strict=True):
        assert end_of_turn in row
        stop = row.index(end_of_turn)
        ran_on += stop < MAX_NEW - 1
        assert (out.finish_reason, out.num_tokens) == ("stop", stop + 1)
        assert out.text == tokenizer.decode(row[:stop], skip_special_tokens=True)
    assert ran_on == N  # every reference response went on after its end of turn


def test_training_generation_stops_at_end_of_turn(model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    eos, end_of_turn = ids(tokenizer)
    seen: list[list[int]] = []

    def recording_reward(completions, completion_ids, **kwargs):
        seen.extend(completion_ids)
        return [float(i % 2) for i in range(len(completions))]

    def train_one_step(stop_tokens: bool) -> list[list[int]]:
        seen.clear()
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        settings = resolve_settings({"run_id": "r", "model": str(model_dir), "train_file": "unused",
                                     "trainer": {"max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 8,
                                                 "max_completion_length": MAX_NEW, "save_steps": 100}})
        stops = stop_at_end_of_turn(model, tokenizer) if stop_tokens else None
        config = build_config(settings, tmp_path / f"out-{stop_tokens}", stops)
        config.disable_tqdm = True
        data = Dataset.from_list([{"prompt": prompt_messages(PROBLEM), "answer": "7"}] * 2)
        trainer = OARTrainer(model=model, reward_funcs=recording_reward, args=config, train_dataset=data,
                             processing_class=tokenizer)
        if stop_tokens:
            assert trainer.eos_token_ids == [eos, end_of_turn]
            assert list(trainer.generation_config.eos_token_id) == [eos, end_of_turn]
        trainer.train()
        return list(seen)

    before = train_one_step(stop_tokens=False)  # TRL's own stop list: eos only
    assert len(before) == 8 and any(end_of_turn in c and c.index(end_of_turn) < len(c) - 1 for c in before)
    after = train_one_step(stop_tokens=True)
    assert len(after) == 8 and all(end_of_turn in c for c in after)
    assert all(c.index(end_of_turn) == len(c) - 1 for c in after)  # ends there, nothing after it


def test_vllm_training_gets_the_stop_tokens_in_its_sampling_params(model_dir, tmp_path):
    settings = resolve_settings({"run_id": "r", "model": str(model_dir), "train_file": "unused",
                                 "trainer": {"use_vllm": True, "vllm_max_model_length": 512}})
    config = build_config(settings, tmp_path, [0, 2])
    # TRL 1.16 passes generation_kwargs to vLLM's SamplingParams, in colocate and server mode
    assert config.generation_kwargs == {"stop_token_ids": [0, 2]}
    assert config.vllm_max_model_length == 512
    plain = build_config(resolve_settings({"run_id": "r", "model": "m", "train_file": "f"}), tmp_path, [0, 2])
    assert plain.generation_kwargs is None  # transformers generation reads them from the model instead
