r"""Evaluate one model folder on one prepared benchmark: ``samples.jsonl`` + ``summary.json``.

Shell::

    python workflow_scripts/evaluate.py --model results/models/smollm2 \
        --benchmark-file results/data/gsm8k_test.jsonl --out-dir results/eval/base/gsm8k_test \
        --max-new-tokens 384 --limit 50 --batch-size 16

Sampling defaults come from the benchmark's registry entry (its name is the file name without
``.jsonl`` unless ``--benchmark`` says otherwise): GSM8K and MATH500 greedy (n = 1); AIME24, AIME25 and
AMC23 16 samples at temperature 0.6, top-p 0.95. ``--n 1`` without ``--temperature`` is greedy; ``--n k``
(k > 1) without ``--temperature`` samples at 0.6 / 0.95.

Resumable: rerunning the same command continues from the problems already in ``samples.jsonl``; with
every problem done it only (re)writes ``summary.json``, loading no model. ``summary.json`` is written
atomically and last.

Snakemake (``script:``): named input ``model`` and ``benchmark_file``, output ``summary`` (the
evaluation folder is its parent unless a param ``out_dir`` is given) and params named like the options
become the same options. Declare only ``summary.json`` as the rule's output: Snakemake deletes the
outputs of a failed job, and ``samples.jsonl`` is what a rerun resumes from.
"""

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _script_io import checksum, provenance, run_cli, script_parser  # noqa: E402

from oar.data.catalogue import MEAN_OF_16, eval_defaults  # noqa: E402
from oar.data.data_error import DataError  # noqa: E402
from oar.data.records import read_records  # noqa: E402
from oar.evaluation.benchmark import SUMMARY_FILE, EvalConfigMismatch, EvalSettings, run_generation, summarize  # noqa: E402
from oar.evaluation.generation import BACKENDS, make_generator  # noqa: E402
from oar.files import atomic_write_json, sha256_file  # noqa: E402

FLAGS = ("no_fallback_last_number", "no_answer_statement", "quiet", "enforce_eager")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = script_parser(__doc__, "Evaluate one model folder on one prepared benchmark.")
    p.add_argument("--model", required=True, help="model folder (from oar.models.sources)")
    p.add_argument("--benchmark-file", required=True, help="prepared benchmark, results/data/<name>.jsonl")
    p.add_argument("--benchmark", help="benchmark name for the sampling defaults (default: the file name)")
    p.add_argument("--out-dir", help="evaluation folder (default: the folder of --summary)")
    p.add_argument("--summary", help="summary file (default: <out-dir>/summary.json)")
    p.add_argument("--n", type=int, help="samples per problem")
    p.add_argument("--temperature", type=float, help="0 = greedy")
    p.add_argument("--top-p", type=float, help="nucleus sampling (default: the benchmark's)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="token budget of one answer")
    p.add_argument("--limit", type=int, help="evaluate the first N problems")
    p.add_argument("--backend", default="transformers", choices=BACKENDS, help="generation backend")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per generate call (transformers)")
    p.add_argument("--chunk-size", type=int,
                   help="problems per generate call (default: batch-size // n for transformers, 256 for vllm)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                   help="vllm: share of GPU memory vLLM reserves "
                        "(vLLM's own default, 0.9, fails beside another process)")
    p.add_argument("--enforce-eager", action="store_true", help="vllm: no CUDA graphs (less memory, faster start)")
    p.add_argument("--max-model-len", type=int,
                   help="vllm: context window, prompt + max-new-tokens (default: the model's own)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--chat", default="auto", choices=("auto", "yes", "no"),
                   help="use the tokenizer's chat template (auto: when it has one)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--no-answer-statement", action="store_true",
                   help="a response without \\boxed{} does not answer by its last 'The answer is ...' statement")
    p.add_argument("--no-fallback-last-number", action="store_true",
                   help="a response without \\boxed{} or statement has no answer "
                        "(default: its last number is the answer)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the 95%% interval")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--replace-stale", action="store_true",
                   help="samples made by another model or other settings are deleted and generated again "
                        "(default: stop naming the setting)")
    args = p.parse_args(argv)
    if not 0 < args.gpu_memory_utilization <= 1:
        p.error(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.out_dir is None and args.summary is None:
        p.error("give --out-dir or --summary")
    args.out_dir = args.out_dir or str(Path(args.summary).parent)
    args.summary = args.summary or str(Path(args.out_dir) / SUMMARY_FILE)
    args.benchmark = args.benchmark or Path(args.benchmark_file).name.removesuffix(".jsonl")
    defaults = eval_defaults(args.benchmark)
    if args.n is None:
        args.n = defaults.n
    if args.temperature is None:
        if args.n == 1:
            args.temperature = 0.0
        else:
            args.temperature = defaults.temperature if defaults.temperature > 0 else MEAN_OF_16.temperature
    if args.top_p is None:
        args.top_p = 1.0 if args.temperature == 0 else (defaults.top_p if defaults.temperature > 0
                                                        else MEAN_OF_16.top_p)
    if args.chunk_size is None:
        args.chunk_size = max(1, args.batch_size // args.n) if args.backend != "vllm" else 256
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    problems = read_records(args.benchmark_file)
    if args.limit is not None:
        problems = problems[: args.limit]
    settings = EvalSettings(n=args.n, temperature=args.temperature, top_p=args.top_p,
                            max_new_tokens=args.max_new_tokens, seed=args.seed, chunk_size=args.chunk_size,
                            fallback_last_number=not args.no_fallback_last_number,
                            answer_statement=not args.no_answer_statement)
    model_sums = checksum(args.model)
    if model_sums is None:
        raise FileNotFoundError(f"model folder {args.model} does not exist")
    chat = {"auto": None, "yes": True, "no": False}[args.chat]
    run_config = {
        "model": args.model,
        "model_sha256": hashlib.sha256(json.dumps(model_sums, sort_keys=True).encode()).hexdigest(),
        "benchmark_sha256": sha256_file(args.benchmark_file),
        "backend": args.backend,
        "dtype": args.dtype,
        "chat": args.chat,
    }
    vllm_options = (dict(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=args.enforce_eager,
                         max_model_len=args.max_model_len)
                    if args.backend == "vllm" else {})
    samples, stats = run_generation(
        problems, args.out_dir,
        lambda: make_generator(args.backend, args.model, batch_size=args.batch_size, device=args.device,
                               dtype=args.dtype, seed=args.seed, chat=chat, **vllm_options),
        settings, run_config=run_config, progress=not args.quiet, replace_stale=args.replace_stale,
    )
    summary = {
        "benchmark": args.benchmark,
        "model": args.model,
        "backend": args.backend,
        "n": args.n,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "limit": args.limit,
        **summarize(samples, args.n, n_boot=args.n_boot, seed=args.seed),
        "this_run": {**vars(stats), "wall_s": time.perf_counter() - started},
        "provenance": provenance(vars(args), {"benchmark_file": args.benchmark_file}, seed=args.seed)
        | {"model_checksums": model_sums},
    }
    atomic_write_json(args.summary, summary)
    ci = summary["pass@1_ci95"]
    tps = summary["tokens_per_s"]
    print(f"{args.benchmark}: pass@1 = {summary['pass@1']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] over "
          f"{summary['num_problems']} problems x {args.n}; {summary['unparsable']} unparsable; "
          f"{summary['tokens_generated']} tokens" + (f" at {tps:.1f} tokens/s" if tps else "")
          + f" -> {args.summary}")
    return summary


if __name__ == "__main__":
    run_cli(main, globals(), FLAGS, (DataError, EvalConfigMismatch, FileNotFoundError))
