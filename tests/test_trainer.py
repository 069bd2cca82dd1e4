import json
import math
import os
import shutil
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from oar.method.probes import probes_from_padded
from oar.method.names import GATED, reads_steps, scorer_of
from oar.method.scorer_registry import scorer_spec
from oar.training.grpo_trainer import OARConfig, OARTrainer
from oar.training.settings import SettingsError, resolve_settings

REPO = Path(__file__).resolve().parents[1]
FLAT_PROBLEMS = {"p1", "p3"}  # problems whose every completion gets the same reward (A = 0)


def _texts(completions):
    return [c[-1]["content"] if isinstance(c, list) else c for c in completions]


def parity_reward(completions, **kwargs):
    """Deterministic, varied rewards for a random model (it never answers correctly)."""
    return [float(zlib.crc32(t.encode()) % 2) for t in _texts(completions)]


def partly_flat_reward(completions, problem_id, **kwargs):
    """parity_reward, except that every completion of a 'flat' problem gets 0 (its group has A = 0)."""
    parity = parity_reward(completions)
    return [0.0 if pid in FLAT_PROBLEMS else r for r, pid in zip(parity, problem_id)]


def dataset(n=4, chains=False) -> Dataset:
    """``n`` tiny prompts; with ``chains``, each states a testbed chain problem (a scorer that reads the
    reference solution, first_divergence, solves it from the prompt)."""
    def content(i):
        return f"Start with {i}. Add {i}, then multiply by 2. What is the result?" if chains else f"What is {i} + {i}?"

    return Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": content(i)}], "answer": str(4 * i if chains else 2 * i),
             "problem_id": f"p{i}"}
            for i in range(n)
        ]
    )


COMMON = dict(
    max_steps=1,
    num_generations=4,
    per_device_train_batch_size=8,
    max_completion_length=12,
    learning_rate=1e-3,  # large, so that one step visibly moves the parameters
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    bf16=False,
    seed=3,
    beta=0.0,
    epsilon=0.2,
    loss_type="grpo",
    scale_rewards="group",
    disable_tqdm=True,
)


def make_trainer(model_dir, tmp_path, trainer_cls=OARTrainer, config_cls=OARConfig, reward=parity_reward,
                 trainer_kwargs=None, train_dataset=None, **overrides):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = config_cls(output_dir=str(tmp_path / "out"), **(COMMON | overrides))
    data = train_dataset if train_dataset is not None else dataset()
    return trainer_cls(
        model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tokenizer,
        **(trainer_kwargs or {})
    )


def test_grpo_method_equals_stock_grpo_trainer(tiny_model_dir, tmp_path):
    # Each trainer is built and trained in turn: building one reseeds the global RNG that sampling uses.
    stock = make_trainer(tiny_model_dir, tmp_path / "stock", GRPOTrainer, GRPOConfig)
    stock.train()
    ours = make_trainer(tiny_model_dir, tmp_path / "ours", oar_method="grpo")
    ours.train()
    log_stock, log_ours = stock.state.log_history[0], ours.state.log_history[0]
    # On-policy, the GRPO loss is ~0 (advantages are zero-mean per group); the gradient is not.
    assert log_stock["grad_norm"] > 0 and log_stock["reward_std"] > 0
    assert log_ours["loss"] == log_stock["loss"]
    assert log_ours["grad_norm"] == log_stock["grad_norm"]
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    moved = False
    for (name, a), (_, b) in zip(stock.model.named_parameters(), ours.model.named_parameters()):
        assert torch.equal(a, b), name
        moved |= not torch.equal(a, initial[name])
    assert moved


def generation_batch(trainer) -> list[dict]:
    """One generation batch as TRL's sampler builds it: each prompt repeated num_generations times."""
    rows = [trainer.train_dataset[i] for i in range(2)]
    return [row for row in rows for _ in range(trainer.args.num_generations)]


def test_unit_token_weights_give_exactly_the_scalar_loss(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="grpo")
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop, read by _compute_loss
    batch = trainer._generate_and_score_completions(generation_batch(trainer))
    assert batch["advantages"].dim() == 1 and (batch["advantages"] != 0).any()
    scalar = trainer._compute_loss(trainer.model, batch)
    width = batch["completion_ids"].shape[1]
    token = trainer._compute_loss(trainer.model,
                                  {**batch, "advantages": batch["advantages"][:, None].expand(-1, width).clone()})
    assert torch.equal(scalar, token)


