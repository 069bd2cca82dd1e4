"""What every scorer takes besides the model and the probes: ``ScorerConfig``, its settings with their
defaults and argument checks (torch-free, so a script's options can default to them before torch loads).

A training run fills it from its ``oar`` settings (``oar.training.settings.OARSettings``, which checks
them under their settings keys); the held-out scoring script from its options.
"""

from __future__ import annotations

from dataclasses import dataclass

from oar.method.names import ATTENTION_CHOICES, GRAD_PROMPTS, PROBES


@dataclass(frozen=True)
class ScorerConfig:
    """Settings shared by every scorer.

    probe: outcome probe (``lt_logits``, ``as_mean``, ``as_joint``); the trainer passes ``lt_logits``
        during its warm-up steps.
    noise_sigma: OAR-G's absolute Gaussian noise on reasoning embeddings (the KL gradient is zero at
        the clean point).
    chunk_tokens: memory budget of one forward, in tokens: OAR-P's substituted copies of all responses
        of a call are stacked into forwards of at most this many new tokens (rows x longest row), and
        every scorer groups probes up to this many tokens. Smaller chunks pad less but launch more
        forwards: 512 was fastest on 2 CPU cores (bench/scoring_cost.py); on a GPU, where a forward's
        fixed cost dominates, use several thousand.
    grad_chunk_tokens: the same budget for OAR-G's and grad_norm's micro-batches, whose forward with grad
        and its backward hold far more per token than a no-grad forward; 0 (the default) uses
        ``chunk_tokens``. Set it where ``chunk_tokens`` is sized for OAR-P's no-grad forwards beyond what
        OAR-G's fit (config/paper.yaml's 7B model).
    seed: noise (OAR-G) and random-control seed; scores are reproducible for a fixed seed.
    span_tokens: OAR-P substitutes this many consecutive reasoning tokens at once and gives the span's
        divergence to each of its tokens; 1 is the exact one-token-at-a-time definition. A width w
        runs about R / w substituted suffixes instead of R (cost ~R^2 / (2 w) token-forwards).
    window_tokens: OAR-P with a local window (``oar.method.substitution.window_substitution_scores``): after each substitution
        only this many reasoning tokens from the substituted one, and the conclusion and answer, are
        recomputed; the later reasoning keeps its clean keys and values (cost ~R x (window + tail)
        token-forwards). 0 recomputes the whole suffix, the exact definition.
    attention: the SDPA kernels of the scoring forwards (``oar.method.attention_kernels``): ``no_cudnn``
        (every kernel but cuDNN's, which builds a graph per new shape) or ``torch_default``.
    grad_prompt: how OAR-G and grad_norm run each probe's prompt (``oar.method.gradient_scorers``):
        ``cached``, each distinct prompt once into a KV cache under the probes' left-padded rows (a 4D
        mask: on a GPU the memory-efficient attention kernel), or ``inline``, every probe's whole sequence
        in a right-padded row with no mask (causal attention alone: flash attention on a GPU), the prompt
        recomputed per probe. The same scores to float rounding.
    """

    probe: str = "as_mean"
    noise_sigma: float = 1e-3
    chunk_tokens: int = 512
    grad_chunk_tokens: int = 0
    seed: int = 0
    span_tokens: int = 1
    window_tokens: int = 0
    attention: str = "no_cudnn"
    grad_prompt: str = "cached"

    def __post_init__(self):
        if self.probe not in PROBES:
            raise ValueError(f"probe must be one of {PROBES}, got {self.probe!r}")
        if self.noise_sigma <= 0:
            raise ValueError(f"noise_sigma must be > 0, got {self.noise_sigma}")
        if self.chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {self.chunk_tokens}")
        if isinstance(self.grad_chunk_tokens, bool) or not isinstance(self.grad_chunk_tokens, int) or \
                self.grad_chunk_tokens < 0:
            raise ValueError(f"grad_chunk_tokens must be an integer >= 0, got {self.grad_chunk_tokens!r}")
        if isinstance(self.span_tokens, bool) or not isinstance(self.span_tokens, int) or self.span_tokens < 1:
            raise ValueError(f"span_tokens must be an integer >= 1, got {self.span_tokens!r}")
        if isinstance(self.window_tokens, bool) or not isinstance(self.window_tokens, int) or self.window_tokens < 0:
            raise ValueError(f"window_tokens must be an integer >= 0, got {self.window_tokens!r}")
        if self.attention not in ATTENTION_CHOICES:
            raise ValueError(f"attention must be one of {ATTENTION_CHOICES}, got {self.attention!r}")
        if self.grad_prompt not in GRAD_PROMPTS:
            raise ValueError(f"grad_prompt must be one of {GRAD_PROMPTS}, got {self.grad_prompt!r}")

    @property
    def grad_budget(self) -> int:
        """Tokens of one micro-batch with grad (OAR-G, grad_norm)."""
        return self.grad_chunk_tokens or self.chunk_tokens
