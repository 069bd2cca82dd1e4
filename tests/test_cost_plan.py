"""The cost plan (oar.planning.cost_plan, with its work model cost_model, hardware and calibration): its
FLOP counts against torch's FLOP counter on small real models, its testbed prediction against `make run`'s
measured step times, its errors and its CLI."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from oar.experiment.runs import Registry
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from oar.method.substitution import oar_p_scores
from oar.planning import cost_model as cm
from oar.planning import cost_plan as cp
from oar.planning import hardware as hw_kinds
from oar.planning.gpu_hours import plan_config, step_plan
from oar.planning.memory_plan import PlanError, _trainer_keys, load_config, oar_p_copies
from oar.planning.shapes import shape_of

FLOP_TOLERANCE = 0.10


def _model(kind: str):
    """A small Qwen2 (biased q/k/v, GQA) or Llama with eager attention: torch's FLOP counter does not
    count the CPU SDPA kernel, but counts eager attention's two matmuls (the full n x (c + n) rectangle,
    as the plan does)."""
    widths = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=300, max_position_embeddings=512, tie_word_embeddings=False)
    config = Qwen2Config(**widths) if kind == "qwen2" else LlamaConfig(**widths)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = (Qwen2ForCausalLM if kind == "qwen2" else LlamaForCausalLM)(config)
    return model, shape_of(config)


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def _agree(planned: float, counted: int, what: str) -> None:
    assert abs(planned / counted - 1) <= FLOP_TOLERANCE, f"{what}: planned {planned:.4g}, counted {counted:.4g}"


PROBE = Probe(prompt_ids=tuple(range(1, 17)), response_ids=tuple(range(20, 80)), reasoning_len=60,
              conclude_ids=(5, 6, 7, 8), answer_ids=(9, 10), pad_id=0)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_forward_and_update_flops_match_torch_counter(kind):
    model, shape = _model(kind)
    prompt, completion = 24, 72
    ids = torch.randint(1, 300, (1, prompt + completion))
    model.eval()
    with torch.no_grad():
        counted = _counted(lambda: model(input_ids=ids, logits_to_keep=4))
    _agree(cm.forward_flops(shape, prompt + completion, keep=4), counted, "forward")

    for checkpointing in (False, True):
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable()

        def update():  # TRL's update: the completion's logits (logits_to_keep = completion + 1), weight gradients
            logits = model(input_ids=ids, logits_to_keep=completion + 1).logits
            logits.float().logsumexp(-1).sum().backward()

        planned = cm.update_work(shape, prompt, completion, 1, checkpointing, extra_forwards=0).flops
        _agree(planned, _counted(update), f"update, checkpointing {checkpointing}")
        model.gradient_checkpointing_disable()
        model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("probe_kind", ["as_mean", "lt_logits"])
@pytest.mark.parametrize("chunk", [64, 512])
def test_oar_p_flops_match_torch_counter(kind, probe_kind, chunk):
    """The real scorer (clean forward, then chunks of suffix copies over the clean KV cache)."""
    model, shape = _model(kind)
    model.eval()
    counted = _counted(lambda: oar_p_scores(model, [PROBE], [probe_kind], ScorerConfig(probe=probe_kind,
                                                                                       chunk_tokens=chunk)))
    keep = 1 if probe_kind == "lt_logits" else len(PROBE.answer_ids) + 1
    planned = cm.oar_p_work(shape, len(PROBE.prompt_ids), PROBE.reasoning_len, len(PROBE.ids(probe_kind)),
                            keep, chunk).flops
    _agree(planned, counted, f"OAR-P {probe_kind} chunk {chunk}")


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_oar_g_flops_match_torch_counter(kind):
    """OAR-G's computation as oar.method.gradient_scorers._embedding_gradients runs it: the prompt once into a
    KV cache without gradient, then over that cache a no-grad clean forward of the suffix (reasoning,
    conclusion, answer), a forward with grad on the suffix's input embeddings and the gradient to those
    inputs only. backward(inputs=...) stands for autograd.grad(..., inputs) (the same pruned graph; the
    FLOP counter's module hooks do not support autograd.grad)."""
    from transformers import DynamicCache

    model, shape = _model(kind)
    model.eval()
    ids = torch.tensor([PROBE.ids("as_mean")])
    prompt = len(PROBE.prompt_ids)
    keep = len(PROBE.answer_ids) + 1

    def oar_g():
        with torch.no_grad():
            layers = [(layer.keys, layer.values) for layer in
                      model(input_ids=ids[:, :prompt], use_cache=True, logits_to_keep=1).past_key_values.layers]
            model(input_ids=ids[:, prompt:], past_key_values=DynamicCache(layers), logits_to_keep=keep)
        embeds = model.get_input_embeddings()(ids[:, prompt:]).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds, past_key_values=DynamicCache(layers), logits_to_keep=keep).logits
        logits.float().logsumexp(-1).sum().backward(inputs=[embeds])

    planned = cm.oar_g_work(shape, prompt, ids.shape[1], keep, chunk_tokens=512).flops
    _agree(planned, _counted(oar_g), "OAR-G")


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_oar_g_flops_over_an_inline_prompt_match_torch_counter(kind):
    """``grad_prompt: inline``: the whole probe, prompt included, in a no-grad clean forward, a forward with
    grad on its input embeddings and the gradient to those inputs; no prompt runs apart, and a call is
    three model calls per micro-batch (two forwards and the backward)."""
    model, shape = _model(kind)
    model.eval()
    ids = torch.tensor([PROBE.ids("as_mean")])
    prompt = len(PROBE.prompt_ids)
    keep = len(PROBE.answer_ids) + 1

    def oar_g_inline():
        with torch.no_grad():
            model(input_ids=ids, logits_to_keep=keep)
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        model(inputs_embeds=embeds, logits_to_keep=keep).logits.float().logsumexp(-1).sum().backward(inputs=[embeds])

    work = cm.oar_g_work(shape, prompt, ids.shape[1], keep, chunk_tokens=512, inline=True)
    _agree(work.flops, _counted(oar_g_inline), "OAR-G, inline prompt")
    assert (work.calls, work.forwards) == (3, 2)
    cached = cm.oar_g_work(shape, prompt, ids.shape[1], keep, chunk_tokens=512)
    assert (cached.calls, cached.forwards) == (4, 3) and cached.flops < work.flops


