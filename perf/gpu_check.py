"""GPU preflight: where every second of a GRPO, OAR-G and OAR-P step goes, on models of real shape.

Made for a CUDA machine with no network and no room for weights: each model is built from a shape with
random weights (nothing to download or carry), the tokenizer is the tiny test tokenizer padded with
placeholder tokens up to the shape's vocabulary, and responses are forced to the row's length
(``min_new_tokens``: random weights would stop at a random eos). Rewards are a hash parity of the text,
so groups have non-zero advantages, and every response is scored (``score_all``): the timings are those
of a full step, whatever the model says. Each row trains in its own process, so its peak memory is its own.

    python perf/gpu_check.py --budget-s 600     # the 7B rows, exact OAR-P first, then the 1.5B rows in what is left
    python perf/gpu_check.py --plan-only        # print the plan and stop
    python perf/gpu_check.py --shape qwen2.5-7b --methods oar_p   # one shape's rows
    python perf/gpu_check.py --shape tiny --response-tokens 16 --batch 4 --num-generations 2   # CPU smoke run

It measures the paper config's settings where they fit one GPU (``perf/gpu_check_plan.py``): the scorer
settings of the shape's model (an option that contradicts the config stops with an error naming the key),
gradient checkpointing and the per-device micro-batch as the config sets them (the largest micro-batch the
memory plan fits where the config's does not, said so; ``--batch`` and ``--[no-]gradient-checkpointing``
measure other settings, and say so). Per row:

- per step, with the device synchronised at every boundary: generation (transformers' ``generate``,
  recorded as the row's backend), scoring, and the update timed to completion (loss, backward, clipping,
  AdamW's step and ``zero_grad``: from the end of scoring to transformers' ``on_step_end``, which TRL's own
  step timer stops before); the first step (the process's warm-up, and the profiled scoring call) is kept
  out of the steady figures, which are the median of the later steps;
- the peak memory of a steady step (AdamW's state resident), beside ``oar.planning.memory_plan``'s;
- per scorer, a profile of the first step's scoring call (``torch.profiler``): the operators with the
  most device time (CPU time on a CPU), the device's busy seconds, host synchronisations (``aten::item``,
  ``aten::_local_scalar_dense``, ``aten::nonzero``), model calls and kernel launches per call;
  ``--profile-steady`` also profiles a scorer's last scoring call, repeated warm on the same batch;
- whether vLLM was importable (the evaluation rows, ``--eval``, time it when it is).

No checkpoint is written (``save_strategy: no``). The table (``--out``, and ``gpu_check.md`` in ``--work``)
and ``calibration.json`` (a shape after the first: in ``--work``/<shape>/) are rewritten after every row,
atomically, marked partial until the last row: a run cut off keeps its finished rows and leaves no
complete-looking file. ``python -m oar.planning.cost_plan --calibration`` reads them.

``--budget-s`` plans every row with ``oar.planning.cost_plan`` calibrated by ``--calibration`` (the H200
rows in perf/calibration by default): a row that does not fit what is left runs with fewer steps (at least
2) or shorter responses (down to 256 tokens), or is skipped, and the plan says which. The real shapes run on
CUDA only: without a CUDA device the check stops with an error rather than running on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import signal
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import torch

from gpu_check_plan import (BUILD_S, CALIBRATION, METHODS, MIN_STEPS, REPO, ROW_OVERHEAD_S, SHAPE_ORDER, SHAPES,
                            CheckError, Row, default_rows, fitting_batch, plan_rows, predicted_peak_mib, shape_args)
from gpu_check_report import calibration_record, profile_summary, report
from harness import add_out, add_threads
from oar.files import atomic_write_text

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


# ------------------------------------------------------------------------------ one row's process


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()



def train_one(settings: dict, out_dir: Path, lengths: list[int], profile_scoring: bool = True,
              profile_steady: bool = False) -> None:
    """``oar.training.run``'s trainer and metrics file, step i's responses forced to ``lengths[i]`` tokens,
    the parity reward, no checkpoint, synchronised step timing, per-step peaks and a profile of the first
    step's scoring call; with ``profile_steady``, also of the last step's scoring call run once more on the
    same batch (out of the step's timing: its update starts after the repeat, its step time leaves it out)."""
    from oar.training.grpo_trainer import OARTrainer
    from oar.training.memory import _reset_rss_high_water
    from oar.training.run import MetricsFile, build_config, load_problems, training_dataset
    from oar.training.settings import resolve_settings
    from transformers import TrainerCallback
    from transformers.trainer_utils import SaveStrategy

    from oar.models.loading import load_model

    settings = resolve_settings(settings)
    out_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model(settings["model"], dtype=settings["model_dtype"], eval_mode=False)
    config = build_config(settings, out_dir / "checkpoints")
    config.generation_kwargs = {"min_new_tokens": lengths[0]}
    # transformers' DefaultFlowCallback saves at max_steps whenever save_strategy is "steps"
    config.save_strategy = SaveStrategy.NO
    steps_file = out_dir / "steps.jsonl"
    steps_file.unlink(missing_ok=True)

    class CheckTrainer(OARTrainer):
        def _counted_scoring(self, output, profile_to: Path | None):
            """The scoring call (``OARTrainer._token_weights``), its model calls counted; profiled into
            ``profile_to`` when given."""
            calls = [0]
            handle = self.accelerator.unwrap_model(self.model).register_forward_pre_hook(
                lambda *_: calls.__setitem__(0, calls[0] + 1))
            activities = [torch.profiler.ProfilerActivity.CPU] + (
                [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            context = torch.profiler.profile(activities=activities) if profile_to else contextlib.nullcontext()
            started = time.perf_counter()
            try:
                with context as prof:
                    result = super()._token_weights(output)
                    _sync()
            finally:
                handle.remove()
            if profile_to:
                summary = profile_summary(prof, calls[0], time.perf_counter() - started)
                profile_to.write_text(json.dumps(summary, indent=1) + "\n")
            return result, calls[0]

        def _token_weights(self, output):
            scorer = self.args.oar_method != "grpo"
            profile = profile_scoring and self.state.global_step == 0 and scorer
            result, calls = self._counted_scoring(output, out_dir / "profile.json" if profile else None)
            self._check["score_forwards"] = calls
            self._check["prompt_tokens"] = float(output["prompt_mask"].sum(dim=1).float().mean())
            if profile_steady and scorer and self.state.global_step == len(lengths) - 1:
                self._check["repeat"] = output
            return result

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            _sync()
            repeat = self._check.pop("repeat", None)
            if repeat is not None:  # the last step's scoring once more, warm, under the profiler
                started = time.perf_counter()
                self._counted_scoring(repeat, out_dir / "profile_steady.json")
                self._check["repeat_s"] = time.perf_counter() - started
            self._check["scored_at"] = time.perf_counter()
            return output

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            tokens = lengths[min(state.global_step, len(lengths) - 1)]  # this step's forced length
            trainer.max_completion_length = tokens
            trainer.generation_config.max_new_tokens = trainer.generation_config.min_new_tokens = tokens
            trainer.generation_kwargs.update(max_new_tokens=tokens, min_new_tokens=tokens)
            _sync()
            trainer._memory._process_peak_mb = 0.0  # this step's own peak
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            else:
                _reset_rss_high_water()
            trainer._check = {"began": time.perf_counter()}

        def on_step_end(self, args, state, control, **kwargs):
            _sync()  # the backward and AdamW's step have finished
            ended = time.perf_counter()
            c = trainer._check
            line = {"step": state.global_step, "tokens": trainer.max_completion_length,
                    "step_s": ended - c["began"] - c.get("repeat_s", 0.0),
                    "update_s": ended - c.get("scored_at", c["began"]), "peak_mb": trainer._memory.process_peak_mb(),
                    "score_forwards": c.get("score_forwards", 0), "prompt_tokens": c.get("prompt_tokens")}
            if "repeat_s" in c:
                line["profiled_repeat_s"] = c["repeat_s"]  # left out of step_s
            with open(steps_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

    trainer = CheckTrainer(model=model, reward_funcs=hash_parity_reward, args=config, processing_class=tokenizer,
                           train_dataset=training_dataset(load_problems(settings["train_file"], None), tokenizer),
                           callbacks=[MetricsFile(out_dir / "metrics.jsonl"), StepClock()])
    trainer._check = {}
    trainer.train()


def time_row(args, row: Row, model: Path, problems: Path, dtype: str, oar: dict, timeout: float | None) -> dict:
    """Run one row's process; its results by length (steady: the steps at that length after step 1)."""
    out = args.work / row.name
    for name in ("metrics.jsonl", "steps.jsonl", "profile.json", "profile_steady.json"):
        (out / name).unlink(missing_ok=True)
    settings = {
        "run_id": f"gpu-check-{row.name}", "method": row.method, "seed": 0, "model": str(model),
        "train_file": str(problems), "model_dtype": dtype,
        "oar": {**oar, "score_all": True, "window_tokens": row.window,
                "scoring_attention": row.attention or oar["scoring_attention"]},
        "trainer": {"max_steps": len(row.run_lengths), "num_generations": args.num_generations,
                    "per_device_train_batch_size": args.batch, "max_completion_length": max(row.run_lengths),
                    "gradient_checkpointing": args.gradient_checkpointing},
    }
    started = time.perf_counter()
    # an --attention-ab twin is timed, not profiled: its scorer's profile is its first row's
    spec = json.dumps({"settings": settings, "lengths": row.run_lengths, "profile": not row.attention,
                       "profile_steady": row.method in args.profile_steady and not row.attention})
    try:
        subprocess.run([sys.executable, __file__, "--one-method", spec, str(out), "--threads", str(args.threads)],
                       check=True, timeout=timeout)
    except (subprocess.TimeoutExpired, Terminated) as stop:  # subprocess.run has killed the process
        # the lengths whose steps all finished before the cut are results; the rest are lost
        partial = row_results(row, out, time.perf_counter() - started, complete=False)
        raise RowCutOff(partial, terminated=isinstance(stop, Terminated)) from None
    return row_results(row, out, time.perf_counter() - started)


class RowCutOff(Exception):
    """A row's process cut off at the end of the budget, or by an outer time limit (``terminated``);
    ``results`` holds its lengths that finished."""

    def __init__(self, results: dict, terminated: bool = False):
        super().__init__(f"cut off with {len(results)} finished lengths")
        self.results, self.terminated = results, terminated


class Terminated(Exception):
    """SIGTERM reached the check: an outer time limit (SLURM's at the end of a job's time, `timeout`'s)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def row_results(row: Row, out: Path, seconds: float, complete: bool = True) -> dict:
    """A row's results by length, from the files its process wrote in ``out`` (steady: the steps at that
    length after step 1). ``complete=False``: the process was cut off, and a length is kept only when all
    its steps were logged and timed."""
    def read(name: str) -> list[dict]:
        path = out / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    lines, steps = read("metrics.jsonl"), read("steps.jsonl")
    done = min(len(lines), len(steps))
    lengths = row.run_lengths
    if complete and (len(lines) != len(lengths) or len(steps) != len(lengths)):
        raise RuntimeError(f"{out}: {len(lines)} steps logged and {len(steps)} timed, expected {len(lengths)}")
    profile = json.loads((out / "profile.json").read_text()) if (out / "profile.json").exists() else None
    steady = json.loads((out / "profile_steady.json").read_text()) if (out / "profile_steady.json").exists() else None
    results = {}
    for name, tokens in row.parts():
        at = [i for i, t in enumerate(lengths) if t == tokens and i > 0]  # step 1 carries one-off warm-up
        if not at or at[-1] >= done:
            continue
        logged, clocked = [lines[i] for i in at], [steps[i] for i in at]
        first_here = lengths.index(tokens) == at[0]  # no earlier step generated this length
        r = {"method": row.method, "window_tokens": row.window, "scoring_attention": row.attention or None,
             "process": row.name, "steps": len(lengths),
             "steady_steps": len(at), "process_s": seconds,
             "generate_s": statistics.median(x["time_generate_s"] or 0.0 for x in logged),
             "generate_first_at_length": first_here and len(at) == 1,
             "score_s": statistics.median(x["time_score_s"] or 0.0 for x in logged),
             "update_s": statistics.median(x["update_s"] for x in clocked),
             "step_s": statistics.median(x["step_s"] for x in clocked),
             "first_step_s": steps[0]["step_s"],
             "completion_length": statistics.mean(x["completion_length"] for x in logged),
             "frac_scored": statistics.mean(x["frac_scored"] for x in logged),
             "prompt_tokens": statistics.mean(x["prompt_tokens"] for x in steps if x["prompt_tokens"] is not None),
             "score_forwards": statistics.median(x["score_forwards"] for x in clocked),
             "peak_memory_mb": max(x["peak_mb"] for x in clocked),
             "score_peak_mb": max((x["score_peak_memory_mb"] or 0.0) for x in logged),
             "update_timing": "synchronised, optimizer step included"}
        if lengths[0] == tokens:
            r["first_generate_s"] = lines[0]["time_generate_s"]
        repeat = sum(x.get("profiled_repeat_s", 0.0) for x in steps[:done])
        if repeat:
            r["profiled_repeat_s"] = repeat  # in process_s, in no step: --profile-steady's repeated call
        if tokens in row.tried:
            r["beyond_plan"] = True  # run in the time the planned rows left
        if profile is not None:
            r["profile"] = profile
            r["profiled_tokens"] = row.lengths[0]
        if steady is not None and tokens == lengths[-1]:
            r["steady_profile"] = steady
        if not complete:
            r["cut_off"] = True  # the process did not finish: its later lengths are missing
        results[name] = r
        print(f"{name}: {json.dumps({k: v for k, v in r.items() if k != 'profile'})}", file=sys.stderr, flush=True)
    print(f"{row.name}: {seconds:.0f} s" + ("" if complete else ", cut off"), file=sys.stderr, flush=True)
    return results


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), nargs="+", default=list(SHAPE_ORDER),
                        help="model shapes, in order: each shape's rows in the time the budget leaves after the "
                             "shapes before it (default: the 7B rows, exact OAR-P first, then the 1.5B rows)")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "paper.yaml",
                        help="workflow config whose settings the check runs (its model of each shape)")
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--exact-oar-p-tokens", type=int, default=256,
                        help="also an exact OAR-P row at this length (0: none)")
    parser.add_argument("--batch", type=int, help="completions per step (per process); default: the config's "
                                                  "per-device micro-batch of the shape's model, where it fits")
    parser.add_argument("--num-generations", type=int, help="G (default: the config's)")
    parser.add_argument("--steps", type=int, default=2, help="steps per row; step 1 is left out of the steady figures")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                        help="weights: auto = bfloat16 on CUDA (with bf16 autocast), float32 on CPU")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction,
                        help="default: the config's (training.trainer.gradient_checkpointing)")
    parser.add_argument("--gpu-memory-gib", type=float,
                        help="the GPU the micro-batch must fit (default: the CUDA device's; 140 GiB, an H200's, "
                             "in a plan without one)")
    for key, kind in (("chunk_tokens", int), ("grad_chunk_tokens", int), ("probe", str), ("span_tokens", int),
                      ("window_tokens", int), ("noise_sigma", float), ("scoring_attention", str),
                      ("grad_prompt", str)):
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind,
                            help=f"must agree with the config's oar.{key} (default: the config's)")
    parser.add_argument("--budget-s", type=float,
                        help="seconds the whole check may take: rows are planned, sized and skipped to fit")
    parser.add_argument("--calibration", nargs="+", type=Path,
                        help="calibration.json files the plan's rates come from (default: the cost plan's, "
                             "gpu_check_plan.CALIBRATION)")
    parser.add_argument("--attention-ab", action="store_true",
                        help="also each scorer with the other attention kernels of oar.scoring_attention "
                             "(no_cudnn / torch_default), at its first length")
    parser.add_argument("--try-beyond-plan", action="store_true",
                        help="the last row then also runs the longer lengths the budget dropped from it, in "
                             "whatever time is left (the plan's rates can be too slow for a changed scorer); "
                             "one cut off at the end of the budget is reported as not finished, not an error")
    parser.add_argument("--profile-steady", nargs="+", default=[], choices=METHODS[1:], metavar="SCORER",
                        help="also profile these scorers' last scoring call, repeated warm on the same batch after "
                             "its timed call (left out of the step's timing): oar_g, oar_p")
    parser.add_argument("--plan-only", action="store_true", help="print the plan and stop")
    parser.add_argument("--eval", action="store_true", help="also time the evaluation backends")
    parser.add_argument("--eval-batch", type=int, default=32, help="prompts in the evaluation timing")
    add_threads(parser, 1)
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        help="default: cuda, cpu for --shape tiny; cuda without a CUDA device is an error")
    parser.add_argument("--work", type=Path, default=Path("results/perf/gpu_check"))
    add_out(parser, "Markdown table to write (also gpu_check.md in --work)", type=Path)
    parser.add_argument("--one-method", nargs=2, metavar=("SETTINGS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.one_method:
        spec = json.loads(args.one_method[0])
        train_one(spec["settings"], Path(args.one_method[1]), spec["lengths"], spec.get("profile", True),
                  spec.get("profile_steady", False))
        return
    if args.steps < MIN_STEPS:
        parser.error(f"--steps must be >= {MIN_STEPS}: the first step is warm-up, left out of the steady figures")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error("--budget-s must be > 0")
    from oar.planning.memory_plan import PlanError

    if not args.plan_only:  # before any planning: a real shape runs on CUDA only
        for shape in args.shape:
            device_kind = args.device or ("cpu" if shape == "tiny" else "cuda")
            if device_kind == "cuda" and not torch.cuda.is_available():
                parser.error(f"--device cuda (the default for --shape {shape}): no CUDA device is visible "
                             "(torch.cuda.is_available() is False); run it on a GPU node, or --shape tiny --device cpu")
    gpu_gib = args.gpu_memory_gib or (torch.cuda.get_device_properties(0).total_memory / 2**30
                                      if torch.cuda.is_available() else 140.0)
    plans, left = [], args.budget_s
    try:
        for n, shape in enumerate(args.shape):
            sized = shape_args(args, shape, first=n == 0)
            if shape != "tiny" and args.batch is None:
                sized.batch, note = fitting_batch(sized, gpu_gib, "bfloat16")
                if note:
                    sized.settings_said.append(note)
            planned, said = plan_rows(default_rows(sized), sized, left, first=n == 0)
            if planned:
                used = BUILD_S.get(shape, BUILD_S["qwen2.5-7b"]) + sum(r.planned_s for r in planned)
                left = None if left is None else left - used
                plans.append((sized, planned, said, used))
            else:
                plans.append((sized, [], said, 0.0))
    except (CheckError, PlanError) as error:
        parser.error(str(error))
    files = [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)
             for p in (args.calibration or list(CALIBRATION))]
    label = f"the rates of {', '.join(files)}, no phase faster than any row ran"
    print(f"Plan ({label}; {ROW_OVERHEAD_S:.0f} s a row to start, load and set up; first step at the first step's "
          "measured decode rate):", file=sys.stderr)
    for sized, planned, said, used in plans:
        sized.calibration_label = label
        print(f"  {sized.shape}: {'; '.join(sized.settings_said)}", file=sys.stderr)
        for r in planned:
            print(f"  {r.method}" + (f" (window {r.window})" if r.window else "")
                  + (f" ({r.attention} attention)" if r.attention else "") + f": steps of {r.lengths} tokens, "
                  f"{r.planned_s:,.0f} s" + (f" ({r.note})" if r.note else ""), file=sys.stderr)
        for line in said:
            if "skipped" in line:
                print(f"  {line}" if sized.first_shape else f"  {sized.shape} {line}", file=sys.stderr)
    last = next(((sized, planned, said) for sized, planned, said, _ in reversed(plans) if planned), None)
    if args.try_beyond_plan and last and last[1][-1].wanted:
        sized, planned, said = last
        planned[-1].try_dropped_lengths()
        if planned[-1].tried:
            said.append(f"{planned[-1].label(planned[-1].tried[-1])}: then run beyond the plan, in the time the "
                        "budget has left")
            print(f"  {planned[-1].method}: then steps of {planned[-1].tried} tokens beyond the plan, in the time "
                  "the budget has left (a step cut off at its end is reported as not finished)", file=sys.stderr)
    total = sum(used for *_, used in plans)
    print(f"  total {total:,.0f} s" + (f" of a {args.budget_s:,.0f} s budget" if args.budget_s else ""),
          file=sys.stderr, flush=True)
    if args.plan_only:
        return

    started = time.perf_counter()
    finished = True
    for sized, planned, said, _ in plans:
        if planned:
            finished &= run_shape(parser, sized, planned, said, started)
    if not finished:
        sys.exit(1)


def run_shape(parser, args, planned: list[Row], said: list[str], started: float) -> bool:
    """Build the shape's model, run its rows in the budget's time left, write its table and calibration;
    whether every planned row finished."""
    device_kind = args.device or ("cpu" if args.shape == "tiny" else "cuda")
    if device_kind == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device cuda (the default for --shape {args.shape}): no CUDA device is visible "
                     "(torch.cuda.is_available() is False); run it on a GPU node, or --shape tiny --device cpu")
    if device_kind == "cpu" and torch.cuda.is_available():
        parser.error("--device cpu on a machine with CUDA: the trainer would use the GPU; hide it with "
                     "CUDA_VISIBLE_DEVICES=''")
    on_gpu = device_kind == "cuda"
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    shape_started = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    for stale in ("calibration.json", "gpu_check.md"):  # a new run's files replace an old run's, never mix
        (args.work / stale).unlink(missing_ok=True)
    out = args.out if args.first_shape else None
    if out:
        out.unlink(missing_ok=True)
    oar, where = args.oar, args.where
    model = build_model_folder(args.shape, args.work / f"model-{args.shape}",
                               256 + max(max(r.run_lengths) for r in planned))
    build_s = time.perf_counter() - shape_started
    problems = write_problems(args.work / "problems.jsonl",
                              max(args.batch * max(len(r.run_lengths) for r in planned), args.eval_batch))
    device = torch.cuda.get_device_name() if on_gpu else "CPU"
    predicted = {name: predicted_peak_mib(args.flop_shape, args.batch, args.gradient_checkpointing, dtype, oar,
                                          r.method, tokens, r.window)
                 for r in planned for name, tokens in r.parts()}
    results: dict[str, dict] = {}
    evaluations: dict[str, dict | None] = {}

    def write(complete: bool) -> str:
        text = report(args, device, dtype, oar, where, results, planned, predicted, build_s, said, evaluations,
                      complete)
        record = calibration_record(args, model, device, dtype, oar, results, evaluations, planned, complete)
        atomic_write_text(args.work / "gpu_check.md", text)
        if out:
            atomic_write_text(out, text)
        # last: a calibration.json on disk means the tables of the same rows are there too
        atomic_write_text(args.work / "calibration.json", json.dumps(record, indent=1) + "\n")
        return text

    def row_finished(row: Row) -> bool:  # every planned length has its result (a tried one may be missing)
        return all(name in results for name, _ in row.planned_parts())

    def finished() -> bool:
        return all(row_finished(r) for r in planned)

    # an outer time limit ends the check as its own budget would: the running row's finished lengths kept,
    # the files written (partial), then exit 143 (128 + SIGTERM)
    signal.signal(signal.SIGTERM, _raise_terminated)
    for row in planned:
        left = None if args.budget_s is None else args.budget_s - (time.perf_counter() - started)
        try:
            results.update(time_row(args, row, model, problems, dtype, oar, None if left is None else max(left, 1.0)))
        except RowCutOff as cut:
            results.update(cut.results)
            if cut.terminated:
                said.append(f"stopped by SIGTERM (an outer time limit) in {row.name}, {len(cut.results)} of its "
                            "lengths finished; the rows after it did not run")
                print(f"{row.name}: {said[-1]}", file=sys.stderr)
                write(complete=False)
                sys.exit(128 + signal.SIGTERM)
            print(f"{row.name}: cut off at the end of the budget, {len(cut.results)} of its lengths finished",
                  file=sys.stderr)
            if row.tried and row_finished(row):
                said.append(f"{row.label(row.tried[-1])}: tried beyond the plan, not finished in the "
                            f"{max(left, 0):,.0f} s left for its process")
            write(complete=False)
            break
        write(complete=False)
    if args.eval:
        for backend in ("transformers", "vllm"):
            evaluations[backend] = (None if backend == "vllm" and importlib.util.find_spec("vllm") is None
                                    else time_evaluation(backend, model, args, dtype))
    text = write(complete=finished())
    print(text)
    print(f"outputs: {args.work / 'gpu_check.md'}" + (f", {out}" if out else "")
          + f"; calibration for python -m oar.planning.cost_plan --calibration: {args.work / 'calibration.json'}; "
          f"each row's metrics, steps and profile under {args.work}/<row>/; "
          f"{time.perf_counter() - shape_started:.0f} s")
    return finished()


if __name__ == "__main__":
    main()
