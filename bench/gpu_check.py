"""GPU check: step times of GRPO, OAR-G and OAR-P (and the evaluation backends) on a model of real shape.

Made for a CUDA machine with no network and no room for weights: the model is built from a shape below
with random weights (nothing to download or carry), the tokenizer is the tiny test tokenizer padded with
placeholder tokens up to the shape's vocabulary, and responses are forced to ``--response-tokens``
tokens (``min_new_tokens``: random weights would stop at a random eos). Rewards are a hash parity of the
text, so groups have non-zero advantages, and every response is scored (``score_all``): the timings
are those of a full step, whatever the model says. Each method trains in its own process, so its peak
memory is its own. The vLLM evaluation row is timed when vLLM is importable.

    python bench/gpu_check.py                                   # Qwen2.5-1.5B shape, bf16, 1,024 tokens
    python bench/gpu_check.py --shape qwen2.5-7b --response-tokens 3072 --batch 8   # 7B layer shapes
    python bench/gpu_check.py --shape tiny --response-tokens 16 --batch 4 --steps 1   # CPU smoke run

The preflight before the paper run (docs/memory.md): on one GPU node, it prints each method's step
time, the ratios OAR-G/GRPO and OAR-P/GRPO beside the paper's 1.4x and 4.2x, and each method's
measured peak memory beside oar.experiment.memory_plan's prediction for the same settings. The real shapes run
on CUDA only: without a CUDA device it stops with an error rather than running on the CPU.
Prints a Markdown table (and writes it with ``--out``), and writes ``calibration.json`` in ``--work``: the
measured times with the shape and lengths they ran at, which ``python -m oar.experiment.cost_plan
--calibration`` turns into sustained FLOP/s and decode bandwidth.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import torch

# Shapes from the models' published config.json files (Qwen2.5-Math-1.5B has Qwen2.5-1.5B's shape).
SHAPES = {
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    # head_dim 32: the smallest vLLM's CPU attention takes, so the same shape runs every backend on CPU.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=None, tie_word_embeddings=True),
}
METHODS = ("grpo", "oar_g", "oar_p")
PAPER_RATIO = {"grpo": 1.0, "oar_g": 1.4, "oar_p": 4.2}  # step time over GRPO's, as the paper reports
PARTS = ("time_generate_s", "time_score_s", "time_update_s", "step_time_s")


def build_model_folder(shape: str, out: Path, max_positions: int) -> Path:
    """A Qwen2 model folder of ``shape`` with random weights (bf16 on disk) and a padded tiny tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oar.models.tiny import build_tiny_tokenizer

    if (out / "config.json").exists():
        return out
    tokenizer = build_tiny_tokenizer()
    tokenizer.clean_up_tokenization_spaces = False
    spec = dict(SHAPES[shape])
    vocab = spec.pop("vocab_size") or len(tokenizer)
    # Placeholder tokens fill the vocabulary, so every id the random model samples decodes to something.
    tokenizer.add_tokens([f"<filler_{i}>" for i in range(vocab - len(tokenizer))])
    config = Qwen2Config(vocab_size=vocab, max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **spec)
    torch.manual_seed(0)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16 (on the GPU when there is one): seconds, not minutes
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def parameter_count(model_dir: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def write_problems(path: Path, count: int) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            a, b = 3 * i + 7, 5 * i + 11
            problem = f"Tom has {a} apples and buys {b} more each day for {i + 2} days. How many apples does he have?"
            handle.write(json.dumps({"id": f"check/{i}", "problem": problem, "answer": str(a + b * (i + 2))}) + "\n")
    return path


def hash_parity_reward(completions, **kwargs) -> list[float]:
    """Varied, deterministic rewards for a random model (it never answers), so advantages are non-zero."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(zlib.crc32(t.encode()) % 2) for t in texts]


def train_one(settings: dict, out_dir: Path, response_tokens: int) -> None:
    """``oar.training.run``'s trainer and metrics file, with forced response lengths and the parity reward."""
    from oar.training.grpo_trainer import OARTrainer
    from oar.training.run import MetricsFile, build_config, load_problems, resolve_settings, training_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = resolve_settings(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=getattr(torch, settings["model_dtype"]))
    config = build_config(settings, out_dir / "checkpoints")
    config.generation_kwargs = {"min_new_tokens": response_tokens}
    trainer = OARTrainer(model=model, reward_funcs=hash_parity_reward, args=config, processing_class=tokenizer,
                         train_dataset=training_dataset(load_problems(settings["train_file"], None), tokenizer),
                         callbacks=[MetricsFile(out_dir / "metrics.jsonl")])
    trainer.train()


def time_method(args, method: str, model: Path, problems: Path, dtype: str) -> dict:
    out = args.work / method
    metrics = out / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    settings = {
        "run_id": f"gpu-check-{method}", "method": method, "seed": 0, "model": str(model),
        "train_file": str(problems), "model_dtype": dtype,
        "oar": {"score_all": True, "window_tokens": args.window_tokens},
        "trainer": {"max_steps": args.steps, "num_generations": args.num_generations,
                    "per_device_train_batch_size": args.batch, "max_completion_length": args.response_tokens,
                    "save_steps": 10**6, "gradient_checkpointing": args.gradient_checkpointing},
    }
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--one-method", json.dumps(settings), str(out),
                    "--response-tokens", str(args.response_tokens), "--threads", str(args.threads)], check=True)
    print(f"{method}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    if len(lines) != args.steps:
        raise RuntimeError(f"{metrics}: {len(lines)} steps logged, expected {args.steps}")
    steady = lines[1:] or lines  # step 1 carries one-off warm-up
    row = {part: statistics.median(line[part] or 0.0 for line in steady) for part in PARTS}
    row["completion_length"] = statistics.mean(line["completion_length"] for line in lines)
    row["frac_scored"] = statistics.mean(line["frac_scored"] for line in lines)
    row["peak_memory_mb"] = max(line["peak_memory_mb"] for line in lines)
    print(f"{method}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def time_evaluation(backend: str, model: Path, args, dtype: str) -> dict:
    from oar.evaluation.generation import make_generator
    from oar.prompting import build_prompt

    problems = [json.loads(line)["problem"] for line in (args.work / "problems.jsonl").read_text().splitlines()]
    extra = {"max_model_len": 256 + args.response_tokens} if backend == "vllm" else {}
    if backend == "vllm" and torch.cuda.is_available():
        extra["gpu_memory_utilization"] = 0.5
    started = time.perf_counter()
    generator = make_generator(backend, model, batch_size=args.eval_batch, dtype=dtype, **extra)
    load_s = time.perf_counter() - started
    prompts = [build_prompt(p, generator.tokenizer) for p in problems[: args.eval_batch]]
    generator.generate(prompts[:1], max_new_tokens=4)  # warm-up (kernels, graphs)
    started = time.perf_counter()
    outputs = generator.generate(prompts, temperature=0.6, top_p=0.95, max_new_tokens=args.response_tokens, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(o.num_tokens for per_prompt in outputs for o in per_prompt)
    return {"load_s": load_s, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def predicted_peaks_mib(args, model: Path, dtype: str) -> dict[str, float]:
    """oar.experiment.memory_plan's per-method peak (the largest of its phases) for this check's settings."""
    from transformers import AutoConfig

    from oar.experiment import memory_plan

    shape = memory_plan.shape_of(AutoConfig.from_pretrained(model))
    settings = {"model_dtype": dtype, "oar": {"chunk_tokens": 512, "window_tokens": args.window_tokens},
                "trainer": {"per_device_train_batch_size": args.batch, "max_completion_length": args.response_tokens,
                            "gradient_checkpointing": args.gradient_checkpointing, "use_vllm": False,
                            "gradient_accumulation_steps": 1}}
    phases = memory_plan.plan_model("check", {"launcher": "python"}, settings, shape, PROMPT_TOKENS)
    reserve = memory_plan.RESERVE_GB * memory_plan.GB
    mib = {p.phase: (sum(p.parts.values()) - reserve) / 2**20 for p in phases}
    return {"grpo": mib["update"], "oar_g": max(mib["update"], mib["scoring OAR-G"]),
            "oar_p": max(mib["update"], mib["scoring OAR-P"])}


PROMPT_TOKENS = 64  # the check's problems are one-line word problems in the tiny tokenizer (an estimate)


def calibration_record(args, model: Path, device: str, dtype: str, rows: dict, evaluations: dict) -> dict:
    """What ``oar.experiment.cost_plan --calibration`` reads: the measured step times of each method with the
    shape and lengths they ran at, from which it derives the sustained FLOP rate of the update and the
    decode bandwidth (the plan's work for these settings over these times)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    shape = {k: getattr(config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads", "vocab_size",
                                             "tie_word_embeddings")}
    return {
        "device": device,
        "memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9 if device != "CPU" else None,
        "dtype": dtype,
        "shape_name": args.shape,
        "shape": shape,
        "parameters": parameter_count(model),
        "prompt_tokens": PROMPT_TOKENS,
        "response_tokens": args.response_tokens,
        "batch": args.batch,
        "num_generations": args.num_generations,
        "gradient_checkpointing": args.gradient_checkpointing,
        "score_all": True,
        "oar_p_window_tokens": args.window_tokens,
        "methods": {m: {"generate_s": r["time_generate_s"], "score_s": r["time_score_s"],
                        "update_s": r["time_update_s"], "step_s": r["step_time_s"],
                        "completion_length": r["completion_length"], "frac_scored": r["frac_scored"],
                        "peak_memory_mb": r["peak_memory_mb"]} for m, r in rows.items()},
        "evaluation": {b: {"tokens_per_s": e["tokens_per_s"], "prompts": args.eval_batch,
                           "max_new_tokens": args.response_tokens} for b, e in evaluations.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8, help="completions per step (per process)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="steps per method; step 1 is left out of medians")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="weights: auto = bfloat16 on CUDA (with bf16 autocast), float32 on CPU")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--window-tokens", type=int, default=0,
                        help="OAR-P with a local window of this many tokens (training.oar.window_tokens; 0: exact)")
    parser.add_argument("--eval-batch", type=int, default=32, help="prompts in the evaluation timing")
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluation rows")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        help="default: cuda, cpu for --shape tiny; cuda without a CUDA device is an error")
    parser.add_argument("--work", type=Path, default=Path("results/bench/gpu_check"))
    parser.add_argument("--out", type=Path, help="Markdown table to write")
    parser.add_argument("--one-method", nargs=2, metavar=("SETTINGS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_method:
        train_one(json.loads(args.one_method[0]), Path(args.one_method[1]), args.response_tokens)
        return
    if args.batch % args.num_generations:
        parser.error("--batch must be a multiple of --num-generations")
    if args.window_tokens < 0:
        parser.error("--window-tokens must be >= 0 (0: exact OAR-P)")
    device_kind = args.device or ("cpu" if args.shape == "tiny" else "cuda")
    if device_kind == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda (the default for --shape {args.shape}): no CUDA device is visible "
                     "(torch.cuda.is_available() is False); run it on a GPU node, or --shape tiny --device cpu")
    if device_kind == "cpu" and torch.cuda.is_available():
        parser.error("--device cpu on a machine with CUDA: the trainer would use the GPU; hide it with "
                     "CUDA_VISIBLE_DEVICES=''")
    on_gpu = device_kind == "cuda"
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model = build_model_folder(args.shape, args.work / f"model-{args.shape}", 256 + args.response_tokens)
    build_s = time.perf_counter() - started
    problems = write_problems(args.work / "problems.jsonl", max(args.batch * args.steps, args.eval_batch))

    device = torch.cuda.get_device_name() if on_gpu else "CPU"
    rows = {method: time_method(args, method, model, problems, dtype) for method in args.methods}
    lines = [
        f"GPU check: {args.shape} shape ({parameter_count(model) / 1e6:,.1f} M parameters, random weights) on "
        f"{device}, {dtype} weights{' + bf16 autocast' if on_gpu else ''}; {args.batch} completions x "
        f"{args.response_tokens} tokens (forced) per step, G = {args.num_generations}, "
        "every response scored by the OAR methods"
        + (f", OAR-P with a local window of {args.window_tokens} tokens" if args.window_tokens else "") + "; "
        f"model folder built in {build_s:.0f} s",
        "",
        "| method | generate s | score s | update s | step s | step / GRPO | paper | tokens / response | scored "
        "| peak MiB | predicted MiB |",
        "|" + "---|" * 11,
    ]
    base = rows.get("grpo")
    predicted = predicted_peaks_mib(args, model, dtype)
    for method, r in rows.items():
        ratio = r["step_time_s"] / base["step_time_s"] if base else float("nan")
        # three significant digits: a tiny model's scoring takes milliseconds, a GPU step seconds
        lines.append(f"| {method} | {r['time_generate_s']:.3g} | {r['time_score_s']:.3g} | {r['time_update_s']:.3g} | "
                     f"{r['step_time_s']:.3g} | {ratio:.2f} | {PAPER_RATIO[method]:.1f} | "
                     f"{r['completion_length']:.0f} | "
                     f"{r['frac_scored']:.2f} | {r['peak_memory_mb']:.0f} | {predicted[method]:.0f} |")
    lines.append("\npaper: the paper's step time over GRPO's. predicted: oar.experiment.memory_plan's peak for these "
                 "settings (one process, no vLLM, without its CUDA-context reserve), to compare with the peak on "
                 "CUDA (the allocator's peak); on CPU the peak is the process's resident memory, libraries "
                 "included, and not comparable.")
    evaluations = {}
    if not args.no_eval:
        lines += ["", "| evaluation backend | load s | generate s | tokens | tokens / s |", "|---|---|---|---|---|"]
        for backend in ("transformers", "vllm"):
            if backend == "vllm" and importlib.util.find_spec("vllm") is None:
                lines.append("| vllm | not installed | | | |")
                continue
            e = evaluations[backend] = time_evaluation(backend, model, args, dtype)
            lines.append(f"| {backend} | {e['load_s']:.0f} | {e['seconds']:.1f} | {e['tokens']} | {e['tokens_per_s']:.0f} |")
        lines.append(f"\nEvaluation: {args.eval_batch} prompts, temperature 0.6, top-p 0.95, at most "
                     f"{args.response_tokens} new tokens (random weights stop only at a sampled eos).")
    text = "\n".join(lines) + "\n"
    print(text)
    record = calibration_record(args, model, device, dtype, rows, evaluations)
    (args.work / "calibration.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"calibration for python -m oar.experiment.cost_plan --calibration: {args.work / 'calibration.json'}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
