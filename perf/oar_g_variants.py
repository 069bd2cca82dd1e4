"""OAR-G's scoring call against the update on the same tokens, with the variants of how it runs, in one
process on one device: the preflight's question "why is OAR-G's scoring slower than the update?" asked
where each variant sees the same machine, the same model and the same responses.

A model of ``--shape`` (perf/gpu_check.py's shapes) with random weights, ``--batch`` probes of
``--prompt-tokens`` + ``--response-tokens`` random tokens with a one-token boxed answer; under bf16 autocast
on a GPU as the trainer scores. Each variant is timed, device synchronised, as the median of ``--repeats``
calls after one warm-up call, the variants interleaved call by call so that drift hits all alike:

- ``update``: a training forward over prompt + response with gradients on the weights, a per-token
  log-probability loss, the backward and an AdamW step (what TRL's update does, less its bookkeeping);
- ``oar_g``: ``score("oar_g", ...)`` with ``--chunk-tokens`` (and ``--grad-chunk-tokens``) as configured;
- ``oar_g, evened micro-batches``: the same with the micro-batches evened out (eight 1,040-token probes in
  8,192 tokens go 4 + 4) rather than filled in turn as the scorers group them (7 + 1);
- ``oar_g, one micro-batch``: every probe in one micro-batch with grad (a budget of all the tokens);
- ``oar_g, torch's attention kernels``: ``scoring_attention: torch_default`` (cuDNN's on Hopper, whose
  per-shape graphs are built in the warm-up call and cached: its kernels' speed without the build);
- ``oar_g, prompt inline``: ``grad_prompt: inline``, every probe whole (prompt included) in right-padded
  rows with no attention mask, so that SDPA runs causal attention alone (flash attention on a GPU) rather
  than the memory-efficient kernel the cached prompt's padding mask leaves it, its micro-batches evened
  out as that layout groups them; the same filled in turn, and in one micro-batch;
- OAR-G's phases (``--phases``), both ways of running the prompt: the device time of the named regions
  of one warm call under torch.profiler (inputs, prefix, clean forward, noisy forward). The backward's
  kernels are launched by autograd's own thread, outside the region that names it, so its figure there
  is about 0 on a GPU: read it as the call's time less the rest.

    python perf/oar_g_variants.py --out results/perf/oar_g_variants.json         # 1.5B shape, one GPU
    python perf/oar_g_variants.py --shape tiny --response-tokens 64 --device cpu  # the same on a CPU
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace

import torch

from gpu_check import SHAPES
from harness import add_out, add_repeats, add_threads, markdown_table
from oar.files import atomic_write_json
from oar.method import gradient_scorers
from oar.method.importance import score
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import even_micro_batches, micro_batches


def build_model(shape: str, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = dict(SHAPES[shape])
    spec["vocab_size"] = spec["vocab_size"] or 512
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(max_position_embeddings=8192, **spec))
    finally:
        torch.set_default_dtype(default)
    return model.train()


def build_probes(batch: int, prompt: int, response: int, vocab: int) -> list[Probe]:
    rng = random.Random(0)
    shared = tuple(rng.randrange(10, vocab) for _ in range(prompt))  # one group: one prompt
    conclude = tuple(rng.randrange(10, vocab) for _ in range(12))
    return [Probe(prompt_ids=shared, response_ids=tuple(rng.randrange(10, vocab) for _ in range(response)),
                  reasoning_len=response - 4, conclude_ids=conclude, answer_ids=(rng.randrange(10, vocab),),
                  answer_kind="boxed", pad_id=0) for _ in range(batch)]


def update_step(model, optimizer, probes: list[Probe], device: str):
    """One update on the probes' prompt + response: forward with grad, log-probability loss, backward,
    AdamW's step, zero_grad."""
    ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids) for p in probes], device=device)
    start = len(probes[0].prompt_ids)
    with _autocast(device):
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, start - 1 : -1]
    logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, start:, None]).squeeze(-1)
    (-logprobs.mean()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _autocast(device: str):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def variants(model, optimizer, probes, args, device):
    """(name, call) of every variant; each call runs once and returns nothing."""
    total = sum(len(p.ids("as_mean")) for p in probes)
    config = ScorerConfig(probe="as_mean", noise_sigma=1e-3, chunk_tokens=args.chunk_tokens,
                          grad_chunk_tokens=args.grad_chunk_tokens)

    def scoring(cfg, cached=micro_batches, inline=even_micro_batches):
        """The scoring call with the cached prompt's probes grouped by ``cached``, the inline prompt's by
        ``inline``."""
        def call():
            gradient_scorers.micro_batches, gradient_scorers.even_micro_batches = cached, inline
            try:
                with _autocast(device):
                    score("oar_g", model, probes, cfg)
            finally:
                gradient_scorers.micro_batches, gradient_scorers.even_micro_batches = micro_batches, even_micro_batches
        return call

    return [
        ("update", lambda: update_step(model, optimizer, probes, device)),
        ("oar_g", scoring(config)),
        ("oar_g, evened micro-batches", scoring(config, cached=even_micro_batches)),
        ("oar_g, one micro-batch", scoring(replace(config, grad_chunk_tokens=total))),
        ("oar_g, torch's attention kernels", scoring(replace(config, scoring_attention="torch_default"))),
        ("oar_g, prompt inline", scoring(replace(config, grad_prompt="inline"))),
        ("oar_g, prompt inline, filled in turn", scoring(replace(config, grad_prompt="inline"),
                                                         inline=micro_batches)),
        ("oar_g, prompt inline, one micro-batch", scoring(replace(config, grad_prompt="inline",
                                                                  grad_chunk_tokens=total))),
    ]


def phase_seconds(model, probes, args, device, grad_prompt: str) -> dict[str, float]:
    """Device (CPU) seconds of each named region of OAR-G's scoring, from torch.profiler over one warm call."""
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                          if device == "cuda" else [])
    config = ScorerConfig(probe="as_mean", noise_sigma=1e-3, chunk_tokens=args.chunk_tokens,
                          grad_chunk_tokens=args.grad_chunk_tokens, grad_prompt=grad_prompt)
    with torch.profiler.profile(activities=activities) as prof, _autocast(device):
        score("oar_g", model, probes, config)
        _sync(device)
    attr = "device_time_total" if device == "cuda" else "cpu_time_total"
    return {e.key.split(":", 1)[1]: getattr(e, attr) / 1e6 for e in prof.key_averages()
            if e.key.startswith("embedding_gradients:")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=93)
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--chunk-tokens", type=int, default=8192)
    parser.add_argument("--grad-chunk-tokens", type=int, default=0)
    parser.add_argument("--phases", action="store_true", help="also OAR-G's phases from one profiled call")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    add_repeats(parser, 5)
    add_threads(parser, 1)
    add_out(parser, "JSON file of the medians")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible; use --device cpu (with --shape tiny)")
    model = build_model(args.shape, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    probes = build_probes(args.batch, args.prompt_tokens, args.response_tokens, model.config.vocab_size)
    calls = variants(model, optimizer, probes, args, device)
    times: dict[str, list[float]] = {name: [] for name, _ in calls}
    for repeat in range(args.repeats + 1):  # the first round warms up (kernels, cuDNN's graphs, AdamW's state)
        for name, call in calls:
            _sync(device)
            started = time.perf_counter()
            call()
            _sync(device)
            if repeat:
                times[name].append(time.perf_counter() - started)
        print(f"round {repeat} done", file=sys.stderr, flush=True)
    medians = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    update = medians["update"]
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU", "torch": torch.__version__,
              "shape": args.shape, "batch": args.batch, "prompt_tokens": args.prompt_tokens,
              "response_tokens": args.response_tokens, "chunk_tokens": args.chunk_tokens,
              "grad_chunk_tokens": args.grad_chunk_tokens, "repeats": args.repeats, "seconds": times,
              "median_s": medians, "over_update": {name: s / update for name, s in medians.items()}}
    if args.phases:
        result["phase_device_s"] = phase_seconds(model, probes, args, device, "cached")
        result["phase_device_s_inline"] = phase_seconds(model, probes, args, device, "inline")
    print(markdown_table(["variant", "median s", "over the update"],
                         [[name, f"{s:.4g}", f"{s / update:.2f}"] for name, s in medians.items()]))
    if args.phases:
        for key, layout in (("phase_device_s", "cached"), ("phase_device_s_inline", "inline")):
            print(f"phases, prompt {layout} (device s of one profiled call): "
                  + ", ".join(f"{k} {v:.3g}" for k, v in result[key].items()))
    if args.out:
        atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
