"""Generation throughput of the transformers backend at several batch sizes.

    python perf/eval_throughput.py --model results/models/smollm2 \
        --benchmark-file results/data/gsm8k_test.jsonl --num-prompts 32 --max-new-tokens 128 \
        --batch-sizes 1 8 32 --repeats 3 --threads 2 --out results/perf/eval_throughput.json

For each batch size the same ``--num-prompts`` prompts (the first problems of the benchmark, built with
the evaluation prompt template) are decoded greedily ``--repeats`` times after one untimed warm-up
batch (``--bs1-prompts`` decodes fewer prompts at batch size 1, where the rate does not depend on
their number and the full set would take long on a CPU). Reported per batch size: generated tokens (each
sequence up to and including its end-of-sequence
token; the padding steps of sequences that finished early are not counted), wall seconds, tokens/s
(median over repeats, plus min and max) and the fraction of sequences that hit ``--max-new-tokens``.
Greedy decoding makes every repeat generate the same tokens, so repeats differ only in time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from harness import add_model, add_out, add_repeats, add_threads
from oar.files import atomic_write_json


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model(p)
    p.add_argument("--benchmark-file", default="results/data/gsm8k_test.jsonl")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    add_repeats(p, 3, "timed runs a batch size")
    p.add_argument("--bs1-prompts", type=int, default=None,
                   help="at batch size 1 decode only the first N prompts (its tokens/s does not depend on N)")
    add_threads(p, None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="auto")
    add_out(p, "write the results as JSON here")
    args = p.parse_args(argv)

    import torch

    from oar.data.records import read_records
    from oar.evaluation.generation import TransformersGenerator
    from oar.prompting import build_prompts

    if args.threads:
        torch.set_num_threads(args.threads)
    problems = read_records(args.benchmark_file)[: args.num_prompts]
    gen = TransformersGenerator(args.model, batch_size=max(args.batch_sizes), device=args.device, dtype=args.dtype)
    prompts = build_prompts([x["problem"] for x in problems], gen.tokenizer)
    gen.batch_size = min(args.batch_sizes)
    gen.generate(prompts[:1], max_new_tokens=8)  # warm-up (allocations, kernels)

    results = []
    for bs in args.batch_sizes:
        gen.batch_size = bs
        walls, tokens, truncated = [], None, None
        batch_prompts = prompts[: args.bs1_prompts] if bs == 1 and args.bs1_prompts else prompts
        for r in range(args.repeats):
            start = time.perf_counter()
            outs = gen.generate(batch_prompts, n=1, temperature=0.0, max_new_tokens=args.max_new_tokens)
            walls.append(time.perf_counter() - start)
            tokens = sum(o[0].num_tokens for o in outs)
            truncated = sum(o[0].finish_reason == "length" for o in outs) / len(outs)
            print(f"batch {bs:>3} repeat {r}: {tokens} tokens in {walls[-1]:.1f} s = {tokens / walls[-1]:.1f} tokens/s",
                  flush=True)
        rates = [tokens / w for w in walls]
        results.append({
            "batch_size": bs, "prompts": len(batch_prompts), "tokens": tokens, "wall_s": walls,
            "tokens_per_s_median": statistics.median(rates),
            "tokens_per_s_min": min(rates), "tokens_per_s_max": max(rates), "truncated_fraction": truncated,
        })
    report = {
        "model": args.model, "benchmark_file": args.benchmark_file, "num_prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "decoding": "greedy",
        "device": gen.device, "dtype": str(gen.dtype), "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "load_average_at_end": os.getloadavg(), "platform": platform.platform(),
        "torch": torch.__version__, "results": results,
    }
    print("\nbatch  tokens/s (median, min-max)")
    for r in results:
        print(f"{r['batch_size']:>5}  {r['tokens_per_s_median']:.1f} "
              f"({r['tokens_per_s_min']:.1f}-{r['tokens_per_s_max']:.1f})")
    if args.out:
        atomic_write_json(args.out, report)
    return report


if __name__ == "__main__":
    sys.exit(main() and 0)
