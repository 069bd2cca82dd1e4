"""Two training steps with vLLM colocated in the trainer (TRL ``use_vllm``, ``vllm_mode: colocate``) on
CPU, then a check that the engine generates with the trained weights. One engine per process, so the
test runs this as a script:

    python tests/vllm/colocate_step.py METHOD MODEL_DIR OUT_DIR

Step 2's generation makes TRL sync the weights of step 1's update (through ``oar.vllm_cpu`` on CPU);
after training the same sync is called once more and the engine's log-probabilities of sampled
completions are compared with the trained model's, and with the untrained model's (which must differ,
or the comparison would prove nothing). TRL builds the engine with vLLM's ``dtype="auto"``, which runs
an fp32 checkpoint in bf16: the engine's weights are compared exactly with the trained weights cast to
bf16, its log-probabilities with the fp32 model's up to bf16 rounding. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm import SamplingParams

from oar.trainer import OARTrainer
from oar.training import MetricsFile, build_config, load_problems, resolve_settings, training_dataset
from oar.vllm_cpu import sync_weights_through_reload


def parity_reward(completions, **kwargs) -> list[float]:
    """Varied rewards for a random model (it never answers), so that the update is not zero."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(zlib.crc32(t.encode()) % 2) for t in texts]


def sequence_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def engine_weight_mismatch(engine_model, trained) -> tuple[float, str]:
    """Largest |engine - trained| over the engine's parameters, the trained ones cast to the engine's dtype
    (vLLM stacks q/k/v and gate/up into one matrix; the tied lm_head is the embedding)."""
    stacked = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    source = dict(trained.named_parameters())
    worst = 0.0
    for name, param in engine_model.named_parameters():
        parts = next((tuple(name.replace(k, p) for p in v) for k, v in stacked.items() if k in name), (name,))
        expected = torch.cat([source[p].detach() for p in parts]).to(param.dtype)
        worst = max(worst, (param.detach() - expected).abs().max().item())
    return worst, str(next(engine_model.parameters()).dtype)


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
                    "use_vllm": True, "vllm_mode": "colocate"},
    })
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    untrained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    config = build_config(settings, out / "checkpoints")
    config.vllm_max_model_length = 256
    trainer = OARTrainer(model=model, reward_funcs=parity_reward, args=config, processing_class=tokenizer,
                         train_dataset=training_dataset(load_problems(train_file, None), tokenizer),
                         callbacks=[MetricsFile(out / "metrics.jsonl")])
    generation = trainer.vllm_generation
    assert generation.sync_weights.__func__ is sync_weights_through_reload, "the CPU weight sync is not installed"
    syncs = []
    installed = generation.sync_weights
    generation.sync_weights = lambda: (syncs.append(trainer.state.global_step), installed())[1]
    trainer.train()

    generation.sync_weights()  # what TRL would call before the next step's generation
    trained = trainer.model.eval()
    llm = generation.llm
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"What is {i} times {i + 1}?"}],
                                             add_generation_prompt=True, tokenize=True, return_dict=False)
               for i in range(8)]
    sampled = llm.generate([{"prompt_token_ids": p} for p in prompts],
                           SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_tokens=16, logprobs=0, seed=0),
                           use_tqdm=False)
    diff_trained, diff_untrained = 0.0, 0.0
    for prompt, request in zip(prompts, sampled, strict=True):
        completion = list(request.outputs[0].token_ids)
        engine = torch.tensor([lp[t].logprob for lp, t in zip(request.outputs[0].logprobs, completion)])
        diff_trained = max(diff_trained, (engine - sequence_logprobs(trained, prompt, completion)).abs().max().item())
        diff_untrained = max(diff_untrained,
                             (engine - sequence_logprobs(untrained, prompt, completion)).abs().max().item())
    greedy = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(temperature=0.0, max_tokens=16),
                          use_tqdm=False)
    greedy_same = 0
    for prompt, request in zip(prompts, greedy, strict=True):
        with torch.no_grad():
            ones = torch.ones(1, len(prompt), dtype=torch.long)
            reference = trained.generate(torch.tensor([prompt]), attention_mask=ones,
                                         max_new_tokens=16, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                         pad_token_id=tokenizer.pad_token_id)
        greedy_same += list(request.outputs[0].token_ids) == reference[0, len(prompt):].tolist()
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    weight_mismatch, engine_dtype = engine_weight_mismatch(runner.get_model(), trained)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    print(json.dumps({"method": method, "syncs_at_steps": syncs, "steps": [m["step"] for m in metrics],
                      "frac_scored": [m["frac_scored"] for m in metrics],
                      "max_logprob_diff_trained": diff_trained, "max_logprob_diff_untrained": diff_untrained,
                      "engine_dtype": engine_dtype, "weight_mismatch": weight_mismatch,
                      "greedy_same": greedy_same, "prompts": len(prompts)}))


if __name__ == "__main__":  # vLLM's engine process is spawned: nothing may run on import
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
