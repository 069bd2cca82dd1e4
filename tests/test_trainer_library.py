"""OARTrainer as a TRL user meets it: a scorer of one's own (by name or import path, reading groups and
rewards or a reference model), TRL's own keys reaching TRL (top_entropy_quantile), the model card of every
checkpoint, telemetry off unless asked for, and each process's own scoring seed."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub import ModelCard
from trl.trainer import base_trainer

from pathlib import Path

from oar.method.scorer_registry import register_scorer
from oar.training.grpo_trainer import OARConfig, OARTrainer, scoring_seed
from test_trainer import COMMON, dataset, parity_reward

REPO = Path(__file__).resolve().parents[1]


def make_trainer(model_dir, tmp_path, reference_model=None, peft_config=None, **overrides):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = OARConfig(output_dir=str(tmp_path / "out"), **(COMMON | overrides))
    return OARTrainer(model=model, reward_funcs=parity_reward, args=config, train_dataset=dataset(),
                      processing_class=AutoTokenizer.from_pretrained(model_dir), reference_model=reference_model,
                      peft_config=peft_config)


def test_a_users_scorer_by_import_path_trains(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="user_scorers:last_tokens_first")
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["oar/frac_scored"] > 0 and log["oar/ess_ratio"] < 1  # scored and reshaped


def test_a_group_scorer_gets_each_prompts_responses_and_rewards(tiny_model_dir, tmp_path, registered):
    calls = []
    registered("reward_echo")

    @register_scorer("reward_echo", needs=("groups",))
    def reward_echo(batch):
        calls.append((list(batch.groups), list(batch.rewards)))
        return [torch.arange(p.reasoning_len, dtype=torch.float32) * (1 + r)
                for p, r in zip(batch.probes, batch.rewards)]

    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="reward_echo")
    # first called at construction, on the made-up batch: one group of two rows (oar.training.scorer_checks)
    assert calls == [([0, 0], [1.0, 0.0])]
    trainer.train()
    _, (groups, rewards) = calls
    # num_generations 4: whole groups of four consecutive rows, each group's rewards as TRL computed them
    assert len(groups) % 4 == 0 and all(groups[i] == groups[i - i % 4] for i in range(len(groups)))
    assert set(rewards) <= {0.0, 1.0} and len(rewards) == len(groups)
    with pytest.raises(ValueError, match="per_device_train_batch_size \\(6\\) must be a multiple of num_generations"):
        make_trainer(tiny_model_dir, tmp_path / "uneven", oar_method="reward_echo", num_generations=4,
                     per_device_train_batch_size=6, generation_batch_size=12)


def test_a_reference_model_scorer_reads_the_model_it_is_given(tiny_model_dir, tmp_path, registered):
    from transformers import AutoModelForCausalLM

    seen = []
    registered("log_ratio")

    @register_scorer("log_ratio", needs=("model", "reference_model"))
    def log_ratio(batch):
        seen.append(batch.reference_model)
        rows = []
        for p in batch.probes:
            ids = torch.tensor([list(p.prompt_ids) + list(p.response_ids[: p.reasoning_len])])
            with torch.no_grad():
                now = torch.log_softmax(batch.model(input_ids=ids).logits[0, :-1].float(), -1)
                then = torch.log_softmax(batch.reference_model(input_ids=ids).logits[0, :-1].float(), -1)
            taken = ids[0, 1:, None]
            ratio = (now.gather(-1, taken) - then.gather(-1, taken)).squeeze(-1)[-p.reasoning_len:]
            rows.append(ratio.abs())
        return rows

    with pytest.raises(ValueError, match="'log_ratio' reads a reference model: pass OARTrainer\\(reference_model"):
        make_trainer(tiny_model_dir, tmp_path / "none", oar_method="log_ratio")
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trainer = make_trainer(tiny_model_dir, tmp_path / "given", oar_method="log_ratio", reference_model=reference)
    trainer.train()
    # called at construction (the made-up batch's check), then in the step
    assert seen == [reference, reference] and not any(p.requires_grad for p in reference.parameters())


def test_top_entropy_quantile_reaches_trl(tiny_model_dir, tmp_path, monkeypatch):
    """TRL's 80/20 rule (``trainer.top_entropy_quantile``): the settings key becomes GRPOConfig's, and
    TRL's loss masks all but the top-entropy tokens (its mask is computed: it is below 1)."""
    from oar.training.run import build_config
    from oar.training.settings import resolve_settings

    settings = resolve_settings({"run_id": "r", "model": str(tiny_model_dir), "train_file": "f", "method": "oar_g",
                                 "trainer": {"top_entropy_quantile": 0.2}})
    assert build_config(settings, tmp_path / "c").top_entropy_quantile == 0.2
    thresholds = []
    original = OARTrainer.get_high_entropy_mask

    def spy(self, entropies, mask, threshold):
        thresholds.append(threshold)
        return original(self, entropies, mask, threshold)

    monkeypatch.setattr(OARTrainer, "get_high_entropy_mask", spy)
    make_trainer(tiny_model_dir, tmp_path / "q", oar_method="oar_g", top_entropy_quantile=0.2).train()
    assert thresholds and all(t == pytest.approx(0.8) for t in thresholds)


