"""The scorers batched across responses (oar.method.importance, oar.method.scoring_batches) give the
per-response scorers' scores (tests/reference_scorers.py) to float rounding, train the same first step,
run the forwards their schedule says, and never make the host wait for the device inside a call."""

import importlib.util
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import reference_scorers
from oar.method.importance import score
from oar.method.scorer_config import ScorerConfig
from oar.method.scoring_batches import even_micro_batches, micro_batches
from oar.method.substitution import reasoning_spans, substitution_forwards, substitution_rows
from oar.method.probes import CONCLUDE_TEXT, Probe
from oar.models.tiny import build_tiny_model

# perf/harness.py counts a call's model calls and host synchronisations for the benches and these tests
_spec = importlib.util.spec_from_file_location("harness", Path(__file__).resolve().parents[1] / "perf" / "harness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

# The quick tier (`make test-quick`) takes the scorers against their definitions in one forward per batch
# (chunk_tokens 4096: about 2 s for the 72 cases); the 24-token chunks, which split the batch into many
# micro-batches, take about 90 s and stay in the full suite, as does the trained first step.
quick = pytest.mark.quick


def small_qwen2(attention: str = "sdpa"):
    """A Qwen2 with grouped-query attention (2 key-value heads for 4 query heads), random weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=384, tie_word_embeddings=True)
    config._attn_implementation = attention
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tokenizer_and_models():
    llama, tokenizer = build_tiny_model(seed=0)
    eager, _ = build_tiny_model(seed=0)
    eager.config._attn_implementation = "eager"
    return tokenizer, {"llama": llama, "llama-eager": eager, "qwen2": small_qwen2()}


def batch_of_probes(tokenizer, seed: int) -> list[Probe]:
    """Probes as a GRPO batch has them: groups sharing a prompt, prompts of several lengths, one probe
    without a prompt and one without an answer (its outcome falls back to LT-Logits)."""
    g = torch.Generator().manual_seed(seed)
    conclude = tuple(tokenizer(CONCLUDE_TEXT, add_special_tokens=False)["input_ids"])

    def probe(prompt, reasoning, answer):
        ids = torch.randint(3, len(tokenizer), (reasoning + 2 + answer,), generator=g).tolist()
        return Probe(prompt_ids=prompt, response_ids=tuple(ids[: reasoning + 2]), reasoning_len=reasoning,
                     conclude_ids=conclude, answer_ids=tuple(ids[reasoning + 2 :]),
                     answer_kind="boxed" if answer else None, pad_id=tokenizer.pad_token_id)

    probes = []
    for prompt_len, sizes in ((7, (9, 14, 5)), (3, (11, 6))):
        prompt = tuple(torch.randint(3, len(tokenizer), (prompt_len,), generator=g).tolist())
        probes += [probe(prompt, r, 3) for r in sizes]
    probes.append(probe((), 10, 2))
    probes.append(replace(probe(probes[0].prompt_ids, 9, 0), answer_ids=()))
    return probes


def reference_scores(monkeypatch, method, model, probes, config, seed=0):
    with monkeypatch.context() as patch:
        reference_scorers.use_reference(patch, method)
        return score(method, model, probes, config, seed=seed)


SETTINGS = [
    ("oar_p", {}), ("oar_p", {"span_tokens": 3}), ("oar_p", {"window_tokens": 4}),
    ("oar_g", {"noise_sigma": 1e-2}), ("grad_norm", {}), ("entropy", {}),
    ("oar_g", {"noise_sigma": 1e-2, "grad_prompt": "inline"}), ("grad_norm", {"grad_prompt": "inline"}),
]


@pytest.mark.parametrize("model_name", ["llama", "llama-eager", "qwen2"])
@pytest.mark.parametrize("method, settings", SETTINGS)
@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("chunk_tokens", [24, pytest.param(4096, marks=quick)])
def test_batched_scores_equal_the_per_response_scores(tokenizer_and_models, monkeypatch, model_name, method,
                                                      settings, kind, chunk_tokens):
    tokenizer, models = tokenizer_and_models
    model = models[model_name]
    probes = batch_of_probes(tokenizer, 7)
    if method == "entropy":  # the first token of a response without a prompt has no distribution it was drawn from
        probes = [p for p in probes if p.prompt_ids]
    config = ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, **settings)
    now = score(method, model, probes, config, seed=3)
    before = reference_scores(monkeypatch, method, model, probes, config, seed=3)
    assert (before.scores.abs() > 0).any()
    assert torch.equal(now.reasoning_mask, before.reasoning_mask) and torch.equal(now.lt_fallback, before.lt_fallback)
    difference = (now.scores - before.scores).abs().max().item()
    assert difference <= 1e-5, difference


@pytest.mark.parametrize("method, extra", [("oar_p", {}), ("oar_g", {}), ("oar_g", {"oar_grad_prompt": "inline"})])
def test_the_first_training_step_is_the_per_response_scorers(tiny_model_dir, tmp_path, monkeypatch, method, extra):
    """In float64, so that what differs is rounding alone: a random tiny policy's KL scores are ~1e-5, where
    float32's rounding of the log-probabilities (~1e-7) already reorders near-tied scores at the gate. OAR-G
    with its prompt inline (``oar.grad_prompt``) trains the same first step too."""
    from test_trainer import make_trainer

    logs = []
    for name in ("batched", "reference"):
        with monkeypatch.context() as patch:
            if name == "reference":
                reference_scorers.use_reference(patch, method)
            trainer = make_trainer(tiny_model_dir, tmp_path / name, oar_method=method, oar_chunk_tokens=64, **extra)
            trainer.model.to(torch.float64)
            trainer.train()
            logs.append(trainer.state.log_history[0])
    batched, reference = logs
    assert reference["oar/frac_scored"] > 0 and reference["oar/ess_ratio"] < 1
    for key in ("loss", "grad_norm", "reward", "oar/frac_scored", "oar/ess_ratio", "oar/top_mass",
                "oar/fallback_no_answer", "oar/fallback_nonfinite"):
        assert batched[key] == pytest.approx(reference[key], rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("method, settings", [("oar_p", {}), ("oar_p", {"window_tokens": 3}), ("oar_g", {}),
                                              ("grad_norm", {}), ("entropy", {}), ("oar_g", {"grad_prompt": "inline"})])
@pytest.mark.parametrize("responses, chunk_tokens", [(2, 24), (7, 24), pytest.param(7, 400, marks=quick)])
def test_no_host_synchronisation_inside_a_scoring_call(tokenizer_and_models, method, settings, responses,
                                                       chunk_tokens):
    """With the model's ``use_cache`` off, as transformers' Trainer sets it: a forward given neither a
    mask nor a cache would otherwise read a device value on the host in transformers' check for packed
    rows (one ``aten::item`` per forward of OAR-G's inline rows, seen in the H200's profiles)."""
    tokenizer, models = tokenizer_and_models
    model = models["qwen2"]
    probes = batch_of_probes(tokenizer, 8)[:responses]
    config = ScorerConfig(probe="as_mean", chunk_tokens=chunk_tokens, **settings)
    for use_cache in (False, True):
        model.config.use_cache = use_cache
        try:
            calls, syncs = harness.calls_and_syncs(model, lambda: score(method, model, probes, config))
        finally:
            model.config.use_cache = True
        assert calls > 0
        assert syncs == dict.fromkeys(harness.SYNC_OPS, 0), (use_cache, syncs)


@quick
@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_inline_rows_empty_cache_changes_no_score(tokenizer_and_models, monkeypatch, kind):
    """The cache that keeps nothing (``KeepNothingCache``), which spares OAR-G's inline forwards the
    packed-rows check, gives the scores bit for bit that the same forwards give without it."""
    from oar.method import gradient_scorers

    tokenizer, models = tokenizer_and_models
    model = models[kind]
    probes = batch_of_probes(tokenizer, 8)
    config = ScorerConfig(probe="as_mean", chunk_tokens=24, grad_prompt="inline")
    model.config.use_cache = False
    try:
        now = score("oar_g", model, probes, config)
        monkeypatch.setattr(gradient_scorers, "KeepNothingCache", lambda: None)  # the forwards as they were
        before = score("oar_g", model, probes, config)
    finally:
        model.config.use_cache = True
    assert (now.scores.abs() > 0).any()
    assert torch.equal(now.scores, before.scores)


@pytest.mark.parametrize("settings", [{}, {"span_tokens": 2}, {"window_tokens": 3}])
@pytest.mark.parametrize("chunk_tokens", [24, 100, pytest.param(4096, marks=quick)])
def test_oar_p_runs_the_forwards_its_schedule_plans(tokenizer_and_models, settings, chunk_tokens):
    """One forward per clean micro-batch and per packed group of copies of all responses together: fewer
    than one response at a time, and within the token budget."""
    tokenizer, models = tokenizer_and_models
    model = models["llama"]
    probes = batch_of_probes(tokenizer, 9)
    config = ScorerConfig(probe="as_mean", chunk_tokens=chunk_tokens, **settings)
    kinds = ["as_mean" if p.answer_ids else "lt_logits" for p in probes]
    lengths = [len(p.ids(k)) for p, k in zip(probes, kinds)]
    spans = [reasoning_spans(p.reasoning_len, config.span_tokens) for p in probes]
    rows = substitution_rows(lengths, [p.reasoning_start for p in probes], [p.reasoning_len for p in probes], spans,
                             config.window_tokens)
    placements, forwards = substitution_forwards(rows, chunk_tokens)
    planned = len(micro_batches(lengths, chunk_tokens)) + len(forwards)
    calls, _ = harness.calls_and_syncs(model, lambda: score("oar_p", model, probes, config))
    assert calls == planned
    assert all(f.tokens <= chunk_tokens or f.rows == 1 for f in forwards)
    assert len(rows) == sum(len(s) for s in spans) == len(placements)  # one copy per span of every response
    alone = sum(len(substitution_forwards(substitution_rows([n], [p.reasoning_start], [p.reasoning_len], [s],
                                                            config.window_tokens), chunk_tokens)[1]) + 1
                for n, p, s in zip(lengths, probes, spans))
    assert calls <= alone
    if chunk_tokens >= 100:
        assert calls < alone


@quick
def test_an_attention_implementation_without_4d_masks_is_named():
    model = small_qwen2()
    model.config._attn_implementation = "flash_attention_2"
    probe = Probe(prompt_ids=(5, 6), response_ids=(7, 8, 9), reasoning_len=2, conclude_ids=(10,), answer_ids=(9,),
                  answer_kind="boxed", pad_id=0)
    with pytest.raises(ValueError, match="flash_attention_2"):
        score("oar_p", model, [probe], ScorerConfig())


@quick
@pytest.mark.parametrize("responses, window, chunk_tokens", [(1, 0, 64), (3, 0, 64), (5, 0, 300), (4, 6, 80),
                                                              (6, 0, 40)])
def test_the_plans_model_of_the_packing_is_the_scorers(responses, window, chunk_tokens):
    """The memory and cost plans pack the copies of alike responses described by their lengths
    (oar.planning.memory_plan.stacked_forwards); the scorer packs its real rows. Same forwards, same sizes."""
    from oar.planning.memory_plan import oar_p_copies, stacked_forwards

    prompt, reasoning, tail = 20, 37, 5
    probe = prompt + reasoning + tail
    spans = reasoning_spans(reasoning, 1)
    rows = substitution_rows([probe] * responses, [prompt] * responses, [reasoning] * responses,
                             [spans] * responses, window)
    _, scorer = substitution_forwards(rows, chunk_tokens)
    plan = stacked_forwards(oar_p_copies(prompt, reasoning, probe, 1, window), responses, chunk_tokens)
    assert [(f.end - f.begin, f.rows, f.width, f.cache_len) for f in scorer] == \
        [(f.end - f.begin, f.rows, f.width, f.cache_len) for f in plan]


@quick
def test_a_forward_holds_a_bounded_cache():
    """Short copies over long prefixes: rows x cached prefix stays within CACHED_PER_CHUNK_TOKEN x chunk;
    copies whose prefixes are alike (a window) share rows instead of taking more forwards."""
    from oar.method.copy_packing import CACHED_PER_CHUNK_TOKEN

    for window in (0, 8):
        rows = substitution_rows([1000] * 4, [100] * 4, [890] * 4, [reasoning_spans(890, 1)] * 4, window)
        placements, forwards = substitution_forwards(rows, 256)
        for f in forwards:
            assert f.rows == 1 or (f.tokens <= 256 and f.rows * f.cache_len <= CACHED_PER_CHUNK_TOKEN * 256)
        if window:
            suffix = sum(r[2] + r[4] for r in rows)
            assert all(f.end - f.begin > f.rows for f in forwards[:-1])  # several copies to a row
            assert sum(f.tokens for f in forwards) < 1.05 * suffix  # and little padding


@quick
def test_micro_batches_are_filled_in_turn_longest_first():
    """The grouping the published tables were scored with: longest rows first, each group filled while
    rows x its longest length fits the budget (eight 1,040-token probes in 8,192 tokens go 7 + 1). Another
    grouping pads rows otherwise and changes every score's floats, so the tables would no longer reproduce."""
    assert micro_batches([1040] * 8, 8192) == [[0, 1, 2, 3, 4, 5, 6], [7]]
    assert micro_batches([3, 9, 5, 9], 18) == [[1, 3], [2, 0]]
    assert micro_batches([30, 5], 10) == [[0], [1]]  # a row over the budget is a group of its own
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 40))]
        budget = rng.randint(1, 2000)
        groups = micro_batches(lengths, budget)
        assert [i for g in groups for i in g] == sorted(range(len(lengths)), key=lambda i: -lengths[i])
        for g, after in zip(groups, groups[1:] + [None]):
            assert len(g) == 1 or len(g) * lengths[g[0]] <= budget
            if after is not None:  # filled in turn: the next row would not have fitted
                assert (len(g) + 1) * lengths[g[0]] > budget


