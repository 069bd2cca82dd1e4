"""OAR from the project's shipped policy, in your own TRL script: the testbed's chain task on a laptop.

    python examples/train_from_shipped_policy.py --method oar_g --max-steps 26

The policy is `chain_f1` (oar/models/frozen, the file `make run` starts from), checked against its sha256
and copied into the output folder; the problems are the testbed's training chains and the reward is the
grader's. The settings are `make run`'s (below): 26 steps are about as much work as one of its OAR-G runs
(1.7 CPU-minutes on an Intel Xeon). The tests run two steps of 4 prompts.
"""

import argparse

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from oar import OARConfig, OARTrainer, correctness_reward
from oar.data.catalogue import chain_split
from oar.models import frozen
from oar.prompting import prompt_messages


def chain_problems() -> Dataset:
    """The testbed's training chains (none of them a test problem), as TRL's prompt and answer columns."""
    return Dataset.from_list([{"prompt": prompt_messages(p.text), "answer": str(p.answer)}
                              for p in chain_split("train")])


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="chain_f1", choices=sorted(frozen.index()), help="a shipped policy")
    parser.add_argument("--method", default="oar_g", help="oar_g, oar_p, grpo, a registered scorer, or mypkg.mod:fn")
    parser.add_argument("--max-steps", type=int, default=26)
    parser.add_argument("--prompts-per-step", type=int, default=16, help="each with 8 completions")
    parser.add_argument("--output-dir", default="oar-shipped-example")
    args = parser.parse_args(argv)

    policy = frozen.install(args.policy, f"{args.output_dir}/policy")  # stops on a file whose hash differs
    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32)
    config = OARConfig(  # make run's training settings (config/config.yaml)
        output_dir=args.output_dir, max_steps=args.max_steps, learning_rate=1e-4, logging_steps=1,
        num_generations=8, per_device_train_batch_size=8 * args.prompts_per_step, max_completion_length=96,
        temperature=1.0, beta=0.0, use_cpu=True, report_to="none", save_strategy="no", seed=0,
        oar_method=args.method, oar_tau=0.4, oar_beta=2.0,  # the paper's gate
    )
    trainer = OARTrainer(model=model, reward_funcs=correctness_reward(), args=config, train_dataset=chain_problems(),
                         processing_class=tokenizer)
    trainer.train()
    steps = trainer.state.log_history[:-1]
    for log in steps:  # the reward, the share of responses OAR scored (A != 0), how far its weights moved from 1
        print({key: log.get(key) for key in ("step", "reward", "oar/frac_scored", "oar/ess_ratio", "time/score_s")})
    trainer.save_model(args.output_dir)
    return steps


if __name__ == "__main__":
    main()
