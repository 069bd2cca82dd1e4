"""The library's public surface as a TRL user writes it, for `make typecheck` (mypy; never run or collected).

mypy checks this file and examples/ against the annotations of oar/ (pyproject's [tool.mypy]). The lines
marked `# type: ignore[...]` are mistakes mypy must reject: with `warn_unused_ignores`, the check fails
the day one of them is accepted (an `oar_*` field no longer declared with its type, say).
"""

from __future__ import annotations

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import oar
from oar import OARConfig, OARSettings, OARTrainer, ScorerConfig, ScoringBatch, register_scorer


def exact_answer(completions: list[str], answer: list[str], **kwargs: object) -> list[float]:
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def configs() -> list[OARConfig]:
    """Every kind of oar_* field, by keyword, beside GRPOConfig's own."""
    return [
        OARConfig(output_dir="out", oar_method="oar_g", oar_tau=0.4, oar_beta=2.0, oar_floor=0.1, num_generations=4),
        OARConfig(output_dir="out", oar_method="oar_p", oar_chunk_tokens=4096, oar_window_tokens=64,
                  oar_probe="as_joint", oar_fallback_last_number=False, oar_substitute="pad", oar_telemetry=False),
        OARConfig(output_dir="out", oar_tau=1),  # an int where a float is declared is fine
    ]


def mistakes() -> None:
    """What mypy must reject (each ignore is unused, and so an error, the day it is accepted)."""
    OARConfig(output_dir="out", oar_tau="x")  # type: ignore[arg-type]
    OARConfig(output_dir="out", oar_chunk_tokens="512")  # type: ignore[arg-type]
    OARConfig(output_dir="out", oar_fallback_last_number="no")  # type: ignore[arg-type]
    OARConfig(output_dir="out", oar_tua=0.4)  # type: ignore[call-arg]
    OARSettings(tau="x")  # type: ignore[arg-type]


def trainer(config: OARConfig, dataset: Dataset) -> OARTrainer:
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    settings: OARSettings = config.oar_settings()
    tau: float = config.oar_tau + settings.tau
    assert tau >= 0
    return OARTrainer(model=model, reward_funcs=[exact_answer, oar.correctness_reward()], args=config,
                      train_dataset=dataset, processing_class=tokenizer, reference_model=model)


@register_scorer("length_rank", needs=("model",))
def length_rank(batch: ScoringBatch) -> list[torch.Tensor]:
    return [torch.arange(probe.reasoning_len, dtype=torch.float32) for probe in batch.probes]


def scoring(model: torch.nn.Module, tokenizer: AutoTokenizer, config: OARConfig) -> torch.Tensor:
    """Scoring outside training, as docs/library.md shows it."""
    probes = oar.make_probes(tokenizer, prompts=[[{"role": "user", "content": "What is 2 + 3?"}]],
                             responses=["2 + 3 = 5, so the answer is \\boxed{5}."], settings=config)
    scorer_config: ScorerConfig = config.oar_settings().scorer_config()
    scores: oar.Scores = oar.score("oar_g", model, probes, scorer_config, seed=0)
    return oar.gate(scores.scores, scores.reasoning_mask, tau=0.4, beta=2.0, floor=0.1)