@quick
def test_even_micro_batches_are_as_many_as_filled_ones_and_as_even_as_that_allows():
    """OAR-G's inline prompt groups its probes evenly (no published table depends on its grouping): eight
    1,141-token probes in 8,192 tokens go 4 + 4, not 7 + 1; as many groups as filling in turn makes, none
    larger in tokens than its largest, every row once, longest first."""
    assert even_micro_batches([1141] * 8, 8192) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert even_micro_batches([30, 5], 10) == [[0], [1]]
    rng = random.Random(1)
    for _ in range(200):
        lengths = [rng.randint(1, 300) for _ in range(rng.randint(1, 40))]
        budget = rng.randint(1, 2000)
        filled, even = micro_batches(lengths, budget), even_micro_batches(lengths, budget)
        assert len(even) == len(filled)
        assert [i for g in even for i in g] == sorted(range(len(lengths)), key=lambda i: -lengths[i])
        assert all(len(g) == 1 or len(g) * lengths[g[0]] <= budget for g in even)
        # no forward holds more tokens than filling in turn's largest (the step's scoring peak)
        assert max(len(g) * lengths[g[0]] for g in even) <= max(len(g) * lengths[g[0]] for g in filled)


@quick
@pytest.mark.parametrize("method", ["oar_p", "oar_g"])
def test_scoring_forwards_run_without_cudnn_attention(tokenizer_and_models, method):
    """cuDNN's attention builds a graph for every new shape (oar.method.attention_kernels): every forward a
    scorer makes (OAR-G's backward follows its forward's kernel) runs with it disabled and the other SDPA
    kernels enabled, and torch's own choice is back after the call."""
    tokenizer, models = tokenizer_and_models
    model = models["qwen2"]
    seen = []
    handle = model.register_forward_pre_hook(lambda *_: seen.append(
        (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled(),
         torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled())))
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        score(method, model, batch_of_probes(tokenizer, 3), ScorerConfig(chunk_tokens=64))
    finally:
        handle.remove()
    assert seen and all(flags == (False, True, True, True) for flags in seen)
    assert before is True and torch.backends.cuda.cudnn_sdp_enabled() is True


