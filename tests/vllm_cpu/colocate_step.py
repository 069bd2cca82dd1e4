"""Two training steps with vLLM colocated in the trainer (TRL ``use_vllm``, ``vllm_mode: colocate``) on
CPU, then a check that the engine generates with the trained weights. One engine per process, so the
test runs this as a script:

    python tests/vllm_cpu/colocate_step.py METHOD MODEL_DIR OUT_DIR

Step 2's generation makes TRL sync the weights of step 1's update (through ``oar.training.vllm_cpu`` on CPU).
After training the engine still holds step 1's weights; its log-probabilities of fixed sequences are
compared with the trained model's before and after the same sync is called once more (they must differ
before, or the comparison would prove nothing, and agree after), then those of sampled completions.
The sync is judged by what the engine computes, not by its parameters: vLLM's CPU backend repacks
linear weights for the CPU's instruction set (on AVX-512 the raw parameter is empty), and CUDA has its
own layouts. TRL builds the engine with vLLM's ``dtype="auto"``, which runs an fp32 checkpoint in bf16:
agreement is up to bf16 rounding. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm import SamplingParams

from oar.training.grpo_trainer import OARTrainer
from oar.training.run import MetricsFile, build_config, load_problems, stop_at_end_of_turn, training_dataset
from oar.training.settings import resolve_settings
from oar.training.vllm_cpu import sync_weights_through_reload


def parity_reward(completions, **kwargs) -> list[float]:
    """Varied rewards for a random model (it never answers), so that the update is not zero."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(zlib.crc32(t.encode()) % 2) for t in texts]


def sequence_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def engine_logprobs(llm, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The engine's log-probabilities of ``completion``'s tokens after ``prompt``: what it computes, read
    through ``prompt_logprobs`` (vLLM's CPU backend repacks weights per instruction set, so its raw
    parameters are no reliable record of what it holds)."""
    (request,) = llm.generate([{"prompt_token_ids": prompt + completion}],
                              SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    scored = request.prompt_logprobs[len(prompt):]
    return torch.tensor([position[token].logprob for position, token in zip(scored, completion, strict=True)])


def largest_difference(llm, model, sequences) -> float:
    return max((engine_logprobs(llm, p, c) - sequence_logprobs(model, p, c)).abs().max().item() for p, c in sequences)


def main(method: str, model_dir: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    train_file = out / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)})
                                  + "\n" for i in range(8)))
    settings = resolve_settings({
        "run_id": f"{method}-vllm", "method": method, "model": str(model_dir), "train_file": str(train_file),
        "oar": {"score_all": True},
        "trainer": {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8,
                    "max_completion_length": 12, "learning_rate": 1e-2, "save_steps": 10**6,
                    "use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 256},
    })
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = build_config(settings, out / "checkpoints", stop_at_end_of_turn(model, tokenizer))
    trainer = OARTrainer(model=model, reward_funcs=parity_reward, args=config, processing_class=tokenizer,
                         train_dataset=training_dataset(load_problems(train_file, None), tokenizer),
                         callbacks=[MetricsFile(out / "metrics.jsonl")])
    generation = trainer.vllm_generation
    assert generation.sync_weights.__func__ is sync_weights_through_reload, "the CPU weight sync is not installed"
    syncs = []
    installed = generation.sync_weights
    generation.sync_weights = lambda: (syncs.append(trainer.state.global_step), installed())[1]
    trainer.train()

    # Fixed sequences (chat prompts, a fixed answer), scored by the engine and by the trained model. The
    # engine still holds step 1's weights (TRL syncs before a generation, and step 2's update came after
    # step 2's generation): they must differ now, and agree once the sync TRL would call next has run.
    trained = trainer.model.eval()
    llm = generation.llm
    answer = tokenizer("The answer is 42, so \\boxed{42}.", add_special_tokens=False)["input_ids"]
    sequences = [(tokenizer.apply_chat_template([{"role": "user", "content": f"What is {i} times {i + 1}?"}],
                                                add_generation_prompt=True, tokenize=True, return_dict=False), answer)
                 for i in range(8)]
    diff_before_sync = largest_difference(llm, trained, sequences)
    generation.sync_weights()
    diff_after_sync = largest_difference(llm, trained, sequences)
    # The same through generation: sampled completions' log-probabilities against the trained model's.
    sampled = llm.generate([{"prompt_token_ids": p} for p, _ in sequences],
                           SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=16, logprobs=0, seed=0),
                           use_tqdm=False)
    diff_sampled = 0.0
    for (prompt, _), request in zip(sequences, sampled, strict=True):
        completion = list(request.outputs[0].token_ids)
        engine = torch.tensor([lp[t].logprob for lp, t in zip(request.outputs[0].logprobs, completion)])
        diff_sampled = max(diff_sampled, (engine - sequence_logprobs(trained, prompt, completion)).abs().max().item())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    engine_dtype = str(llm.llm_engine.model_config.dtype)
    print(json.dumps({"method": method, "syncs_at_steps": syncs, "steps": [m["step"] for m in metrics],
                      "frac_scored": [m["frac_scored"] for m in metrics], "engine_dtype": engine_dtype,
                      "logprob_diff_before_sync": diff_before_sync, "logprob_diff_after_sync": diff_after_sync,
                      "logprob_diff_sampled": diff_sampled, "sequences": len(sequences)}))


if __name__ == "__main__":  # vLLM's engine process is spawned: nothing may run on import
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
