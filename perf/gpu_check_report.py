"""The GPU preflight's results (``perf/gpu_check.py``): the profile of a scoring call, the achieved rates
of each phase, the table (``gpu_check.md``) and the calibration the cost plan reads (``calibration.json``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from gpu_check_plan import OAR_KEYS, PAPER_RATIO, Row
from harness import sync_counts

LAUNCH_OPS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def profile_summary(prof, calls: int, seconds: float) -> dict:
    """Top operators by device time (CPU time without a GPU), host synchronisations, model calls and
    kernel launches of one profiled scoring call."""
    on_gpu = torch.cuda.is_available()
    events = prof.key_averages()
    attr = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    # operators, not annotations (record_function ranges), runtime calls or the kernels themselves (a
    # kernel's own entry repeats its operator's device time: counted twice, shares and sums go wrong)
    ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and "::" in e.key
           and not e.key.startswith(("cuda", "cu"))]
    top = sorted((e for e in ops if getattr(e, attr, 0) > 0), key=lambda e: -getattr(e, attr))[:10]
    total = sum(getattr(e, attr, 0) for e in ops) or 1
    syncs = sync_counts(events)
    launches = sum(e.count for e in events if e.key in LAUNCH_OPS)
    # device time within the call (its kernels, summed): the rest of ``seconds`` the device sat idle
    device_s = total / 1e6 if on_gpu and total > 1 else None
    return {"seconds": seconds, "device_s": device_s, "model_calls": calls,
            "synchronisations": sum(syncs.values()), "by_op": syncs,
            "kernel_launches": launches if on_gpu else None,
            "launches_per_call": launches / calls if on_gpu and calls else None,
            "time_kind": "device" if on_gpu else "cpu",
            "top": [{"op": e.key, "ms": getattr(e, attr) / 1e3, "share": getattr(e, attr) / total, "count": e.count}
                    for e in top]}


def parameter_count(model_dir: Path) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return sum(p.numel() for p in model.parameters())


def phase_flops(r: dict, shape, oar: dict, args) -> tuple[float, float]:
    """(scoring FLOPs, update FLOPs) of one steady step of result row ``r`` by the cost plan's counters, at
    the row's measured prompt and completion lengths (the calibration's own reading of a row): what its
    achieved TFLOP/s are computed from."""
    from oar.planning.calibration import check_scoring_work
    from oar.planning.cost_model import SCHEDULE, scaled, update_work

    update = scaled(update_work(shape, r["prompt_tokens"], r["completion_length"], args.batch,
                                args.gradient_checkpointing, 0), args.batch)
    if r["method"] == "grpo":
        return 0.0, update.flops
    row = {**r, **{k: oar[k] for k in ("chunk_tokens", "span_tokens", "probe")}, "batch": args.batch,
           "num_generations": args.num_generations}
    return check_scoring_work(shape, row, SCHEDULE).flops, update.flops


def phase_rates(r: dict, args) -> dict:
    """Achieved TFLOP/s of scoring and of the update (the cost plan's FLOPs over the measured seconds)."""
    score, update = phase_flops(r, args.flop_shape, args.oar, args)
    return {"score_tflops": score / r["score_s"] / 1e12 if score and r["score_s"] > 0 else None,
            "update_tflops": update / r["update_s"] / 1e12 if r["update_s"] > 0 else None,
            "score_flops": score, "update_flops": update}


def calibration_record(args, model: Path, device: str, dtype: str, oar: dict, results: dict, evaluations: dict,
                       planned: list[Row], complete: bool) -> dict:
    """What ``oar.planning.cost_plan --calibration`` reads: every finished row with the settings it ran
    with; ``complete`` is false until the last planned row has finished."""
    from transformers import AutoConfig

    from oar.planning.cost_model import SCHEDULE

    config = AutoConfig.from_pretrained(model)
    shape = {k: getattr(config, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                             "num_attention_heads", "num_key_value_heads", "vocab_size",
                                             "tie_word_embeddings")}
    rows = []
    for name, r in results.items():
        rows.append({**{k: v for k, v in r.items() if k not in ("profile", "profiled_tokens", "steady_profile")},
                     "batch": args.batch,
                     "num_generations": args.num_generations, "chunk_tokens": oar["chunk_tokens"],
                     "grad_chunk_tokens": oar["grad_chunk_tokens"], "grad_prompt": oar["grad_prompt"],
                     "span_tokens": oar["span_tokens"], "probe": oar["probe"], "scorer_schedule": SCHEDULE,
                     "generation_backend": "transformers", "generation_attention": "no_cudnn",
                     "gradient_checkpointing": args.gradient_checkpointing,
                     **phase_rates(r, args),
                     "scoring_attention": r.get("scoring_attention") or oar["scoring_attention"],
                     "row": name})
    return {
        "complete": complete,
        "rows_planned": [name for r in planned for name, _ in r.planned_parts()],
        "rows_tried_beyond_plan": [name for r in planned for name, t in r.parts() if t in r.tried],
        "device": device,
        "memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9 if device != "CPU" else None,
        "dtype": dtype,
        "autocast": "bf16" if device != "CPU" else None,
        "shape_name": args.shape,
        "shape": shape,
        "parameters": parameter_count(model),
        "batch": args.batch,
        "num_generations": args.num_generations,
        "steps": args.steps,
        "vllm_importable": importlib.util.find_spec("vllm") is not None,
        "torch": torch.__version__,
        "rows": rows,
        "profiles": {r["process"]: {**r["profile"], "tokens": r["profiled_tokens"]}
                     for r in results.values() if "profile" in r},
        "steady_profiles": {name: r["steady_profile"] for name, r in results.items() if "steady_profile" in r},
        "evaluation": {b: {"tokens_per_s": e["tokens_per_s"], "prompts": args.eval_batch,
                           "max_new_tokens": args.response_tokens}
                       for b, e in evaluations.items() if e is not None},  # None: vLLM not importable
    }


def report(args, device: str, dtype: str, oar: dict, where: dict, results: dict, planned: list[Row],
           predicted: dict, build_s: float, said: list[str], evaluations: dict, complete: bool) -> str:
    vllm = importlib.util.find_spec("vllm") is not None
    head = (f"GPU check: {args.shape} shape (random weights) on {device}, {dtype} weights"
            f"{' + bf16 autocast' if device != 'CPU' else ''}; {args.batch} completions per step (forced "
            f"lengths), G = {args.num_generations}, every response scored ({'; '.join(args.settings_said)}); "
            "scorer settings "
            + ", ".join(f"{k} {oar[k]} ({where[k]})" for k in OAR_KEYS)
            + f"; generation: transformers generate (vLLM {'importable' if vllm else 'not importable'}); "
            f"model folder built in {build_s:.0f} s")
    wanted = sum(len(r.planned_parts()) for r in planned)
    state = "" if complete else (f"\n\n**Partial: {len(results)} of {wanted} planned rows finished** "
                                 "(the rest did not run or were cut off).")
    lines = [head + state, "",
             "| row | steady steps | generate s | score s | update s | step s | first step s | step / GRPO | paper "
             "| scored | score calls | peak MiB | predicted MiB | planned s | process s | score TFLOP/s "
             "| update TFLOP/s |",
             "|" + "---|" * 17]
    goals = []
    for row in planned:
        for name, tokens in row.parts():
            r = results.get(name)
            label = row.label(tokens)
            if r is None:
                state = "not finished in the time left (tried beyond the plan)" if tokens in row.tried else "not run"
                lines.append(f"| {label} | | | | | | | | {PAPER_RATIO[row.method]:.1f} | | | | "
                             f"{predicted.get(name, float('nan')):.0f} | {row.planned_s:.0f} | {state} | | |")
                continue
            if tokens in row.tried:
                label += " (beyond the plan)"
            rates = phase_rates(r, args)
            base = next((b for b in results.values() if b["method"] == "grpo"
                         and b["completion_length"] == r["completion_length"]), None)
            ratio = r["step_s"] / base["step_s"] if base else float("nan")
            generate = f"{r['generate_s']:.3g}" + (" (first at this length)" if r["generate_first_at_length"] else "")
            lines.append(f"| {label} | {r['steady_steps']} of {r['steps']} | {generate} | {r['score_s']:.3g} | "
                         f"{r['update_s']:.3g} | {r['step_s']:.3g} | {r['first_step_s']:.3g} | {ratio:.2f} | "
                         f"{PAPER_RATIO[row.method]:.1f} | {r['frac_scored']:.2f} | {r['score_forwards']:.0f} | "
                         f"{r['peak_memory_mb']:.0f} | {predicted.get(name, float('nan')):.0f} | {row.planned_s:.0f} | "
                         f"{r['process_s']:.0f} | {_tflops(rates['score_tflops'])} | "
                         f"{_tflops(rates['update_tflops'])} |")
            if r["method"] != "grpo" and rates["score_tflops"] and rates["update_tflops"]:
                goals.append(f"{label}: scoring at {rates['score_tflops'] / rates['update_tflops']:.2f} of the "
                             f"update's rate, {r['score_s'] / r['update_s']:.2f}x its time")
    lines.append("\nSteady figures: the median over the steps after the first. update: from the end of scoring to "
                 "the end of the optimizer step, device synchronised. peak: the largest steady step's (AdamW's state "
                 "resident); predicted: oar.planning.memory_plan's (one process, no vLLM, without its CUDA-context "
                 "reserve); on CPU the peak is the process's resident memory, libraries included, and not comparable. "
                 "paper: the paper's step time over GRPO's. planned: oar.planning.cost_plan with "
                 f"{args.calibration_label}. TFLOP/s: the cost plan's FLOPs of the phase (oar.planning.cost_model, "
                 "at the row's prompt and completion lengths) over its measured seconds.")
    if goals:
        lines += ["", "Scoring against the update (the same responses): " + "; ".join(goals) + "."]
    if said:
        lines += ["", "Budget: " + "; ".join(said) + "."]
    profiles = {f"{r['process']} ({r['profiled_tokens']:,} tokens)": r["profile"] for r in results.values()
                if "profile" in r}
    profiles |= {f"{name}, steady (the last step's call repeated)": r["steady_profile"] for name, r in results.items()
                 if "steady_profile" in r}
    if profiles:
        lines += ["", "| scoring call profiled (first step) | s | device busy s | model calls | synchronisations "
                  "| kernel launches | launches / call | top operators (share of "
                  + ("device" if device != "CPU" else "CPU") + " time) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, p in profiles.items():
            top = ", ".join(f"{t['op']} {t['share']:.0%}" for t in p["top"][:5])
            launches = "n/a" if p["kernel_launches"] is None else f"{p['kernel_launches']}"
            per = "n/a" if p["launches_per_call"] is None else f"{p['launches_per_call']:.0f}"
            busy = "n/a" if p.get("device_s") is None else f"{p['device_s']:.3g}"
            lines.append(f"| {name} | {p['seconds']:.3g} | {busy} | {p['model_calls']} | {p['synchronisations']} "
                         f"({', '.join(f'{k.split(chr(58))[-1]} {v}' for k, v in p['by_op'].items())}) | {launches} | "
                         f"{per} | {top} |")
        lines.append("\nSynchronisations: the operators that can make the host wait for the device (aten::item, "
                     "aten::_local_scalar_dense, aten::nonzero), on host and device tensors alike: an upper bound "
                     "(the trainer's probe building reads host copies of the batch's ids).")
    if evaluations:
        lines += ["", "| evaluation backend | load s | generate s | tokens | tokens / s |", "|---|---|---|---|---|"]
        for backend, e in evaluations.items():
            if e is None:
                lines.append(f"| {backend} | not installed | | | |")
            else:
                lines.append(f"| {backend} | {e['load_s']:.0f} | {e['seconds']:.1f} | {e['tokens']} | "
                             f"{e['tokens_per_s']:.0f} |")
    return "\n".join(lines) + "\n"


def _tflops(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"