@quick
def test_torch_default_attention_leaves_torch_its_choice_with_the_same_scores(tokenizer_and_models):
    """``attention="torch_default"`` (oar.scoring_attention) scores with every kernel enabled; on a CPU
    the kernels are the same either way, so the scores are bit for bit the same; an unknown choice is an
    error naming the field."""
    tokenizer, models = tokenizer_and_models
    model, probes = models["qwen2"], batch_of_probes(tokenizer, 3)
    seen = []
    handle = model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    try:
        default = score("oar_g", model, probes, ScorerConfig(chunk_tokens=64, scoring_attention="torch_default"))
    finally:
        handle.remove()
    assert seen and all(seen)
    assert torch.equal(default.scores, score("oar_g", model, probes, ScorerConfig(chunk_tokens=64)).scores)
    with pytest.raises(ValueError, match="attention must be one of"):
        ScorerConfig(scoring_attention="cudnn")


@quick
@pytest.mark.parametrize("method", ["oar_g", "grad_norm"])
def test_grad_chunk_tokens_sizes_the_micro_batches_with_grad_alone(tokenizer_and_models, method):
    """``grad_chunk_tokens`` (oar.grad_chunk_tokens) is the budget of OAR-G's and grad_norm's micro-batches
    with grad, apart from ``chunk_tokens``: one probe a micro-batch takes more forwards than all at once,
    with the same scores (each row draws its own noise); 0 leaves the budget to ``chunk_tokens``; a
    negative or fractional value is an error naming the field."""
    tokenizer, models = tokenizer_and_models
    model, probes = models["qwen2"], batch_of_probes(tokenizer, 5)
    together = ScorerConfig(chunk_tokens=4096)
    apart = ScorerConfig(chunk_tokens=4096, grad_chunk_tokens=1)
    assert together.grad_budget == 4096 and apart.grad_budget == 1
    calls_together, _ = harness.calls_and_syncs(model, lambda: score(method, model, probes, together))
    calls_apart, _ = harness.calls_and_syncs(model, lambda: score(method, model, probes, apart))
    assert calls_apart > calls_together
    difference = (score(method, model, probes, together).scores
                  - score(method, model, probes, apart).scores).abs().max().item()
    assert difference <= 1e-5, difference
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="grad_chunk_tokens must be an integer >= 0"):
            ScorerConfig(grad_chunk_tokens=bad)
