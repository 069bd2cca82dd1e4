"""OAR-G's prompt cache: the same weights as the full-probe computation, and the parameters' gradients left
alone."""

import pytest
import torch

from oar.method.importance import score
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig
from random_probes import random_probe

pytestmark = pytest.mark.quick


def full_probe_embedding_gradients(model, probes, kinds, config, objective, needs_clean, noise_sigma):
    """The gradient scorers' computation before the prompt cache: clean pass, noisy pass and backward each
    over the whole left-padded probe (prompt included), noise drawn row by row in micro-batch order."""
    from reference_scorers import _batched_outcomes, _left_pad

    from oar.method.scoring_batches import logits_to_keep, micro_batches

    embed = model.get_input_embeddings()
    generator = torch.Generator(device="cpu").manual_seed(config.seed)
    seqs = [p.ids(k) for p, k in zip(probes, kinds)]
    results = [None] * len(probes)
    for group in micro_batches([len(s) for s in seqs], config.chunk_tokens):
        g_probes, g_kinds = [probes[i] for i in group], [kinds[i] for i in group]
        ids, attention, positions, offsets = _left_pad([seqs[i] for i in group], probes[0].pad_id, "cpu")
        keep = max(logits_to_keep(p, k) for p, k in zip(g_probes, g_kinds))
        clean = None
        if needs_clean:
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attention, position_ids=positions,
                               logits_to_keep=keep).logits
                clean = _batched_outcomes(logits, g_probes, g_kinds)
        clean_embeds = embed(ids).detach()
        inputs = clean_embeds
        if noise_sigma is not None:
            noise = torch.zeros(clean_embeds.shape)
            for r, (p, off) in enumerate(zip(g_probes, offsets)):
                a = off + p.reasoning_start
                noise[r, a : a + p.reasoning_len] = torch.randn((p.reasoning_len, clean_embeds.shape[-1]),
                                                                generator=generator) * noise_sigma
            inputs = clean_embeds.float() + noise
        inputs = inputs.clone().requires_grad_(True)
        with torch.enable_grad():
            logits = model(inputs_embeds=inputs, attention_mask=attention, position_ids=positions,
                           logits_to_keep=keep).logits
            (grad,) = torch.autograd.grad(objective(_batched_outcomes(logits, g_probes, g_kinds), clean), inputs)
        for r, (i, p, off) in enumerate(zip(group, g_probes, offsets)):
            a = off + p.reasoning_start
            results[i] = (grad[r, a : a + p.reasoning_len].float(), clean_embeds[r, a : a + p.reasoning_len].float())
    return results


def grouped_probes(tokenizer, seed: int) -> list[Probe]:
    """Probes as a GRPO batch has them: groups of responses sharing one prompt, prompts of different
    lengths, one probe without a prompt, one without an answer (LT-Logits fallback)."""
    from dataclasses import replace

    g = torch.Generator().manual_seed(seed)
    probes = []
    for prompt_len, sizes in ((7, (9, 14, 5)), (3, (11, 6)), (12, (8,))):
        prompt = random_probe(tokenizer, g, prompt_len, 1, 0).prompt_ids
        for r in sizes:
            probes.append(replace(random_probe(tokenizer, g, 1, r, 3), prompt_ids=prompt))
    probes.append(random_probe(tokenizer, g, 0, 10, 2))
    probes.append(random_probe(tokenizer, g, 5, 9, 0))
    return probes


@pytest.mark.parametrize("method", ["oar_g", "grad_norm"])
@pytest.mark.parametrize("kind", ["lt_logits", "as_mean", "as_joint"])
@pytest.mark.parametrize("chunk_tokens", [20, 60, 4096])
def test_gradient_scorers_with_the_prompt_cache_equal_the_full_probe_computation(
        model_and_tokenizer, monkeypatch, method, kind, chunk_tokens):
    from oar.method.gate import gate

    model, tokenizer = model_and_tokenizer
    probes = grouped_probes(tokenizer, 21)
    config = ScorerConfig(probe=kind, chunk_tokens=chunk_tokens, noise_sigma=1e-2)
    now = score(method, model, probes, config, seed=5)
    import reference_scorers

    monkeypatch.setattr(reference_scorers, "_embedding_gradients", full_probe_embedding_gradients)
    reference_scorers.use_reference(monkeypatch, method)
    before = score(method, model, probes, config, seed=5)
    assert (before.scores.abs() > 0).any()
    scale = before.scores.abs().amax(dim=1, keepdim=True)
    assert torch.allclose(now.scores, before.scores, rtol=1e-3, atol=1e-4 * float(scale.max())), \
        (now.scores - before.scores).abs().max()
    assert torch.allclose(gate(now.scores, now.reasoning_mask, 0.4, 2.0),
                          gate(before.scores, before.reasoning_mask, 0.4, 2.0), rtol=1e-3, atol=1e-3)


def test_gradient_scorers_leave_the_parameters_gradients_alone_with_the_prompt_cache(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    probes = grouped_probes(tokenizer, 22)
    for p in model.parameters():
        p.grad = None
    score("oar_g", model, probes, ScorerConfig(chunk_tokens=40))
    assert all(p.grad is None for p in model.parameters())
