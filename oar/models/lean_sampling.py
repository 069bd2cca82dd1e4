"""A lean sampling loop for a small Llama policy on a CPU: the same distribution as ``generate``, less around it.

``transformers``' ``generate`` spends most of a small policy's decoding time outside arithmetic: each
step it rebuilds attention masks, grows a dynamic KV cache by concatenation, runs the logits processors
and stopping criteria, and walks the model's module tree with its hooks and output classes. For the
testbed's 0.7M-parameter policy that is about three times a bare forward of the same tokens. This loop
runs the same Llama computation (the model's own weights: RMSNorm, rotary embeddings, torch's scaled
dot-product attention, SiLU MLP, output head) over a KV cache allocated once for the whole response,
and samples as ``generate`` does with ``do_sample``: logits in float32, divided by the temperature,
nucleus-filtered as ``TopPLogitsWarper`` filters them, softmax, one ``torch.multinomial`` draw a row
and step (finished rows draw too, then are padded), stopping when every row has ended or at
``max_new_tokens``. So its per-token probabilities equal ``generate``'s for the same prefix to float
rounding (``tests/test_lean_sampling.py``), and its samples follow the same distribution; the
individual draws may differ where rounding moves a probability across a draw's threshold.

It covers what the testbed's training and evaluation ask: a ``LlamaForCausalLM`` with default rotary
embeddings, temperature and top-p sampling or greedy decoding, no top-k, min-p or repetition penalty.
Anything else raises :class:`LeanSamplingUnsupported`, naming what, so that a run never silently
samples from something else; the GPU path keeps vLLM and ``generate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


class LeanSamplingUnsupported(ValueError):
    """The model or the sampling settings are outside what the lean loop implements."""


def left_padded(prompt_ids: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one left-padded batch (every row ends at the last column, where generation goes on)
    and its attention mask: the layout :func:`sample` and transformers' ``generate`` take."""
    width = max(len(ids) for ids in prompt_ids)
    padded = torch.full((len(prompt_ids), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        padded[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids):] = 1
    return padded, mask


def check_supported(model, top_k: int = 0, min_p: float | None = None, repetition_penalty: float = 1.0) -> None:
    """Raise :class:`LeanSamplingUnsupported` where the lean loop would not sample what ``generate`` does."""
    config = model.config
    problems = []
    if config.model_type != "llama":
        problems.append(f"model type {config.model_type!r} (the loop implements Llama)")
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        problems.append(f"rotary embedding type {rope.get('rope_type')!r} (the loop implements 'default')")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        problems.append("biases in attention or MLP")
    if model.device.type != "cpu":
        problems.append(f"device {model.device} (the loop is the CPU path; GPUs use vLLM or generate)")
    if top_k:
        problems.append(f"top_k {top_k}")
    if min_p is not None:
        problems.append(f"min_p {min_p}")
    if repetition_penalty != 1.0:
        problems.append(f"repetition_penalty {repetition_penalty}")
    if problems:
        raise LeanSamplingUnsupported("the lean sampler cannot sample this: " + "; ".join(problems)
                                      + " (use the transformers sampler)")


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # q, k and v projections stacked: one matmul a layer
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # gate and up projections stacked
    down: torch.Tensor


class LeanLlama:
    """A Llama model's weights read once for decoding (views of the model's tensors, so they follow its
    updates; the stacked projections are copies, so build one per sampling call)."""

    def __init__(self, model):
        inner = model.model
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.final_norm = inner.norm.weight
        self.head = model.lm_head.weight
        self.inv_freq = inner.rotary_emb.inv_freq.float()
        self.rope_scale = float(inner.rotary_emb.attention_scaling)
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(_Layer(
                input_norm=layer.input_layernorm.weight,
                qkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                o=attn.o_proj.weight,
                post_norm=layer.post_attention_layernorm.weight,
                gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                down=mlp.down_proj.weight,
            ))

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # as LlamaRMSNorm: in float32, then back to the input's dtype before the weight
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def _rotary(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq  # [B, S, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        return ((emb.cos() * self.rope_scale).to(dtype)[:, None], (emb.sin() * self.rope_scale).to(dtype)[:, None])

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        """Softmax attention of ``q`` over the cached ``k``, ``v`` where ``attend`` allows. A prompt's
        queries go through torch's fused kernel; one new query a row goes through two plain batched matmuls,
        which on a CPU cost a tenth of the fused kernel's masked path at this size (the same arithmetic, in
        another order of rounding)."""
        if self.kv_heads != self.heads:  # grouped-query attention: each key head serves a group of queries
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        if q.shape[2] > 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim ** -0.5
        return torch.matmul(scores.masked_fill(~attend, float("-inf")).softmax(dim=-1), v)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, cache_k: list[torch.Tensor],
                cache_v: list[torch.Tensor], start: int, attend: torch.Tensor) -> torch.Tensor:
        """Logits of the last position of ``ids`` [B, S] written at cache slots ``start .. start + S``;
        ``attend`` [B, 1, S, start + S] says which cached keys each new query sees."""
        rows, length = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self._rotary(positions, x.dtype)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        end = start + length
        for i, layer in enumerate(self.layers):
            h = self._norm(x, layer.input_norm)
            q, k, v = F.linear(h, layer.qkv).split([q_width, kv_width, kv_width], dim=-1)
            q = q.view(rows, length, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(rows, length, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(rows, length, self.kv_heads, self.head_dim).transpose(1, 2)
            cache_k[i][:, :, start:end] = self._rotate(k, cos, sin)
            cache_v[i][:, :, start:end] = v
            attn = self._attention(self._rotate(q, cos, sin), cache_k[i][:, :, :end], cache_v[i][:, :, :end], attend)
            x = x + F.linear(attn.transpose(1, 2).reshape(rows, length, q_width), layer.o)
            h = self._norm(x, layer.post_norm)
            gate, up = F.linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        return F.linear(self._norm(x[:, -1], self.final_norm), self.head)


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` with the tokens outside the nucleus at -inf, as transformers' ``TopPLogitsWarper``
    (ascending sort; tokens whose cumulative probability is at most 1 - top_p go; the top one stays)."""
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False
    return logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))


class _Decoding:
    """One batch's decoding state: the KV cache allocated once for prompt and response, which cached keys
    each row may see (its real prompt tokens and everything generated, never its left padding), and each
    row's next position (as ``generate``: positions count the row's real tokens)."""

    def __init__(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int):
        check_supported(model)
        self.lean = lean = LeanLlama(model)
        rows, self.prompt_len = input_ids.shape
        total = self.prompt_len + max_new_tokens
        self.cache_k = [torch.empty(rows, lean.kv_heads, total, lean.head_dim, dtype=lean.embed.dtype)
                        for _ in lean.layers]
        self.cache_v = [torch.empty_like(k) for k in self.cache_k]
        self.visible = torch.ones(rows, total, dtype=torch.bool)
        self.visible[:, : self.prompt_len] = attention_mask.bool()
        self.slot = 0
        # left padding takes position 1, as generate gives it (its keys are masked anyway)
        self.positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The prompts' next-token logits [B, V]."""
        length = self.prompt_len
        mask = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & self.visible[:, None, None, :length]
        # a left-padding query sees no real key: it sees itself instead (its output is never used)
        mask |= torch.eye(length, dtype=torch.bool)[None, None]
        logits = self.lean.forward(input_ids, self.positions, self.cache_k, self.cache_v, 0, mask)
        self.slot, self.positions = length, self.positions[:, -1:] + 1
        return logits

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token a row [B]; the next-token logits [B, V]."""
        slot = self.slot
        logits = self.lean.forward(tokens[:, None], self.positions, self.cache_k, self.cache_v, slot,
                                   self.visible[:, None, None, : slot + 1])
        self.slot, self.positions = slot + 1, self.positions + 1
        return logits


@torch.inference_mode()
def teacher_forced_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          continuation: torch.Tensor) -> torch.Tensor:
    """The loop's next-token logits [B, T, V] before each token of ``continuation`` [B, T] (and none after
    its last), decoding exactly as :func:`sample` does: what its probabilities are checked by."""
    decoding = _Decoding(model, input_ids, attention_mask, continuation.shape[1])
    logits = [decoding.prefill(input_ids)]
    for t in range(continuation.shape[1] - 1):
        logits.append(decoding.step(continuation[:, t]))
    return torch.stack(logits, dim=1)


@torch.inference_mode()
def sample(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
           eos_token_ids: Sequence[int], pad_token_id: int, temperature: float = 1.0, top_p: float = 1.0,
           greedy: bool = False) -> torch.Tensor:
    """``generate``'s output for left-padded prompts: [B, P + T] ids, the prompt then the completion,
    each row padded with ``pad_token_id`` after its first end-of-sequence token; T is at most
    ``max_new_tokens`` (less when every row ended sooner)."""
    decoding = _Decoding(model, input_ids, attention_mask, max_new_tokens)
    rows, prompt_len = input_ids.shape
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long)
    unfinished = torch.ones(rows, dtype=torch.bool)
    out = torch.empty(rows, prompt_len + max_new_tokens, dtype=torch.long)
    out[:, :prompt_len] = input_ids
    logits = decoding.prefill(input_ids)
    steps = 0
    while True:
        scores = logits.float()
        if greedy:
            tokens = scores.argmax(dim=-1)
        else:
            scores = top_p_filter(scores / temperature if temperature != 1.0 else scores, top_p)
            tokens = torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)
        tokens = torch.where(unfinished, tokens, pad_token_id)  # a finished row draws, then is padded
        out[:, prompt_len + steps] = tokens
        steps += 1
        unfinished &= ~torch.isin(tokens, eos)
        if not unfinished.any() or steps == max_new_tokens:
            return out[:, : prompt_len + steps]
        logits = decoding.step(tokens)
