"""OAR on a task whose answer is not a maths result: a review's label after "Label:".

A tiny model is pretrained here, in seconds, to write ``<the review's words>: <label>.\\nLabel: <label>``
(with a quarter of the labels flipped, so that GRPO's groups are mixed), then trained by OAR-G on the
label's correctness. With the maths defaults its responses have no answer span (no box, no "answer is",
no number): the rows fall back to LT-Logits and the trainer warns, once. With the conclusion ``Label:`` and
the pattern ``Label:(\\s*\\w+)`` the label is the answer span: no row falls back, and the token weights
differ within a response. ``pytest -s`` prints the fallback rate of both."""

from __future__ import annotations

import logging
import random
import re

import pytest
import torch
from datasets import Dataset

from oar.models.tiny import build_tiny_model, build_tiny_tokenizer
from oar.training.grpo_trainer import OARConfig, OARTrainer
from test_trainer import COMMON

GOOD = ("good", "fun", "great", "kind", "warm", "bright")
BAD = ("bad", "dull", "cold", "sad", "grim", "weak")
LABEL = re.compile(r"Label:\s*(\w+)")
OUTCOME = {"oar_conclusion": "Label:", "oar_answer_pattern": r"Label:(\s*\w+)"}


def review(rng: random.Random, flip: float = 0.25) -> tuple[str, str, str]:
    """(prompt, a response as the pretraining writes it, the true label)."""
    words = [rng.choice(GOOD + BAD) for _ in range(3)]
    label = "positive" if sum(w in GOOD for w in words) >= 2 else "negative"
    said = label if rng.random() > flip else {"positive": "negative", "negative": "positive"}[label]
    return f"Review: {' '.join(words)}\n", f"{' '.join(words)}: {said}.\nLabel: {said}", label


@pytest.fixture(scope="module")
def labeller():
    """A tiny Llama pretrained (next-token prediction, 80 steps) to write a review's label."""
    rng = random.Random(0)
    rows = [review(rng) for _ in range(256)]
    tokenizer = build_tiny_tokenizer(vocab_size=400, corpus=[p + r for p, r, _ in rows])
    model, tokenizer = build_tiny_model(seed=0, tokenizer=tokenizer)
    sequences = [tokenizer(p + r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for p, r, _ in rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(80):
        batch = rng.sample(sequences, 16)
        width = max(map(len, batch))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in batch])
        loss = model(input_ids=ids, labels=ids.masked_fill(ids == tokenizer.pad_token_id, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer


def label_reward(completions, label, **kwargs) -> list[float]:
    found = [LABEL.findall(c) for c in completions]
    return [float(bool(f) and f[-1] == truth) for f, truth in zip(found, label, strict=True)]


def train(labeller, tmp_path, steps=2, **outcome):
    """Train OAR-G ``steps`` steps; (its log, every step's probes, every step's token advantages)."""
    model, tokenizer = labeller
    rng = random.Random(1)
    data = Dataset.from_list([{"prompt": p, "label": truth} for p, _, truth in (review(rng, 0) for _ in range(16))])
    torch.manual_seed(0)
    config = OARConfig(output_dir=str(tmp_path / "out"), **(COMMON | {"max_steps": steps, "max_completion_length": 16,
                                                                    "learning_rate": 1e-4}),
                       oar_method="oar_g", **outcome)
    trainer = OARTrainer(model=type(model)(model.config), reward_funcs=label_reward, args=config, train_dataset=data,
                         processing_class=tokenizer)
    trainer.model.load_state_dict(model.state_dict())
    probes, advantages = [], []
    build_probes, generate = trainer._probes, trainer._generate_and_score_completions

    def recording_probes(output, mask):
        probes.append(build_probes(output, mask))
        return probes[-1]

    def recording_generation(inputs):
        output = generate(inputs)
        advantages.append(output["advantages"])
        return output

    trainer._probes, trainer._generate_and_score_completions = recording_probes, recording_generation
    trainer.train()
    return [row for row in trainer.state.log_history if "oar/frac_scored" in row], probes, advantages


def fallback_rate(log: list[dict], rows: int = COMMON["per_device_train_batch_size"]) -> float:
    """Responses fallen back to LT-Logits over the responses scored, over every step."""
    scored = sum(row["oar/frac_scored"] * rows for row in log)
    return sum(row["oar/fallback_no_answer"] for row in log) / scored


def test_a_label_task_falls_back_at_the_maths_defaults_and_is_scored_with_its_own_answer_span(labeller, tmp_path,
                                                                                               caplog):
    with caplog.at_level(logging.WARNING, logger="oar.training.fallback_warning"):
        maths_log, maths_probes, _ = train(labeller, tmp_path / "maths")
    warnings = [r.getMessage() for r in caplog.records if r.name == "oar.training.fallback_warning"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="oar.training.fallback_warning"):
        label_log, label_probes, advantages = train(labeller, tmp_path / "label", **OUTCOME)
    before, after = fallback_rate(maths_log), fallback_rate(label_log)
    print(f"\nfallback rate over {len(maths_log)} steps of OAR-G: maths defaults {before:.3f}, "
          f"Label: pattern {after:.3f}")

    tokenizer = labeller[1]

    def labelled(probe) -> bool:  # the response writes a label
        return LABEL.search(tokenizer.decode(probe.response_ids, skip_special_tokens=True)) is not None

    assert all(row["oar/frac_scored"] > 0 for row in maths_log + label_log)  # mixed groups, scored rows
    maths_rows = [p for step in maths_probes for p in step]
    assert before > 0.9 and not any(p.has_answer for p in maths_rows)
    assert sum(map(labelled, maths_rows)) > 0.75 * len(maths_rows)  # the responses do answer: the rules miss it
    # warned at the first step where most rows fell back, naming the settings to change, and not again
    assert len(warnings) == 1 and "oar_answer_pattern" in warnings[0] and "oar_conclusion" in warnings[0]
    assert not [r for r in caplog.records if r.name == "oar.training.fallback_warning"]

    # with the pattern, exactly the responses that write no label (cut at the length limit, or none) fall back
    label_rows = [p for step in label_probes for p in step]
    assert [p.has_answer for p in label_rows] == [labelled(p) for p in label_rows]
    assert after <= 0.25
    for probe in filter(labelled, label_rows):  # the answer is the label, the reasoning stops before "Label:"
        assert probe.answer_kind == "pattern" and tokenizer.decode(probe.answer_ids).strip() in ("positive", "negative")
        assert not tokenizer.decode(probe.response_ids[: probe.reasoning_len]).rstrip().endswith("Label:")
        assert tokenizer.decode(probe.conclude_ids) == "Label:"
    # OAR's token weights differ within a response: over the reasoning tokens of a row that trains
    differ = [len(set(adv[i, : p.reasoning_len].tolist())) > 1
              for adv, step in zip(advantages, label_probes) for i, p in enumerate(step) if adv[i].abs().sum() > 0]
    assert differ and all(differ)
