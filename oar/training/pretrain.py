"""Pretrain the testbed's policy from scratch on the chain task (``oar.data.chains``), then measure it.

The testbed needs a base model that has learned the task's grammar but errs where credit matters: it is
pretrained by next-token prediction on solutions whose step results are wrong at ``error_rate`` and
which carry ``filler`` remarks per step. Its sampled pass rate at the RL temperature then sits well
below 1 with most GRPO groups mixed, and its mistakes are at the decisive tokens.

The model is a small Llama with a byte-level BPE vocabulary trained on the task's text (single digits,
ChatML, as ``oar.models.tiny``); the result is an ordinary model folder every later step loads unchanged.
Everything is seeded: the same settings give the same weights on the same machine and torch build.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from oar.data import chains
from oar.data.catalogue import CHAIN_STEPS, chain_split
from oar.prompting import INSTRUCTION, build_prompt


@dataclass(frozen=True)
class PretrainSettings:
    """Config keys ``models.<name>.pretrain.*`` (config/schema.yaml documents and bounds each)."""

    filler: int = 0  # remarks per step in the pretraining solutions
    distractors: int = 0  # words of the note after every step (uniform draws: reward-irrelevant entropy)
    steps: int = CHAIN_STEPS  # operations per problem; the RL data must have as many (chain_* or chain5_*)
    error_rate: float = 0.15  # share of wrong step results in the pretraining solutions
    layers: int = 4
    hidden: int = 128
    vocab_size: int = 416
    updates: int = 1500  # optimiser steps
    batch_size: int = 32
    learning_rate: float = 3e-3
    seed: int = 0
    # the check of the pretrained model: pass rate and mixed groups at the RL sampling settings
    check_prompts: int = 64
    check_group: int = 8
    check_temperature: float = 1.0
    min_mixed_groups: float = 0.3

    def __post_init__(self) -> None:
        chains._check("filler", self.filler, 0, chains.MAX_FILLER)
        chains._check("distractors", self.distractors, 0, chains.MAX_DISTRACTORS)
        chains._check("steps", self.steps, 1, chains.MAX_STEPS)
        if not 0.0 <= self.error_rate < 1.0:
            raise ValueError(f"error_rate must be in [0, 1), got {self.error_rate!r}")


class PretrainedTooWeak(ValueError):
    """The pretrained model leaves too few mixed GRPO groups for RL to learn from."""


def build_tokenizer(vocab_size: int, distractors: bool = False):
    from oar.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer(vocab_size, corpus=chains.corpus_for_tokenizer(distractors) + [INSTRUCTION])


def build_model(settings: PretrainSettings, tokenizer) -> LlamaForCausalLM:
    heads = max(2, settings.hidden // 32)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden,
        intermediate_size=2 * settings.hidden,
        num_hidden_layers=settings.layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=settings.hidden // heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(settings.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def _batch(tokenizer, problems, rng, settings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels (prompt and padding masked out) of one batch."""
    rows = []
    for p in problems:
        prompt = tokenizer(build_prompt(p.text, tokenizer), add_special_tokens=False)["input_ids"]
        text, _ = chains.solution(p, rng, settings.filler, settings.error_rate, settings.distractors)
        response = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        rows.append((prompt, response))
    width = max(len(a) + len(b) for a, b in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for r, (prompt, response) in enumerate(rows):
        seq = prompt + response
        ids[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
        labels[r, len(prompt) : len(seq)] = torch.tensor(response)
    return ids, mask, labels


def pretrain(settings: PretrainSettings, exclude: frozenset[str] = frozenset(), log=print):
    """(model, tokenizer, log rows): ``settings.updates`` AdamW steps with warm-up and cosine decay on
    freshly drawn problems (none of whose texts is in ``exclude``), each with a freshly drawn solution."""
    tokenizer = build_tokenizer(settings.vocab_size, settings.distractors > 0)
    model = build_model(settings, tokenizer)
    model.train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01,
                                  betas=(0.9, 0.98))
    warmup = max(1, settings.updates // 20)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, settings.updates - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, rate)
    rng = random.Random(f"oar-pretrain/{settings.seed}")
    torch.manual_seed(settings.seed)
    index, rows, started = 0, [], time.perf_counter()
    for step in range(settings.updates):
        problems = []
        while len(problems) < settings.batch_size:
            p = chains.problem(f"pretrain-{settings.seed}", index, settings.steps)
            index += 1
            if p.text not in exclude:
                problems.append(p)
        ids, mask, labels = _batch(tokenizer, problems, rng, settings)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        scheduler.step()
        optimiser.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == settings.updates - 1:
            row = {"step": step, "loss": round(loss.item(), 4), "lr": scheduler.get_last_lr()[0],
                   "wall_s": round(time.perf_counter() - started, 1)}
            rows.append(row)
            log(f"pretrain step {step}: loss {row['loss']} ({row['wall_s']} s)")
    model.eval()
    return model, tokenizer, rows


@torch.no_grad()
def sampled_pass_rate(model, tokenizer, problems, group: int, temperature: float, seed: int = 0,
                      max_new_tokens: int = 320) -> dict[str, Any]:
    """Sample ``group`` completions per problem at ``temperature`` (top-p 1, no top-k: the RL sampling)
    and grade them: pass rate, share of mixed groups (some right, some wrong), mean completion length,
    and where the policy's gradient lies in them (:func:`gradient_share`)."""
    from oar.grading.grader import grade

    torch.manual_seed(seed)
    correct, mixed, lengths = [], 0, []
    share = GradientShare()
    for p in problems:
        prompt = tokenizer(build_prompt(p.text, tokenizer), add_special_tokens=False, return_tensors="pt")
        ids = prompt["input_ids"].repeat(group, 1)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=temperature,
                             top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        ok = [bool(grade(t, str(p.answer)).correct) for t in texts]
        for row in out[:, ids.shape[1]:]:
            lengths.append(int((row != tokenizer.pad_token_id).sum()))
        share.add(model, tokenizer, out, ids.shape[1], temperature)
        correct += ok
        mixed += 0 < sum(ok) < len(ok)
    return {"pass_rate": sum(correct) / len(correct), "mixed_groups": mixed / len(problems),
            "prompts": len(problems), "group": group, "temperature": temperature,
            "mean_completion_tokens": sum(lengths) / len(lengths), "gradient_share": share.summary()}


def token_pushes(model, tokenizer, sequences: torch.Tensor, prompt_len: int, temperature: float):
    """For each sampled response of ``sequences`` (prompt, then completion, from temperature
    ``temperature``): the class of each completion token (:func:`oar.data.chains.token_classes`) and its
    ||e_y - pi||, up to the first special token. Responses with no such token are skipped."""
    from oar.method.probes import token_char_spans

    special = set(tokenizer.all_special_ids)
    logits = model(input_ids=sequences, attention_mask=torch.ones_like(sequences)).logits.float()
    probs = torch.softmax(logits[:, prompt_len - 1 : -1] / temperature, dim=-1)
    for row, p in zip(sequences[:, prompt_len:].tolist(), probs):
        n = next((i for i, t in enumerate(row) if t in special), len(row))
        if n == 0:
            continue
        text, starts, ends = token_char_spans(tokenizer, row[:n])
        taken = p[torch.arange(n), torch.tensor(row[:n])]
        norm = (1 - 2 * taken + (p[:n] ** 2).sum(dim=-1)).clamp_min(0).sqrt()  # ||e_y - pi||
        yield chains.token_classes(text, starts, ends), norm


class GradientShare:
    """Where a policy's gradient lies in its own sampled responses, by token class
    (:data:`oar.data.chains.TOKEN_CLASSES`).

    The policy-gradient term of a sampled token y moves the logits along e_y - pi (pi the sampling
    distribution at that position), so ||e_y - pi|| is the size of the push one unit of advantage gives
    it: about 0 for a token the text before forces, large for a free choice. Summed by class over the
    sampled reasoning, it says which tokens GRPO's uniform credit actually spreads over: what any
    reshaping can move. Special tokens (end of turn, padding) are left out.
    """

    def __init__(self):
        self.tokens = {name: 0 for name in chains.TOKEN_CLASSES}
        self.mass = {name: 0.0 for name in chains.TOKEN_CLASSES}
        self.responses = 0

    def add(self, model, tokenizer, sequences: torch.Tensor, prompt_len: int, temperature: float) -> None:
        for classes, norm in token_pushes(model, tokenizer, sequences, prompt_len, temperature):
            for name, size in zip(classes, norm.tolist()):
                self.tokens[name] += 1
                self.mass[name] += size
            self.responses += 1

    def summary(self) -> dict[str, Any]:
        tokens, mass = sum(self.tokens.values()), sum(self.mass.values())
        return {"responses": self.responses, "tokens": tokens,
                "classes": {name: {"token_share": self.tokens[name] / tokens if tokens else math.nan,
                                   "gradient_share": self.mass[name] / mass if mass else math.nan,
                                   "mean_norm": self.mass[name] / self.tokens[name] if self.tokens[name] else math.nan}
                            for name in chains.TOKEN_CLASSES}}


def check_learnable(measured: dict[str, Any], settings: PretrainSettings, key: str) -> None:
    """Stop before any RL job when GRPO would see too few mixed groups (all-right or all-wrong groups
    have advantage 0)."""
    if measured["mixed_groups"] < settings.min_mixed_groups:
        raise PretrainedTooWeak(
            f"{key}: the pretrained model's sampled pass rate is {measured['pass_rate']:.2f} with "
            f"{measured['mixed_groups']:.0%} mixed groups of {measured['group']} (at temperature "
            f"{measured['temperature']}), below {key}.min_mixed_groups = {settings.min_mixed_groups}; "
            f"change {key}.error_rate or {key}.updates")


def write_testbed_model(settings: dict[str, Any], out_dir, seed: int = 0, threads: int | None = None,
                        key: str = "models.<name>.pretrain"):
    """Model source ``chain``: pretrain, check, and save a model folder with its ``pretrain.json``. A
    policy that fails the check leaves nothing behind."""
    from oar.models.sources import save_model_folder

    if threads:
        torch.set_num_threads(int(threads))
    model, tokenizer, report = pretrain_testbed_model({**settings, "seed": seed}, key)
    return save_model_folder(model, tokenizer, out_dir, {"pretrain.json": report})


def pretrain_testbed_model(settings: dict[str, Any], key: str = "models.<name>.pretrain"):
    """(model, tokenizer, report) for source ``chain``: pretrain on problems outside the test split, then
    measure the sampled pass rate on the first ``check_prompts`` training problems and stop with
    :class:`PretrainedTooWeak` when too few groups are mixed."""
    unknown = sorted(set(settings) - set(PretrainSettings.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{key}: unknown settings {', '.join(unknown)}")
    s = PretrainSettings(**settings)
    test = frozenset(p.text for p in chain_split("test", s.steps))
    started = time.perf_counter()
    model, tokenizer, log = pretrain(s, exclude=test)
    pretrain_s = time.perf_counter() - started
    started = time.perf_counter()
    measured = sampled_pass_rate(model, tokenizer, chain_split("train", s.steps)[: s.check_prompts], s.check_group,
                                 s.check_temperature, seed=s.seed)
    measured["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"pretrained model: sampled pass rate {measured['pass_rate']:.3f}, mixed groups "
          f"{measured['mixed_groups']:.2f}, {measured['mean_completion_tokens']:.1f} tokens a completion")
    check_learnable(measured, s, key)
    report = {"settings": asdict(s), "parameters": sum(p.numel() for p in model.parameters()),
              "pretrain_s": round(pretrain_s, 1), "log": log, "check": measured}
    return model, tokenizer, report