def test_oar_token_advantages_preserve_mass_and_skip_zero_advantage_rows(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, reward=partly_flat_reward, oar_method="oar_p")
    trainer.model.train()
    inputs = [row for i in range(4) for row in [trainer.train_dataset[i]] * 4]  # p1 and p3 are flat
    batch = trainer._generate_and_score_completions(inputs)
    token_adv = batch["advantages"]
    mask = batch["completion_mask"].bool()
    assert token_adv.shape == batch["completion_ids"].shape

    scalar = token_adv.sum(dim=1) / mask.sum(dim=1)  # = A_i, since the weights of a row sum to T_i
    flat = torch.tensor([pid in FLAT_PROBLEMS for pid in (r["problem_id"] for r in inputs)])
    assert torch.equal(scalar[flat], torch.zeros(int(flat.sum())))
    active = scalar != 0
    assert active.sum() > 0
    scored = trainer._metrics["train"]["oar/frac_scored"][-1] * len(inputs)
    assert scored == pytest.approx(active.sum().item())  # only rows with A != 0 were scored
    # Reshaped: some active row carries unequal token advantages, and padding carries none.
    assert any(token_adv[i][mask[i]].unique().numel() > 1 for i in torch.nonzero(active).flatten())
    assert torch.equal(token_adv[~mask], torch.zeros(int((~mask).sum())))
    for name in ("ess_ratio", "top_mass", "fallback_no_answer", "fallback_nonfinite"):
        assert trainer._metrics["train"][f"oar/{name}"], name
    assert trainer._metrics["train"]["oar/ess_ratio"][-1] < 1.0


@pytest.mark.parametrize("method", GATED)
def test_every_method_trains_a_step(tiny_model_dir, tmp_path, method):
    scorer = scorer_of(method)
    reads_reference = scorer is not None and scorer_spec(scorer).reads("reference_model")
    # a scorer that reads a second model (PRIME's) gets the untrained model as its reference
    extra = {"reference_model": AutoModelForCausalLM.from_pretrained(tiny_model_dir)} if reads_reference else None
    # the step balance needs a delimiter the tiny model's responses write: whitespace (a blank line, the maths
    # default, they do not write, which stops the first batch)
    steps = {"oar_step_delimiter": r"\s"} if reads_steps(method) else {}
    # a scorer that reads the reference solution solves it from the prompt: it trains on chain problems
    chains = scorer is not None and scorer_spec(scorer).reads("reference_solution")
    trainer = make_trainer(tiny_model_dir, tmp_path, trainer_kwargs=extra, train_dataset=dataset(chains=chains),
                           oar_method=method, **steps)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["oar/frac_scored"] > 0
    assert 0 < log["oar/ess_ratio"] <= 1
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def _record_cudnn_attention(model, seen: list):
    """A forward pre-hook that records whether cuDNN's attention kernel is enabled at each forward."""
    return model.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))


def test_transformers_generation_runs_without_cudnn_attention_and_the_update_keeps_it(tiny_model_dir, tmp_path):
    """cuDNN's attention builds a graph for every key length ``generate`` decodes (oar.sdpa_kernels):
    TRL's transformers generation runs with it disabled, while the update's forwards keep torch's
    choice, and the choice is torch's again after the step."""
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="grpo")
    during_generation, during_update = [], []
    handle = _record_cudnn_attention(trainer.model, during_generation)
    real_generate = trainer._generate_single_turn

    def generate_then_watch_the_update(*args, **kwargs):
        nonlocal handle
        result = real_generate(*args, **kwargs)
        handle.remove()
        handle = _record_cudnn_attention(trainer.model, during_update)
        return result

    trainer._generate_single_turn = generate_then_watch_the_update
    try:
        trainer.train()
    finally:
        handle.remove()
    assert len(during_generation) >= COMMON["max_completion_length"]  # one forward a decoded token
    assert not any(during_generation)
    assert during_update and all(during_update)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_oar_g_scores_with_the_configured_prompt_layout(tiny_model_dir, tmp_path, monkeypatch):
    """``oar_grad_prompt`` (settings key ``oar.grad_prompt``) reaches the scorer: with ``inline`` every
    scoring call runs the probes whole, never the cached prompt's rows."""
    from oar.method import gradient_scorers

    def cached_rows(*args, **kwargs):
        raise AssertionError("scored over a cached prompt")

    monkeypatch.setattr(gradient_scorers, "_cached_rows", cached_rows)
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="oar_g", oar_grad_prompt="inline")
    trainer.train()
    assert trainer.state.log_history[0]["oar/frac_scored"] > 0