def test_every_checkpoint_has_oars_model_card(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="oar_g", save_strategy="steps", save_steps=1,
                           oar_tau=0.3)
    trainer.train()
    out = tmp_path / "out"
    for card in (out / "README.md", out / "checkpoint-1" / "README.md"):
        text = card.read_text()
        assert "fine-tuned with **OAR**" in text and "eprint  = {arXiv:2601.07408}" in text, card
        assert "**Method: `oar_g`**" in text and "| `tau` | `0.3` |" in text and "| `probe` | `'as_mean'` |" in text
        assert f"the local model folder `{tiny_model_dir}`" in text and "[None]" not in text
        assert "Outcome-Grounded Advantage Reshaping" in text and "a method introduced in [DeepSeekMath" not in text
        assert "This folder holds the full fine-tuned model" in text and "PEFT" not in text
        data = ModelCard.load(card).data
        # TRL's metadata kept (its tag, the model's name), OAR's added; a local base is named in the text only
        assert data.library_name == "transformers" and data.model_name == "out" and data.base_model is None
        assert {"generated_from_trainer", "trl", "grpo", "oar", "token-level-credit"} <= set(data.tags), card


def test_a_lora_runs_cards_say_the_folder_holds_an_adapter_with_peft_and_trls_metadata(tiny_model_dir, tmp_path):
    peft = pytest.importorskip("peft")
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="oar_g", save_strategy="steps", save_steps=1,
                           peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                       task_type="CAUSAL_LM"))
    trainer.train()
    out = tmp_path / "out"
    trainer.save_model(str(out))
    for folder in (out, out / "checkpoint-1"):
        assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
        card = folder / "README.md"
        text, data = card.read_text(), ModelCard.load(card).data
        assert "This folder holds a **PEFT adapter** (LORA)" in text and f"- PEFT: {peft.__version__}" in text
        assert "**Method: `oar_g`**" in text and "eprint  = {arXiv:2601.07408}" in text
        # PEFT's metadata (library, base model, pipeline, its adapter tags) and TRL's tag beside OAR's
        assert data.library_name == "peft" and data.base_model == str(tiny_model_dir), card
        assert data.pipeline_tag == "text-generation" and "lora" in data.tags and "generated_from_trainer" in data.tags
        assert {"oar", "grpo", "trl"} <= set(data.tags)
    # the adapter loads over its base, as the card says
    reloaded = peft.AutoPeftModelForCausalLM.from_pretrained(str(out))
    assert reloaded.active_peft_config.r == 4


def test_the_cards_citation_is_citation_cff():
    import yaml

    from oar.training.model_card import PAPER

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())["preferred-citation"]
    assert " ".join(cff["title"].split()) == PAPER["title"] and cff["year"] == PAPER["year"]
    assert cff["identifiers"][0]["value"] == f"arXiv:{PAPER['arxiv']}"
    assert [f"{a['family-names']}, {a['given-names']}" for a in cff["authors"]] == list(PAPER["authors"])


@pytest.mark.parametrize("asked", [False, True])
def test_trl_telemetry_is_sent_only_when_asked(tiny_model_dir, tmp_path, monkeypatch, asked):
    """TRL 1.16 pings the hub from GRPOTrainer.__init__ (huggingface_hub's send_telemetry, rank 0, not
    under CI); OARTrainer sends nothing unless oar_telemetry is set. The network call itself is recorded,
    not made."""
    sent = []
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(base_trainer, "send_telemetry", lambda **kwargs: sent.append(kwargs["topic"]))
    make_trainer(tiny_model_dir, tmp_path, oar_method="grpo", oar_telemetry=asked)
    assert sent == (["trl/other"] if asked else [])


def test_each_process_scores_with_its_own_seed_and_process_zero_with_the_one_process_seed():
    from oar.method.importance import score
    from oar.method.probes import Probe

    # one process (and process 0) draws what it drew before ranks had seeds of their own
    assert [scoring_seed(3, step, 0) for step in range(3)] == [3 * 1_000_003 + step for step in range(3)]
    # distinct where torch's CPU generator reads them (a seed's low 32 bits), over a run's steps and ranks
    seeds = {scoring_seed(7, step, rank) % (1 << 32) for step in (0, 1, 999, 50_000, (1 << 20) - 1)
             for rank in range(64)}
    assert len(seeds) == 5 * 64
    probe = Probe(prompt_ids=(1, 2), response_ids=tuple(range(3, 40)), reasoning_len=30, conclude_ids=(4,),
                  answer_ids=(5,), pad_id=0)
    draws = [score("random", None, [probe], seed=scoring_seed(3, 5, rank)).scores for rank in (0, 1)]
    assert not torch.equal(*draws)
    before = torch.rand(30, generator=torch.Generator().manual_seed(3 * 1_000_003 + 5))
    assert torch.equal(draws[0][0, :30], before)
