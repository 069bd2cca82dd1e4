"""OAR scoring under FSDP2 and DDP on CPU: two gloo processes score different numbers of rows, chunks and
micro-batches, then train; nothing hangs and every score equals the single-process score of its row.

``fully_shard`` is applied to the tiny model the way accelerate's ``fsdp2_prepare_model`` does it
(each decoder layer; the tied embedding, final norm and lm_head as one group that stays gathered after
forward; then the root), since accelerate turns FSDP on only on accelerators. Scoring goes through
``oar.training.collective.gathered_for_scoring`` and ``oar.method.importance.score``, the trainer's own path.
Without the gathering, the first training step after unequal scoring fails (gloo: a timed-out recv).
"""

from __future__ import annotations

import datetime
import gc
import os

import pytest
import torch

pytestmark = pytest.mark.slow

WORLD = 2
LR = 0.05
CHUNK_TOKENS = 48  # small, so that OAR-P splits long responses into several chunks
RANK_ROWS = {
    # rank: (responses, active mask). Rank 0: long responses, most rows active; rank 1: short, one active.
    0: ([f"We add {a} and {a + 3}: {a} + {a + 3} = {2 * a + 3}, so the total is {2 * a + 3} apples. "
         f"The final answer is \\boxed{{{2 * a + 3}}}." for a in range(4)]
        + ["so we have 7 left and the answer is 7"],
        [True, True, False, True, True]),
    1: (["The answer is \\boxed{4}.", "x = 3, so y = 6. The final answer is \\boxed{6}.", "it is 9", "total 12"],
        [False, True, False, False]),
}
# each scoring: (scorer, its settings beside the shared ones); OAR-G with its prompt inline reads its logits
# through a hook on the sharded output head
SCORINGS = {"oar_p": ("oar_p", {}), "oar_g": ("oar_g", {}), "oar_g inline": ("oar_g", {"grad_prompt": "inline"})}


def rank_probes(rank, tokenizer):
    from oar.method.probes import build_probes

    responses, active = RANK_ROWS[rank]
    prompt = tokenizer("Question: how many apples are left? Answer:", add_special_tokens=False)["input_ids"]
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for r in responses]
    return build_probes(tokenizer, [prompt] * len(ids), ids), torch.tensor(active)


def rank_batch(rank, vocab_size):
    """The rank's training micro-batch (any token ids do for a language-model loss)."""
    return torch.randint(3, vocab_size, (2, 20), generator=torch.Generator().manual_seed(100 + rank))


def score_rows(model, probes, active):
    from oar.method.importance import score
    from oar.method.scorer_config import ScorerConfig
    from oar.training.collective import gathered_for_scoring

    with gathered_for_scoring(model):
        return {name: score(method, model, probes,
                            ScorerConfig(probe="as_mean", chunk_tokens=CHUNK_TOKENS, **settings),
                            active=active, seed=7).scores
                for name, (method, settings) in SCORINGS.items()}


def worker(rank, mode, out_dir, init_file):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    import torch.distributed as dist

    # A hang still fails within the timeout; a heavily loaded CI machine does not reach it.
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    from oar.models.tiny import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard([model.model.norm, model.model.embed_tokens, model.lm_head], reshard_after_forward=False)
        fully_shard(model)
        trained, scored = model, model
    else:
        from torch.nn.parallel import DistributedDataParallel

        trained = DistributedDataParallel(model)
        scored = trained.module  # what accelerate's unwrap_model hands the trainer
    forwards = []
    scored.register_forward_pre_hook(lambda *_: forwards.append(1))
    optimizer = torch.optim.SGD(trained.parameters(), lr=LR)
    probes, active = rank_probes(rank, tokenizer)
    batch = rank_batch(rank, model.config.vocab_size)

    rounds, passes = [], []
    for _ in range(2):  # score, train a step, score again with the new weights, train again
        forwards.clear()
        rounds.append(score_rows(scored, probes, active))
        passes.append(len(forwards))
        trained.train()
        loss = trained(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    state = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
             for k, v in scored.state_dict().items()}
    torch.save({"rounds": rounds, "passes": passes, "state": state}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    # DDP's reducer holds the process group: drop it first, so that the group's gloo threads are joined
    # here and not during interpreter shutdown, where a still-joinable thread aborts the process.
    del trained, scored, model, optimizer
    gc.collect()
    dist.destroy_process_group()


def reference():
    """Single process: each rank's rows scored alone, and the step on both ranks' batches (mean loss,
    which is what FSDP's and DDP's gradient averaging compute)."""
    from oar.models.tiny import build_tiny_model

    model, tokenizer = build_tiny_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    rounds = []
    for _ in range(2):
        rounds.append({rank: score_rows(model, *rank_probes(rank, tokenizer)) for rank in range(WORLD)})
        model.train()
        batches = [rank_batch(rank, model.config.vocab_size) for rank in range(WORLD)]
        loss = sum(model(input_ids=b, labels=b).loss for b in batches) / WORLD
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return rounds, model.state_dict()


@pytest.mark.parametrize("mode", ["fsdp", "ddp"])
def test_unequal_scoring_on_two_ranks_stays_in_step_and_matches_one_process(mode, tmp_path):
    torch.multiprocessing.spawn(worker, args=(mode, str(tmp_path), str(tmp_path / "init")), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(WORLD)]
    # The ranks really ran different numbers of scoring forwards.
    assert ranks[0]["passes"][0] > ranks[1]["passes"][0] > 0, [r["passes"] for r in ranks]

    expected_rounds, expected_state = reference()
    for round_index in range(2):
        for rank in range(WORLD):
            for method in SCORINGS:
                got = ranks[rank]["rounds"][round_index][method]
                want = expected_rounds[round_index][rank][method]
                # Gathered weights are the full weights (an exact copy): round 0 is bitwise equal; after
                # a step, FSDP's gradient averaging (reduce-scatter) rounds differently from one mean loss.
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6,
                                           msg=f"{mode} round {round_index} rank {rank} {method}")
                assert got.abs().sum() > 0
    for rank in range(WORLD):
        for name, value in expected_state.items():
            torch.testing.assert_close(ranks[rank]["state"][name], value, rtol=1e-5, atol=1e-6, msg=name)
