"""oar.planning.memory_plan: the paper config fits 80 GB per GPU in every phase, and its per-token scaling holds."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from oar.experiment.config_error import ConfigError
from oar.experiment.runs import Registry
from oar.planning import memory_plan
from oar.planning.shapes import shape_of

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"
TRAINER_KEYS = tuple(yaml.safe_load(SCHEMA.read_text())["$defs"]["trainer"]["properties"])


def test_every_phase_of_both_paper_models_fits_80_gb():
    phases = memory_plan.plan_config(memory_plan.load_config(ROOT / "config" / "paper.yaml"))
    table = memory_plan.table(phases)
    seen = {(p.model, p.phase) for p in phases}
    for model in ("qwen2.5-math-1.5b", "qwen2.5-7b"):
        for phase in ("engine (vLLM colocate)", "scoring OAR-P", "scoring OAR-G", "update"):
            assert (model, phase) in seen, table
    over = [(p.model, p.phase, round(p.total_gb, 1)) for p in phases if p.total_gb > 80.0]
    assert not over, table
    assert all("CANNOT" not in p.note for p in phases), table  # vLLM can hold one max-length sequence
    seven = [p for p in phases if p.model == "qwen2.5-7b"]
    # accelerate upcasts trainable parameters to float32 under FSDP + bf16: model_dtype bfloat16 is moot
    assert all("4 GPUs, FSDP2 full shard, float32 weights" in p.layout for p in seven)
    assert all(p.parts["weights"] == pytest.approx(7_615_616_512 * 4 / 4) for p in seven)


def test_plan_catches_what_did_not_fit():
    """The old paper settings (chunk_tokens 8192, the engine awake at the model's 131,072-token context),
    and a smaller engine share, whose KV cache cannot hold one such sequence (vLLM would not start)."""
    config = memory_plan.load_config(ROOT / "config" / "paper.yaml")
    config["models"]["qwen2.5-7b"]["oar"] = {"chunk_tokens": 8192, "grad_chunk_tokens": 0}
    config["models"]["qwen2.5-7b"]["trainer"].update(vllm_max_model_length=None, vllm_enable_sleep_mode=False,
                                                      vllm_gpu_memory_utilization=0.25)
    phases = {p.phase: p for p in memory_plan.plan_config(config) if p.model == "qwen2.5-7b"}
    assert phases["scoring OAR-G"].total_gb > 80  # two 3,608-token probes with grad: ~46 GB of activations
    assert "CANNOT hold one 131,072-token sequence" in phases["engine (vLLM colocate)"].note
    assert "engine shortfall" in phases["engine (vLLM colocate)"].parts


def test_meta_device_parameter_counts_match_the_published_sizes():
    small = shape_of(memory_plan.model_config("Qwen/Qwen2.5-Math-1.5B"))
    big = shape_of(memory_plan.model_config("Qwen/Qwen2.5-7B"))
    assert small.params == 1_543_714_304  # Qwen2.5-1.5B: 1.54 B (tied embeddings counted once)
    assert big.params == 7_615_616_512  # Qwen2.5-7B: 7.61 B
    assert big.kv_bytes_per_token_bf16 == 2 * 28 * 4 * 128 * 2


def _direct_slope(widths, layers, vocab, dtype, phase, autocast, checkpointing, tokens=(40, 80)):
    """Bytes per token measured on real CPU tensors (no fake mode, no fit) of a model of another size."""
    from trl.trainer.utils import add_fused_lm_head

    model = memory_plan._small_model(widths, layers, vocab, dtype)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    low, high = (memory_plan.measure(model, phase, t, autocast, checkpointing) for t in tokens)
    return {w: (getattr(high, w) - getattr(low, w)) / (tokens[1] - tokens[0]) for w in ("saved", "peak")}


@pytest.mark.parametrize(
    "phase, dtype, autocast, checkpointing",
    [("oar_g", torch.float32, False, False), ("update", torch.float32, True, True),
     ("forward", torch.bfloat16, False, False)],
)
def test_saved_tensor_scaling_predicts_a_direct_measurement_of_another_size(phase, dtype, autocast, checkpointing):
    widths = (64, 160, 4, 2)
    fits = memory_plan.per_token(widths, {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype], phase,
                                 autocast, checkpointing)
    direct = _direct_slope(widths, 4, 1536, dtype, phase, autocast, checkpointing)
    for what in ("saved", "peak"):
        predicted = fits[what].bytes(1, 4, 1536)
        if phase == "forward" and what == "peak":
            # a no-grad forward's peak is one layer's transients: the plan takes the largest it measured
            assert direct[what] <= predicted <= 1.25 * direct[what], (what, fits[what], direct)
        else:
            assert predicted == pytest.approx(direct[what], rel=0.05, abs=64), (what, fits[what], direct)
    if phase == "oar_g":
        assert fits["saved"].per_layer > 0 and direct["saved"] > 0  # activations kept for the backward


def test_per_model_oar_settings_override_training_oar():
    config = memory_plan.load_config(ROOT / "config" / "paper.yaml")
    registry = Registry(config, TRAINER_KEYS)
    # the 7B model's OAR-G micro-batches with grad hold one 3,608-token probe; OAR-P's no-grad forwards
    # and the 1.5B model's both keep the training default of 8,192 tokens
    assert registry.run_settings("qwen2.5-7b", "oar_g", 0)["oar"]["grad_chunk_tokens"] == 4096
    assert registry.run_settings("qwen2.5-7b", "oar_p", 0)["oar"]["chunk_tokens"] == 8192
    assert registry.run_settings("qwen2.5-math-1.5b", "oar_p", 0)["oar"]["chunk_tokens"] == 8192
    assert "grad_chunk_tokens" not in registry.run_settings("qwen2.5-math-1.5b", "oar_g", 0)["oar"]  # at its 0
    assert registry.run_settings("qwen2.5-7b", "oar_g", 0)["oar"]["tau"] == 0.4  # the rest from training.oar

    bad = copy.deepcopy(config)
    bad["models"]["qwen2.5-7b"]["oar"] = {"chunk_token": 4096}
    with pytest.raises(ConfigError, match=r"models\.qwen2\.5-7b\.oar: unknown keys \['chunk_token'\]"):
        Registry(bad, TRAINER_KEYS)


def test_a_layout_that_is_not_full_shard_is_refused(tmp_path):
    accel = tmp_path / "fsdp.yaml"
    accel.write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config: {fsdp_reshard_after_forward: false}\n")
    with pytest.raises(memory_plan.PlanError, match="models.m.launcher"):
        memory_plan.layout_of(f"accelerate launch --config_file {accel}", "bfloat16", "auto", "models.m")


def test_oar_p_largest_forward_follows_the_stacked_schedule():
    """Copies of all the call's responses packed as the scorer packs them (rows of one response's copies
    over its prefix, rows x width <= chunk_tokens, rows x prefix <= CACHED_PER_CHUNK_TOKEN x chunk_tokens):
    the largest forward by cached positions is the scorer's own; stacking responses fills forwards one
    response alone cannot, and the cache stays bounded; with a window K the rows run over the whole
    prompt and reasoning."""
    from oar.method.copy_packing import CACHED_PER_CHUNK_TOKEN
    from oar.method.substitution import reasoning_spans, substitution_forwards, substitution_rows

    tail = memory_plan.CONCLUDE_AND_ANSWER_TOKENS
    probe, prompt, chunk, responses = 1560, 512, 2048, 16
    reasoning = probe - prompt - tail
    for window in (0, 64):
        rows = substitution_rows([probe] * responses, [prompt] * responses, [reasoning] * responses,
                                 [reasoning_spans(reasoning, 1)] * responses, window)
        worst = max((f.rows * (f.cache_len + f.width), f.tokens) for f in substitution_forwards(rows, chunk)[1])
        cached, run = memory_plan.oar_p_peak_tokens(probe, prompt, chunk, window, responses=responses)
        assert (cached, run) == worst and run <= chunk
        assert cached <= CACHED_PER_CHUNK_TOKEN * chunk + run
        assert memory_plan.oar_p_peak_tokens(probe, prompt, chunk, window, responses=1)[1] <= run
        forwards = memory_plan.stacked_forwards(memory_plan.oar_p_copies(prompt, reasoning, probe, 1, window),
                                                responses, chunk)
        assert all(f.tokens <= chunk for f in forwards)
        assert sum(f.end - f.begin for f in forwards) == responses * reasoning


def _check_phase(method, tokens, prompt=93):
    """The scoring phase of the GPU check's settings (bf16 weights, bf16 autocast, chunk_tokens 512,
    8 responses) at the 1.5B shape, in MiB without the reserve."""
    shape = shape_of(memory_plan.model_config("qwen2.5-1.5b"))
    settings = {"model_dtype": "bfloat16", "oar": {"chunk_tokens": 512, "window_tokens": 0},
                "trainer": {"per_device_train_batch_size": 8, "max_completion_length": tokens,
                            "gradient_checkpointing": False, "use_vllm": False, "gradient_accumulation_steps": 1}}
    phases = memory_plan.plan_model("check", {"launcher": "python"}, settings, shape, prompt, methods=[method],
                                    scored=8)
    phase, = [p for p in phases if p.phase.startswith("scoring")]
    return (sum(phase.parts.values()) - memory_plan.RESERVE_GB * memory_plan.GB) / 2**20


def test_scoring_phases_match_the_h200_peaks():
    """The peaks measured within scoring on one H200 (perf/calibration/h200-2026-11: the second step,
    AdamW's state resident, bf16 weights under bf16 autocast): OAR-G at 1,024 tokens 12,180 MiB, exact
    OAR-P at 256 tokens 9,257 MiB; the plan within 5%."""
    assert _check_phase("oar_g", 1024) == pytest.approx(12180, rel=0.05)
    assert _check_phase("oar_p", 256) == pytest.approx(9257, rel=0.05)


def test_scoring_runs_under_autocast_over_float32_weights():
    """One GPU, float32 master weights, bf16 mixed precision (the paper's 1.5B run): scoring runs inside
    the training forward's autocast, so OAR-P's KV caches are bf16 and OAR-G's backward holds autocast's
    bf16 copies of the weights; without mixed precision the caches are float32 and there is no copy."""
    config = memory_plan.load_config(ROOT / "config" / "paper.yaml")
    registry = Registry(config, TRAINER_KEYS)
    settings = registry.run_settings("qwen2.5-math-1.5b", "oar_g", 0)
    shape = shape_of(memory_plan.model_config("qwen2.5-1.5b"))
    mixed = {p.phase: p for p in memory_plan.plan_model("m", {"launcher": "python"}, settings, shape, 512)}
    plain_settings = copy.deepcopy(settings)
    plain_settings["trainer"]["bf16"] = False
    plain = {p.phase: p for p in memory_plan.plan_model("m", {"launcher": "python"}, plain_settings, shape, 512)}
    key = "clean KV caches (every scored response)"
    assert mixed["scoring OAR-P"].parts[key] == pytest.approx(plain["scoring OAR-P"].parts[key] / 2)
    copies = "autocast bf16 weight copies (kept for the backward)"
    assert mixed["scoring OAR-G"].parts[copies] == shape.params * 2 and copies not in plain["scoring OAR-G"].parts
