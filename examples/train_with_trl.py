"""OAR in your own TRL script: GRPO with token advantages from OAR-G, built exactly as GRPOTrainer is.

    python examples/train_with_trl.py --model Qwen/Qwen2.5-0.5B-Instruct --max-steps 20

Any causal LM folder or hub id works; the tests run it on a tiny random model for two steps.
"""

import argparse
import random

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from oar import OARConfig, OARTrainer


def arithmetic(n: int, seed: int = 0) -> Dataset:
    """Problems with a checkable answer: TRL passes the `answer` column to the reward function."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        rows.append({"prompt": [{"role": "user", "content": f"What is {a} + {b}? End with \\boxed{{answer}}."}],
                     "answer": str(a + b)})
    return Dataset.from_list(rows)


def exact_answer(completions, answer, **kwargs) -> list[float]:
    """1 when the completion's last \\boxed{} holds the answer; 0.1 for a wrong answer that is a number at
    least (partial credit, so that even a weak policy's groups differ); else 0."""
    rewards = []
    for completion, expected in zip(completions, answer):
        text = completion[-1]["content"]
        boxed = text.rsplit("\\boxed{", 1)[-1].split("}")[0].strip() if "\\boxed{" in text else None
        rewards.append(1.0 if boxed == expected else 0.1 if any(ch.isdigit() for ch in text) else 0.0)
    return rewards


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="model folder or hub id")
    parser.add_argument("--method", default="oar_g", help="oar_g, oar_p, grpo, a registered scorer, or mypkg.mod:fn")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--output-dir", default="oar-example")
    args = parser.parse_args(argv)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    on_gpu = torch.cuda.is_available()
    config = OARConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, learning_rate=1e-6, logging_steps=1,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=64,
        bf16=on_gpu, use_cpu=not on_gpu, report_to="none",
        oar_method=args.method, oar_tau=0.4, oar_beta=2.0,  # the paper's gate
    )
    trainer = OARTrainer(model=model, reward_funcs=exact_answer, args=config, train_dataset=arithmetic(64),
                         processing_class=tokenizer)
    trainer.train()
    steps = trainer.state.log_history[:-1]  # one entry a step (the last is the run's summary)
    for log in steps:  # the share of responses OAR scored (A != 0) and how far its weights moved from 1
        print({key: log.get(key) for key in ("step", "reward", "oar/frac_scored", "oar/ess_ratio", "time/score_s")})
    trainer.save_model(args.output_dir)  # the model and its card (README.md)
    return steps


if __name__ == "__main__":
    main()