# --- the testbed: the plan with this CPU's measured throughput against a step timed in the same run -------

# The testbed's settings as `make run`'s metrics.jsonl has them: completions average 53 of the 96 allowed
# tokens; 95% of rows scored
MAKE_RUN_COMPLETION_FILL = 53 / 96
MAKE_RUN_SCORED_SHARE = 0.95
CHAIN_PROMPT_TOKENS = 61  # measured: chain_train prompts (instruction and problem) are 60-62 tokens
# The factor the plan is held to here. A 0.7M-parameter model on a CPU thread is dominated by per-call
# overhead (Python, sampling, the trainer's bookkeeping), which the plan models only as a fixed cost per
# layer-forward measured on a one-token forward; at the paper's scale the FLOPs dominate instead. Planned
# over timed came out at 0.4-0.7 on 2-core machines, quiet or loaded, and lower in a busy spell that hit
# the phases and not the throughput probe: the best of three rounds within 4x.
TESTBED_FACTOR = 4.0


def _best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def cpu_hardware(model, shape) -> hw_kinds.Hardware:
    """This CPU's sustained figures, measured in about a second on one thread: FLOP/s of the testbed
    model's batched forward, the fixed cost of a one-token forward, the bandwidth of a 128 MB copy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as make run's training jobs
    try:
        ids = torch.randint(3, shape.vocab, (64, 128))
        one = ids[:1, :1]
        with torch.no_grad():
            forward_s = _best_of(lambda: model(input_ids=ids, logits_to_keep=1), 3)
            call_s = _best_of(lambda: model(input_ids=one), 20)
        buffer = torch.empty(2**25)
        copy_s = _best_of(buffer.clone, 3)
    finally:
        torch.set_num_threads(threads)
    flops = 64 * cm.forward_flops(shape, 128, keep=1) / forward_s
    return hw_kinds.Hardware("this CPU, 1 thread", flops, 2 * buffer.numel() * 4 / copy_s, 4.0, mfu=1.0,
                       bandwidth_util=1.0, layer_overhead_s=call_s / shape.layers)


def test_testbed_plan_predicts_make_run_step_times():
    """The plan of a testbed step, priced with this CPU's throughput, against the same step's generation
    and update timed on this CPU in the same run: both sides slow down together on a loaded or slower
    machine, so only their ratio is held to a bound."""
    # the chain model's shape as oar.training.pretrain builds it (config/config.yaml: 4 layers, hidden 128)
    config = LlamaConfig(vocab_size=416, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    shape = shape_of(config)
    workflow = load_config("config/config.yaml")
    registry = Registry(workflow, workflow["training"]["trainer"].keys() | _trainer_keys())
    assume = cm.Assumptions(prompt_tokens=CHAIN_PROMPT_TOKENS, completion_fill=MAKE_RUN_COMPLETION_FILL,
                            scored_share=MAKE_RUN_SCORED_SHARE)
    settings = registry.run_settings("chain_f1", "grpo", 0)
    trainer = settings["trainer"]
    batch = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
    completion = int(round(trainer["max_completion_length"] * MAKE_RUN_COMPLETION_FILL))
    prompts = torch.randint(3, shape.vocab, (batch, CHAIN_PROMPT_TOKENS))
    sequences = torch.randint(3, shape.vocab, (trainer["per_device_train_batch_size"],
                                               CHAIN_PROMPT_TOKENS + completion))

    def generate():  # as TRL's generate without vLLM: the whole batch sampled at once, no early stop
        with torch.no_grad():
            model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                           min_new_tokens=completion, max_new_tokens=completion,
                           temperature=trainer["temperature"])

    def update():  # TRL's update: the completion's logits (logits_to_keep = completion + 1), weight gradients
        for _ in range(trainer["gradient_accumulation_steps"]):
            logits = model(input_ids=sequences, logits_to_keep=completion + 1).logits
            logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as make run's training jobs
    try:
        rounds = []
        for _ in range(3):  # throughput and the step's phases interleaved, so load hits both sides alike
            hw = cpu_hardware(model, shape)
            plan = {m: step_plan(shape, registry.run_settings("chain_f1", m, 0), hw, assume)
                    for m in ("grpo", "truth", "oar_g", "oar_p")}
            rounds.append((plan, _best_of(generate, 1), _best_of(update, 1)))
    finally:
        torch.set_num_threads(threads)
    ratios = [(p["grpo"].generation / gen_s, p["grpo"].update / upd_s) for p, gen_s, upd_s in rounds]
    print("planned over timed (generation, update):", ratios)
    best = min(ratios, key=lambda r: max(max(x, 1 / x) for x in r))  # the round least disturbed by load
    assert all(1 / TESTBED_FACTOR <= r <= TESTBED_FACTOR for r in best), (ratios, hw)
    # the ordering the paper's cost claim rests on: OAR-P costs most, GRPO least; the truth gate scores nothing
    plan = rounds[-1][0]
    assert plan["grpo"].scoring == plan["truth"].scoring == 0.0
    assert plan["grpo"].step <= plan["oar_g"].step <= plan["oar_p"].step


# --- errors ------------------------------------------------------------------------------------------


def test_unknown_hardware_names_the_flag():
    with pytest.raises(PlanError, match="--hardware: 'tpu'"):
        hw_kinds.hardware("tpu")


def test_run_longer_than_its_job_allows_names_the_key():
    config = load_config("config/paper.yaml")
    config["resources"]["train"]["runtime"] = 1  # one minute, no run fits
    config["models"]["qwen2.5-7b"]["resources"]["train"]["runtime"] = 60  # one hour: a 7B run does not fit
    plan = plan_config(config, hw_kinds.hardware("h100"), cm.Assumptions())
    with pytest.raises(PlanError, match=r"^resources\.train\.runtime: run qwen2\.5-math-1\.5b/"):
        plan.check()
    # the 7B model's own resources override the default ones: its runs name that key
    assert any(m.startswith("models.qwen2.5-7b.resources.train.runtime: ") for m in plan.over_budget)


def test_engine_without_room_for_one_sequence_names_the_key():
    config = load_config("config/paper.yaml")
    config["models"]["qwen2.5-7b"]["trainer"]["vllm_gpu_memory_utilization"] = 0.2  # 16 GB: the weights alone
    with pytest.raises(PlanError, match=r"^models\.qwen2\.5-7b\.trainer\.vllm_gpu_memory_utilization"):
        plan_config(config, hw_kinds.hardware("h100"), cm.Assumptions())


def test_stacked_work_counts_the_scorers_packed_forwards():
    """oar_p_work counts the forwards of the scorer's own packing (oar.method.copy_packing) of the copies
    of alike responses: one call per forward, every row's width over the forward's cached prefix, the
    output head at each copy's kept positions, and the clean passes."""
    from oar.method.copy_packing import pack_copies

    _, shape = _model("qwen2")
    for responses, chunk, span, window in ((3, 64, 1, 0), (5, 200, 2, 0), (4, 96, 1, 8), (2, 1, 1, 0)):
        prompt, reasoning, probe = 16, 40, 16 + 40 + 6
        copies = oar_p_copies(prompt, reasoning, probe, span, window)
        probes = [i for i in range(responses) for _ in copies]
        _, forwards = pack_copies(probes, [int(run) for _ in range(responses) for run, _ in copies],
                                  [int(c) for _ in range(responses) for _, c in copies], chunk)
        flops = sum(f.rows * cm.forward_flops(shape, f.width, f.cache_len, keep=0)
                    + (f.end - f.begin) * cm.forward_flops(shape, 0, keep=3) for f in forwards)
        clean = math.ceil(responses / max(1, chunk // probe))
        work = cm.oar_p_work(shape, prompt, reasoning, probe, 3, chunk, span, window, responses=responses)
        assert work.calls == len(forwards) + clean and work.forwards == work.calls
        assert work.flops == pytest.approx(flops + responses * cm.forward_flops(shape, probe, keep=3))


# --- the CLI -----------------------------------------------------------------------------------------


def test_cli_prints_the_paper_plan(capsys):
    rc = cp.main(["--config", "config/paper.yaml", "--hardware", "a100"])
    out, err = capsys.readouterr()
    assert "planned, not measured" in out and "A100" in out
    assert "| **all (total)** | 135 |" in out and "| main_table |" in out
    assert rc == 0 or (rc == 1 and "resources.train.runtime: " in err), err
    # fewer scored rows cost less: the assumption is the CLI's to change
    total = [line for line in out.splitlines() if "all (total)" in line][0]
    cp.main(["--config", "config/paper.yaml", "--hardware", "a100", "--scored-share", "0.25"])
    cheaper = [line for line in capsys.readouterr().out.splitlines() if "all (total)" in line][0]
    hours = lambda line: float(line.rsplit("**", 2)[-2].replace(",", ""))  # noqa: E731
    assert hours(cheaper) < hours(total)
    assert cp.main(["--config", "config/paper.yaml", "--scored-share", "1.5"]) == 2
    assert "--scored-share" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("span, window, chunk", [(1, 4, 64), (2, 8, 512), (1, 40, 64)])
def test_windowed_oar_p_flops_match_torch_counter(kind, span, window, chunk):
    """OAR-P with a local window: the clean forward, then chunks of window + tail copies over the cache of
    the whole prompt and reasoning."""
    model, shape = _model(kind)
    model.eval()
    config = ScorerConfig(probe="as_mean", chunk_tokens=chunk, span_tokens=span, window_tokens=window)
    counted = _counted(lambda: oar_p_scores(model, [PROBE], ["as_mean"], config))
    planned = cm.oar_p_work(shape, len(PROBE.prompt_ids), PROBE.reasoning_len, len(PROBE.ids("as_mean")),
                            len(PROBE.answer_ids) + 1, chunk, span, window).flops
    _agree(planned, counted, f"windowed OAR-P w {span} K {window} chunk {chunk}")


def test_a_window_makes_oar_p_about_linear_in_the_reasoning():
    """oar.window_tokens K: each copy runs K + tail tokens, so at Qwen2.5-1.5B's shape doubling R about
    doubles the suffix work (only attention over the longer cache grows faster) where exact OAR-P's
    quadruples; a window as long as the reasoning costs what exact OAR-P costs, less the padding."""
    shape = shape_of(Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                    num_attention_heads=12, num_key_value_heads=2, vocab_size=151936))
    tail = 24

    def suffix_flops(r, window):
        clean = cm.forward_flops(shape, 256 + r + tail, keep=3)
        return cm.oar_p_work(shape, 256, r, 256 + r + tail, 3, 1, window=window).flops - clean

    assert 1.9 < suffix_flops(1024, 64) / suffix_flops(512, 64) < 2.4
    assert 3.5 < suffix_flops(1024, 0) / suffix_flops(512, 0) < 4.1
    assert suffix_flops(512, 512) == pytest.approx(suffix_flops(512, 0), rel=0.1)


def test_cli_plans_a_window_and_rejects_a_negative_one(capsys):
    assert cp.main(["--config", "config/paper.yaml", "--window-tokens", "0"]) == 0
    exact = [line for line in capsys.readouterr().out.splitlines() if "all (total)" in line][0]
    assert cp.main(["--config", "config/paper.yaml", "--window-tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert "with OAR-P over a window of 64 tokens" in out
    windowed = [line for line in out.splitlines() if "all (total)" in line][0]
    hours = lambda line: float(line.rsplit("**", 2)[-2].replace(",", ""))  # noqa: E731
    assert hours(windowed) < hours(exact) / 3
    assert cp.main(["--config", "config/paper.yaml", "--window-tokens", "-4"]) == 2
    assert "--window-tokens" in capsys.readouterr().err


def test_span_tokens_divides_oar_p_suffix_forwards():
    """oar.span_tokens w substitutes spans of w tokens: about w times fewer suffix forwards."""
    _, shape = _model("qwen2")
    exact = cm.oar_p_work(shape, 16, 64, 104, 3, 1, span=1)
    spans = cm.oar_p_work(shape, 16, 64, 104, 3, 1, span=4)
    assert exact.calls == 1 + 64 and spans.calls == 1 + 16
    assert 3.0 < exact.flops / spans.flops < 4.0  # the clean forward is paid once either way
