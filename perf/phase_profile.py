"""Where one training step of each testbed method spends its time, phase by phase, beside each phase's floor.

Trains each method (``--settings``: the runs' ``settings.yaml`` of ``make run``, one a method) a few steps
in this process, timing every step's phases: generation (the sampler alone), old and reference
log-probs (where TRL computes them: only when ``gradient_accumulation_steps`` is not a multiple of
``steps_per_generation * num_iterations``, or with a KL term), rewards and batch (the rest of TRL's
generation batch: decoding, grading, advantages), scoring (the method's token weights) and update
(forward, backward, optimiser). Then one evaluation batch at the config's evaluation settings.

Each phase's floor is what the same tensors cost with nothing else around them: the step's final
sequences [B, prompt + completion] through one bare forward (generation, log-probs, evaluation; the
scorers: per token they run, forwards with or without grad counted by a hook on the model) or forward and
backward plus AdamW's step (update); and their FLOPs at the machine's matmul rate, measured here on the
policy's own widths. The ratio is the phase's time over the bare-pass floor. Medians over the timed steps
(the first step is a warm-up and is not counted).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python perf/phase_profile.py \\
        --settings results/runs/chain_f1/*-seed0/settings.yaml --model results/models/chain_f1 \\
        --train-file results/data/chain_train.jsonl --eval-file results/data/chain_test.jsonl --steps 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from harness import add_out, add_threads, markdown_table, median_seconds, write_table

PHASES = ("generation", "old/ref log-probs", "rewards and batch", "scoring", "update")


# --------------------------------------------------------------------------------------------- FLOPs


def linear_params(config) -> int:
    """Weights of the matmuls one token goes through (every layer's projections and the output head)."""
    d, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    attention = d * heads * head_dim * 2 + d * kv * head_dim * 2
    return layers * (attention + 3 * d * f) + d * config.vocab_size


def forward_flops(config, rows: int, length: int) -> float:
    """A causal forward of ``rows`` sequences of ``length`` tokens: the matmuls and attention's two
    products over the causal half."""
    heads = config.num_attention_heads
    d = heads * (getattr(config, "head_dim", None) or config.hidden_size // heads)
    return 2.0 * linear_params(config) * rows * length + 2.0 * config.num_hidden_layers * rows * length * length * d


def matmul_rate(config, tokens: int, repeats: int) -> float:
    """FLOP/s of the policy's widest matmul ([tokens, hidden] x [hidden, intermediate]) on this machine."""
    import torch

    a = torch.randn(tokens, config.hidden_size)
    b = torch.randn(config.hidden_size, config.intermediate_size)
    seconds = median_seconds(lambda: a @ b, repeats)
    return 2.0 * tokens * config.hidden_size * config.intermediate_size / seconds


# ------------------------------------------------------------------------------------------- floors


def bare_floors(model, sequences, mask, repeats: int) -> dict[str, float]:
    """Seconds of the bare passes over the step's final sequences: a forward without grad, and a forward,
    log-probs of the sequence's own tokens, backward and an AdamW step."""
    import torch

    def forward():
        with torch.no_grad():
            model(input_ids=sequences, attention_mask=mask).logits

    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: the weights stay as trained

    def forward_backward():
        logits = model(input_ids=sequences, attention_mask=mask).logits[:, :-1]
        logps = torch.log_softmax(logits.float(), -1).gather(-1, sequences[:, 1:, None]).squeeze(-1)
        (-(logps * mask[:, 1:]).sum() / mask.sum()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    forward()
    forward_backward()
    return {"forward": median_seconds(forward, repeats), "forward_backward": median_seconds(forward_backward, repeats)}


class TokenCounter:
    """Tokens each forward of a model runs, split by grad: what a scorer's floor is priced by."""

    def __init__(self, model):
        import torch

        self.torch, self.counting, self.tokens, self.grad_tokens = torch, False, 0, 0
        self.handle = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        if not self.counting:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        shape = ids.shape if ids is not None else kwargs["inputs_embeds"].shape[:2]
        if self.torch.is_grad_enabled():
            self.grad_tokens += shape[0] * shape[1]
        else:
            self.tokens += shape[0] * shape[1]

    @contextlib.contextmanager
    def counted(self):
        self.counting, self.tokens, self.grad_tokens = True, 0, 0
        try:
            yield self
        finally:
            self.counting = False


# --------------------------------------------------------------------------------------- one method


def profile_method(settings: dict, steps: int, repeats: int, rate: float) -> dict:
    """One method's phases over ``steps`` timed steps (one warm-up before), and their floors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from oar.training.grpo_trainer import OARTrainer, correctness_reward
    from oar.training.run import build_config, load_problems, stop_at_end_of_turn, training_dataset
    from oar.training.settings import RunSettings
    from dataclasses import asdict

    run = RunSettings.of(settings)
    settings = asdict(run)
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=getattr(torch, settings["model_dtype"]))
    dataset = training_dataset(load_problems(settings["train_file"], settings["train_limit"]), tokenizer)
    phases: list[dict[str, float]] = []
    current: dict[str, float] = {}
    last_batch: dict = {}

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            current.clear()
            current["_begin"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            current["step"] = time.perf_counter() - current.pop("_begin")
            phases.append(dict(current))

    with tempfile.TemporaryDirectory() as work:
        config = build_config(settings, Path(work), stop_at_end_of_turn(model, tokenizer), oar=run.oar)
        config.max_steps, config.save_steps, config.disable_tqdm = steps + 1, 10**6, True
        trainer = OARTrainer(model=model, reward_funcs=correctness_reward(), args=config, train_dataset=dataset,
                             processing_class=tokenizer, callbacks=[StepClock()])
        counter = TokenCounter(trainer.model)

        def timed_phase(name, fn, counting=False):
            def wrapped(*args, **kwargs):
                started = time.perf_counter()
                with counter.counted() if counting else contextlib.nullcontext():
                    result = fn(*args, **kwargs)
                current[name] = current.get(name, 0.0) + time.perf_counter() - started
                if counting:
                    current["score_tokens"], current["score_grad_tokens"] = counter.tokens, counter.grad_tokens
                return result
            return wrapped

        generate_and_score = trainer._generate_and_score_completions
        logps = trainer._get_per_token_logps_and_entropies
        in_batch = {"on": False}

        def batch(inputs):
            in_batch["on"] = True
            try:
                output = generate_and_score(inputs)
            finally:
                in_batch["on"] = False
            last_batch.update(output)
            return output

        def per_token_logps(*args, **kwargs):  # TRL's old/reference log-probs: called inside the batch
            if not in_batch["on"]:
                return logps(*args, **kwargs)
            return timed_phase("old/ref log-probs", logps)(*args, **kwargs)

        trainer._generate_single_turn = timed_phase("generation", trainer._generate_single_turn)
        trainer._token_weights = timed_phase("scoring", trainer._token_weights, counting=True)
        trainer._get_per_token_logps_and_entropies = per_token_logps
        trainer._generate_and_score_completions = timed_phase("batch", batch)
        trainer.train()
        counter.handle.remove()

    timed_steps = phases[1:]
    medians = {k: statistics.median(p.get(k, 0.0) for p in timed_steps)
               for k in ("step", "batch", "generation", "old/ref log-probs", "scoring", "score_tokens",
                         "score_grad_tokens")}
    medians["rewards and batch"] = medians["batch"] - medians["generation"] - medians["old/ref log-probs"] \
        - medians["scoring"]
    medians["update"] = medians["step"] - medians["batch"]

    sequences = torch.cat([last_batch["prompt_ids"], last_batch["completion_ids"]], dim=1)
    mask = torch.cat([last_batch["prompt_mask"], last_batch["completion_mask"]], dim=1)
    rows, length = sequences.shape
    floors = bare_floors(model, sequences, mask, repeats)
    per_token = floors["forward"] / (rows * length)
    per_grad_token = floors["forward_backward"] / (rows * length)
    flops = forward_flops(model.config, rows, length)
    scored = medians["score_tokens"] * per_token + medians["score_grad_tokens"] * per_grad_token
    scored_flops = flops / (rows * length) * (medians["score_tokens"] + 3 * medians["score_grad_tokens"])
    computed_logps = medians["old/ref log-probs"] > 0
    floor = {
        "generation": (floors["forward"], flops / rate),
        "old/ref log-probs": (floors["forward"] if computed_logps else 0.0, flops / rate if computed_logps else 0.0),
        "rewards and batch": (0.0, 0.0),
        "scoring": (scored, scored_flops / rate),
        "update": (floors["forward_backward"], 3 * flops / rate),
    }
    return {"method": settings["method"], "shape": [rows, length], "phases": medians, "floors": floor,
            "bare": floors, "completion_tokens": int(last_batch["completion_mask"].sum())}


# -------------------------------------------------------------------------------------- evaluation


def profile_evaluation(model_dir: str, eval_file: str, config_file: str, backend: str, repeats: int,
                       rate: float) -> dict:
    """One evaluation batch (the config's batch size, n, temperature, max_new_tokens) and its floor."""
    import torch

    from oar.data.records import read_records
    from oar.evaluation.generation import make_generator
    from oar.prompting import build_prompts

    config = yaml.safe_load(Path(config_file).read_text())
    evaluation = config["evaluation"]
    name = Path(eval_file).stem
    sampling = evaluation["per_benchmark"][name]
    n, batch_size = sampling["n"], evaluation["batch_size"]
    problems = read_records(eval_file)
    generator = make_generator(backend, model_dir, batch_size=batch_size)
    batch = problems[: max(1, batch_size // n)]
    prompts = build_prompts([p["problem"] for p in batch], generator.tokenizer, chat=getattr(generator, "chat", None))

    def one_batch():
        return generator.generate(prompts, n=n, temperature=sampling["temperature"],
                                  max_new_tokens=evaluation["max_new_tokens"], seed=0)

    one_batch()
    seconds = median_seconds(one_batch, repeats)
    outs = one_batch()
    prompt_len = max(len(generator.tokenizer(p)["input_ids"]) for p in prompts)
    length = prompt_len + max(o.num_tokens for per in outs for o in per)
    rows = len(batch) * n
    ids = torch.randint(0, generator.model.config.vocab_size, (rows, length))
    mask = torch.ones_like(ids)

    def forward():
        with torch.no_grad():
            generator.model(input_ids=ids, attention_mask=mask)

    forward()
    floor = median_seconds(forward, repeats)
    batches = -(-len(problems) * n // batch_size)
    return {"seconds": seconds, "floor": floor, "shape": [rows, length], "batches": batches,
            "flop_floor": forward_flops(generator.model.config, rows, length) / rate}


# ------------------------------------------------------------------------------------- sampler A/B


def sampler_ab(model_dir: str, train_file: str, settings: dict, repeats: int) -> dict:
    """transformers' generate against the lean loop on one training batch's prompts (the settings' prompts
    a step, completions each, max_completion_length, temperature), interleaved call by call so that a
    shared machine's slow spells fall on both; median seconds of each."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from oar.models.lean_sampling import sample
    from oar.prompting import build_prompts
    from oar.training.run import load_problems

    trainer = settings["trainer"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    groups = trainer["per_device_train_batch_size"] // trainer["num_generations"]
    problems = [r["problem"] for r in load_problems(train_file, groups)]
    enc = tokenizer(build_prompts(problems, tokenizer, chat=False) * trainer["num_generations"], return_tensors="pt",
                    padding=True)
    common = {"max_new_tokens": trainer["max_completion_length"], "pad_token_id": tokenizer.pad_token_id}
    times: dict[str, list[float]] = {"generate": [], "lean": []}
    for seed in range(repeats):
        for name in times:
            torch.manual_seed(seed)
            started = time.perf_counter()
            if name == "lean":
                sample(model, enc.input_ids, enc.attention_mask, eos_token_ids=[tokenizer.eos_token_id],
                       temperature=trainer["temperature"], **common)
            else:
                with torch.no_grad():
                    model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, do_sample=True,
                                   top_k=0, top_p=1.0, temperature=trainer["temperature"],
                                   eos_token_id=[tokenizer.eos_token_id], **common)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) for name, t in times.items()} | {"rows": int(enc.input_ids.shape[0])}


# ------------------------------------------------------------------------------------------- table


def table(results: list[dict], evaluation: dict | None, rate: float) -> str:
    rows = []
    for r in results:
        for phase in PHASES:
            seconds = r["phases"][phase]
            bare, flop = r["floors"][phase]
            rows.append([r["method"], phase, f"{seconds:.3f}", f"{bare:.3f}" if bare else "-",
                         f"{flop:.3f}" if flop else "-", f"{seconds / bare:.1f}" if bare else "-"])
        rows.append([r["method"], "**step**", f"{r['phases']['step']:.3f}",
                     f"{sum(b for b, _ in r['floors'].values()):.3f}", f"{sum(f for _, f in r['floors'].values()):.3f}",
                     f"{r['phases']['step'] / sum(b for b, _ in r['floors'].values()):.1f}"])
    if evaluation:
        e = evaluation
        rows.append(["evaluation", f"one batch {e['shape'][0]} x {e['shape'][1]} (of {e['batches']})",
                     f"{e['seconds']:.3f}", f"{e['floor']:.3f}", f"{e['flop_floor']:.3f}",
                     f"{e['seconds'] / e['floor']:.1f}"])
    shapes = ", ".join(f"{r['method']} {r['shape'][0]} x {r['shape'][1]}" for r in results)
    head = (f"Median seconds per step over the timed steps; floors: the same tensors through a bare forward "
            f"(and backward), and their FLOPs at {rate / 1e9:.1f} GFLOP/s (this machine's matmul rate at the "
            f"policy's widths). Final sequences: {shapes}.\n\n")
    return head + markdown_table(["method", "phase", "seconds", "bare-pass floor", "FLOP floor", "ratio to bare"],
                                 rows, "llrrrr")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--settings", nargs="+", type=Path, required=True, help="runs' settings.yaml, one a method")
    p.add_argument("--model", required=True, help="the policy's model folder")
    p.add_argument("--train-file", required=True)
    p.add_argument("--eval-file", help="the evaluation benchmark (its name's entry in the config's evaluation)")
    p.add_argument("--config", default="config/config.yaml", help="the config whose evaluation settings are timed")
    p.add_argument("--eval-backend", default="transformers", help="evaluation.backend to time")
    p.add_argument("--set", nargs="*", default=[], metavar="BLOCK.KEY=VALUE",
                   help="settings overrides for every method, e.g. oar.sampler=lean (YAML values)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per method (after one warm-up step)")
    p.add_argument("--repeats", type=int, default=5, help="repeats of each bare pass (the median is the floor)")
    p.add_argument("--sampler-ab", type=int, default=0, metavar="REPEATS",
                   help="only time generate against the lean sampler on one training batch, interleaved")
    add_threads(p, 1)
    add_out(p, "write the table here (and its numbers as JSON beside it)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    if args.sampler_ab:
        settings = yaml.safe_load(args.settings[0].read_text())
        ab = sampler_ab(args.model, args.train_file, settings, args.sampler_ab)
        print(f"one batch of {ab['rows']} rows, medians of {args.sampler_ab} interleaved calls: generate "
              f"{ab['generate']:.3f} s, lean {ab['lean']:.3f} s, lean / generate {ab['lean'] / ab['generate']:.2f}")
        return
    results = []
    rate = None
    for path in args.settings:
        settings = yaml.safe_load(path.read_text())
        settings |= {"model": str(Path(args.model).resolve()), "train_file": str(Path(args.train_file).resolve())}
        for override in args.set:
            key, value = override.split("=", 1)
            block, name = key.split(".", 1)
            settings[block] = {**settings[block], name: yaml.safe_load(value)}
        if rate is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(args.model)
            rate = matmul_rate(config, settings["trainer"]["per_device_train_batch_size"] * 128, args.repeats * 4)
        results.append(profile_method(settings, args.steps, args.repeats, rate))
        print(f"{settings['method']}: step {results[-1]['phases']['step']:.3f} s", flush=True)
    evaluation = (profile_evaluation(args.model, args.eval_file, args.config, args.eval_backend, args.repeats, rate)
                  if args.eval_file else None)
    text = table(results, evaluation, rate)
    print("\n" + text)
    if args.out:
        write_table(args.out, text, {"rate_flops": rate, "methods": results, "evaluation": evaluation,
                                     "threads": args.threads, "overrides": args.set})


if __name__ == "__main__":
    main()