def test_windowed_oar_p_trains_a_step(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="oar_p", oar_window_tokens=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["oar/frac_scored"] > 0 and 0 < log["oar/ess_ratio"] < 1
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_settings_are_validated_with_the_key_named():
    base = {"run_id": "r", "model": "m", "train_file": "f"}
    assert resolve_settings(base)["oar"]["tau"] == 0.4
    for bad, key in [
        ({"learning_rate": 1.0}, "learning_rate"),
        ({"oar": {"tua": 0.4}}, "oar.tua"),
        ({"oar": {"tau": 1.5}}, "oar.tau"),
        ({"method": "oar_x"}, "method"),
        ({"trainer": {"per_device_train_batch_size": 6}}, "per_device_train_batch_size"),
        ({"trainer": {"learning_rate": "2e-5"}}, "trainer.learning_rate"),  # YAML's reading of 2e-5
        ({"oar": {"beta": True}}, "oar.beta"),
        ({"oar": {"span_tokens": 0}}, "oar.span_tokens"),
        ({"oar": {"span_tokens": 2.5}}, "oar.span_tokens"),
        ({"oar": {"window_tokens": -1}}, "oar.window_tokens"),
        ({"oar": {"window_tokens": 8.0}}, "oar.window_tokens"),
    ]:
        with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
            resolve_settings(base | bad)
    with pytest.raises(SettingsError, match="model"):
        resolve_settings({"run_id": "r", "train_file": "f"})


def test_span_tokens_reaches_the_trainer_config(tmp_path):
    from oar.training.run import build_config

    base = {"run_id": "r", "model": "m", "train_file": "f"}
    assert build_config(resolve_settings(base), tmp_path, [0]).oar_span_tokens == 1  # exact OAR-P by default
    assert build_config(resolve_settings(base | {"oar": {"span_tokens": 4}}), tmp_path, [0]).oar_span_tokens == 4


def test_window_tokens_reaches_the_trainer_config(tmp_path):
    from oar.training.run import build_config

    base = {"run_id": "r", "model": "m", "train_file": "f"}
    assert build_config(resolve_settings(base), tmp_path, [0]).oar_window_tokens == 0  # exact OAR-P by default
    assert build_config(resolve_settings(base | {"oar": {"window_tokens": 64}}), tmp_path, [0]).oar_window_tokens == 64


def write_run_inputs(tmp_path, model_dir, method, max_steps, save_steps):
    train_file = tmp_path / "train.jsonl"
    train_file.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + {i}?", "answer": str(2 * i)}) + "\n"
                                  for i in range(8)))
    settings = {
        "run_id": f"{method}-test",
        "method": method,
        "model": str(model_dir),
        "train_file": str(train_file),
        "trainer": {"max_steps": max_steps, "save_steps": save_steps, "max_completion_length": 8},
    }
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def train_command(settings, out_dir):
    return [sys.executable, str(REPO / "workflow_scripts" / "train.py"), "--settings", str(settings),
            "--out-dir", str(out_dir)]


# Runs train.py in a process that SIGKILLs itself as soon as checkpoint-<step> is on disk: a real
# kill at a fixed point. Polling for the checkpoint from outside raced the run itself, which on the
# tiny model finishes its remaining steps in a fraction of a second.
KILL_AFTER_CHECKPOINT = """
import os, runpy, signal, sys
import transformers
kill_step = int(sys.argv[1])
sys.argv = sys.argv[2:]  # the script and its arguments, as if it had been run directly
save = transformers.Trainer._save_checkpoint
def save_then_die(self, *args, **kwargs):
    save(self, *args, **kwargs)
    if self.state.global_step == kill_step:
        os.kill(os.getpid(), signal.SIGKILL)
transformers.Trainer._save_checkpoint = save_then_die
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_train_script_resumes_after_a_kill(tiny_model_dir, tmp_path):
    settings = write_run_inputs(tmp_path, tiny_model_dir, "oar_g", max_steps=5, save_steps=2)
    out = tmp_path / "run"
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}  # this checkout's oar
    script, *args = train_command(settings, out)[1:]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_CHECKPOINT, "2", script, *args],
                            capture_output=True, env=env, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").exists()
    assert not (out / "checkpoints" / "checkpoint-4").exists()
    assert not (out / "done").exists()

    subprocess.run(train_command(settings, out), check=True, capture_output=True, env=env)
    assert (out / "done").exists() and (out / "model" / "config.json").exists()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5]
    assert all(0 < line["score_peak_memory_mb"] <= line["peak_memory_mb"] for line in lines)
    state = json.loads((out / "checkpoints" / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    run = yaml.safe_load((out / "run.yaml").read_text())
    assert run["settings"]["method"] == "oar_g" and run["provenance"]["packages"]["trl"] == "1.16.0"
    assert "commit" in run["provenance"]["git"]


def test_score_all_scores_zero_advantage_rows_without_changing_them(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, reward=partly_flat_reward, oar_method="position",
                           oar_score_all=True)
    trainer.model.train()
    inputs = [row for i in range(4) for row in [trainer.train_dataset[i]] * 4]
    batch = trainer._generate_and_score_completions(inputs)
    probes = probes_from_padded(
        trainer.processing_class, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"],
        batch["completion_mask"]
    )
    with_reasoning = sum(p.reasoning_len > 0 for p in probes)
    assert with_reasoning > 12
    assert trainer._metrics["train"]["oar/frac_scored"][-1] * len(inputs) == pytest.approx(with_reasoning)
    flat = torch.tensor([r["problem_id"] in FLAT_PROBLEMS for r in inputs])
    assert torch.equal(batch["advantages"][flat], torch.zeros_like(batch["advantages"][flat]))


def flat_reward(completions, **kwargs):
    """Every completion gets 0: every group has A = 0."""
    return [0.0] * len(completions)


def test_credit_statistics_are_undefined_without_an_advantage(tiny_model_dir, tmp_path):
    """ESS and top-10% mass are means over responses with A != 0: with none, both are nan, even when
    score_all reshapes the (zero-advantage) rows' weights."""
    trainer = make_trainer(tiny_model_dir, tmp_path, reward=flat_reward, oar_method="position", oar_score_all=True)
    trainer.model.train()
    batch = trainer._generate_and_score_completions(generation_batch(trainer))
    assert not batch["advantages"].any()
    metrics = trainer._metrics["train"]
    assert metrics["oar/frac_scored"][-1] > 0  # the rows were scored and gated
    assert math.isnan(metrics["oar/ess_ratio"][-1])
    assert math.isnan(metrics["oar/top_mass"][-1])
    assert metrics["oar/frac_active"][-1] == 0.0  # the step the untrained-run guard counts as empty


def test_weights_delta_tells_a_trained_model_from_its_base(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from oar.training.run import weights_delta

    same = weights_delta(tiny_model_dir, tiny_model_dir)
    assert same["tensors"] > 0 and same["tensors_changed"] == 0 and same["rel_l2_delta"] == 0.0
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.model.norm.weight.add_(1e-3)  # one tensor moves
    model.save_pretrained(tmp_path / "moved")
    moved = weights_delta(tiny_model_dir, tmp_path / "moved")
    assert moved["tensors_changed"] == 1 and moved["max_abs_delta"] == pytest.approx(1e-3, rel=1e-3)
    assert moved["rel_l2_delta"] > 0
    with pytest.raises(FileNotFoundError, match="safetensors"):
        weights_delta(tiny_model_dir, tmp_path)


STEP_KEYS = ("reward", "reward_std", "entropy", "completion_length", "loss", "ess_ratio", "top_mass", "frac_scored",
             "frac_active", "fallback_no_answer", "fallback_nonfinite", "learning_rate")  # all but times and memory


def test_resume_falls_back_past_a_checkpoint_cut_off_mid_write(tiny_model_dir, tmp_path):
    """trainer_state.json is written in place: a kill can leave it half-written. The rerun must resume from
    the newest checkpoint that reads back and finish exactly as an uninterrupted run."""
    from oar.training.run import weights_delta

    settings = write_run_inputs(tmp_path, tiny_model_dir, "oar_g", max_steps=5, save_steps=2)
    # PYTHONPATH: this checkout's oar, whichever checkout the environment's editable install points to.
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    whole = tmp_path / "whole"
    subprocess.run(train_command(settings, whole), check=True, capture_output=True, env=env, timeout=600)

    out = tmp_path / "run"
    script, *args = train_command(settings, out)[1:]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_CHECKPOINT, "4", script, *args], capture_output=True,
                            env=env, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    newest = out / "checkpoints" / "checkpoint-4"
    state = newest / "trainer_state.json"
    text = state.read_text()
    state.write_text(text[: len(text) // 2])  # what a kill in the middle of the write leaves

    resumed = subprocess.run(train_command(settings, out), capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"removing checkpoint {newest}: trainer_state.json does not read back" in resumed.stdout
    assert f"resuming oar_g-test from {out / 'checkpoints' / 'checkpoint-2'}" in resumed.stdout
    assert (out / "done").exists()

    delta = weights_delta(whole / "model", out / "model")
    assert delta["tensors"] > 0 and delta["tensors_changed"] == 0 and delta["max_abs_delta"] == 0.0
    lines = {name: [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
             for name, run in (("whole", whole), ("resumed", out))}
    assert [line["step"] for line in lines["resumed"]] == [line["step"] for line in lines["whole"]] == [1, 2, 3, 4, 5]
    for got, want in zip(lines["resumed"], lines["whole"]):
        assert {k: got[k] for k in STEP_KEYS} == {k: want[k] for k in STEP_KEYS}
    assert json.loads(state.read_text())["global_step"] == 4  # the rerun saved checkpoint-4 afresh


def test_a_rerun_with_other_settings_starts_afresh(tiny_model_dir, tmp_path):
    """Snakemake reruns a run whose settings.yaml changed: its old checkpoints were trained under the old
    settings and must not be resumed from (the rerun would silently be the old run)."""
    settings = write_run_inputs(tmp_path, tiny_model_dir, "grpo", max_steps=3, save_steps=2)
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = tmp_path / "run"
    subprocess.run(train_command(settings, out), check=True, capture_output=True, env=env, timeout=600)
    same = subprocess.run(train_command(settings, out), capture_output=True, text=True, env=env, timeout=600)
    assert same.returncode == 0 and "resuming grpo-test from" in same.stdout, same.stderr[-3000:]

    changed = yaml.safe_load(settings.read_text())
    changed["trainer"]["learning_rate"] = 3.0e-5
    settings.write_text(yaml.safe_dump(changed))
    rerun = subprocess.run(train_command(settings, out), capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "saved under other settings" in rerun.stdout and "resuming" not in rerun.stdout
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # trained from the start


def test_a_checkpoint_reads_back_only_when_every_file_resume_loads_does(tmp_path):
    """Real files in the Trainer's formats, cut or missing one at a time."""
    from safetensors.torch import save_file

    from oar.training.run import checkpoint_problem, readable_checkpoints

    def write_checkpoint(step, ranks):
        folder = tmp_path / "checkpoints" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.ones(64, 64)}, str(folder / "model.safetensors"))
        torch.save({"state": {0: torch.ones(64, 64)}}, folder / "optimizer.pt")
        torch.save({"last_epoch": step}, folder / "scheduler.pt")
        for name in (["rng_state.pth"] if ranks == 1 else [f"rng_state_{r}.pth" for r in range(ranks)]):
            torch.save({"cpu": torch.random.get_rng_state()}, folder / name)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        return folder

    def cut(path):
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])

    good = write_checkpoint(2, ranks=2)
    assert checkpoint_problem(good, world_size=2) is None
    assert "rng_state_2.pth" in checkpoint_problem(good, world_size=4)  # resumed on more processes
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state_1.pth", "trainer_state.json"):
        folder = write_checkpoint(10, ranks=2)
        cut(folder / name)
        assert name in checkpoint_problem(folder, world_size=2), name
        (folder / name).unlink()
        assert checkpoint_problem(folder, world_size=2) is not None, name
        readable, unreadable = readable_checkpoints(tmp_path / "checkpoints", world_size=2)
        assert readable == [good] and list(unreadable) == [folder]
        shutil.rmtree(folder)
    wrong_step = write_checkpoint(6, ranks=1)
    (wrong_step / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    assert "global_step" in checkpoint_problem(wrong_step, world_size=1)


def test_correctness_reward_counts_undecided_grades():
    from oar.training.grpo_trainer import correctness_reward

    reward = correctness_reward(timeout_s=0.3)
    # 10^(10^8): sympy needs minutes, so the symbolic check times out twice and the grade is undecided
    completions = [r"so \boxed{10^{10^{8}}}", r"so \boxed{\frac{1}{\sin x}}", r"so \boxed{8}"]
    assert reward(completions, answer=["7", r"\csc x", "7"]) == [0.0, 1.0, 0.0]
    assert reward.undecided == 1


def test_trainer_logs_undecided_grades_per_generation_batch(tiny_model_dir, tmp_path):
    def reward(completions, **kwargs):
        reward.undecided += 3  # as oar.training.grpo_trainer.correctness_reward counts them
        return parity_reward(completions, **kwargs)

    reward.undecided = 0
    trainer = make_trainer(tiny_model_dir, tmp_path, reward=reward, oar_method="grpo")
    trainer.model.train()
    trainer._generate_and_score_completions(generation_batch(trainer))
    assert trainer._metrics["train"]["grading/undecided"] == [3.0] and reward.undecided == 0
    trainer._generate_and_score_completions(generation_batch(trainer))
    assert trainer._metrics["train"]["grading/undecided"] == [3.0, 3.0]


@pytest.mark.parametrize("method", ["grpo", "truth_final"])
def test_step_credit_is_logged_for_every_method_when_asked(tiny_model_dir, tmp_path, method):
    """oar.log_step_credit logs the mediator for GRPO too (its uniform weights give each step's decisive
    tokens their share of the tokens), and metrics.jsonl carries the keys only for runs that log them."""
    from oar.method.metrics import STEP_CREDIT
    from oar.training.run import metrics_line

    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method=method, oar_log_step_credit=True)
    trainer.model.train()
    trainer._generate_and_score_completions(generation_batch(trainer))
    logged = {name: trainer._metrics["train"][f"oar/{name}"][-1] for name in STEP_CREDIT}
    if method == "grpo":
        assert logged["final_step_weight_share"] == pytest.approx(logged["final_step_token_share"])
        assert logged["early_steps_weight_share"] == pytest.approx(logged["early_steps_token_share"])
    line = metrics_line({"reward": 0.5, **{f"oar/{k}": v for k, v in logged.items()}}, step=1)
    assert all(name in line for name in STEP_CREDIT)
    assert not any(name in metrics_line({"reward": 0.5}, step=1) for name in STEP_CREDIT)

    quiet = make_trainer(tiny_model_dir, tmp_path / "quiet", oar_method=method)
    quiet.model.train()
    quiet._generate_and_score_completions(generation_batch(quiet))
    assert not any(f"oar/{name}" in quiet._metrics["train"] for name in STEP_CREDIT)


def test_ktae_rule_trains_grpo_advantages_plus_the_key_values_with_no_gate(tiny_model_dir, tmp_path):
    """KTAE's own rule (oar.method.advantage_rules): every completion token's advantage is GRPO's A_i (TRL's
    group-standardised one) plus the released key-token value of its type in its group, padding 0; then it
    trains a few real steps."""
    from oar.method.ktae import group_values

    trainer = make_trainer(tiny_model_dir, tmp_path, oar_method="ktae_rule", max_steps=3)
    trainer.model.train()
    inputs = generation_batch(trainer)
    batch = trainer._generate_and_score_completions(inputs)
    ids, mask = batch["completion_ids"], batch["completion_mask"].bool()
    rewards = trainer._rewards.view(-1, 4)
    expected_a = ((rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + 1e-4)).flatten()
    pad = trainer.processing_class.pad_token_id
    mixed = 0
    for g in range(2):
        rows = range(4 * g, 4 * g + 4)
        correct = [bool(trainer._rewards[i] > 0) for i in rows]
        mixed += 0 < sum(correct) < 4
        values = group_values([ids[i][mask[i]].tolist() for i in rows], correct, excluded=(pad,))
        for i in rows:
            want = torch.tensor([expected_a[i] + values[t] for t in ids[i][mask[i]].tolist()])
            assert torch.allclose(batch["advantages"][i][mask[i]], want, atol=1e-5), i
    assert mixed > 0  # the rule had a group to read
    assert torch.equal(batch["advantages"][~mask], torch.zeros(int((~mask).sum())))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert len([h for h in trainer.state.log_history if "loss" in h]) == 3
    assert any(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_a_signed_scorer_is_refused_as_a_method_and_the_rule_is_no_gate(tiny_model_dir, tmp_path):
    from oar.training.grpo_trainer import MethodSetup, method_line
    from oar.training.settings import OARSettings

    with pytest.raises(Exception, match="signed"):
        make_trainer(tiny_model_dir, tmp_path, oar_method="ktae_signed")
    setup = MethodSetup.of("ktae_rule", OARSettings())
    assert not setup.gated and setup.rule is not None and "no gate" in method_line(setup)
