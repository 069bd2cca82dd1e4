"""Scoring under several processes: every rank issues the same collectives, whatever its data.

The scorers in ``oar.method.importance`` run a data-dependent number of passes: rows with A != 0, OAR-P
chunks per probe, OAR-G micro-batches. That is harmless on one process and under DDP, and fatal under
FSDP2 unless the weights are gathered first:

- **DDP.** Its collectives live in the wrapper's ``forward`` (bucket rebuild, buffer sync,
  ``prepare_for_backward``) and in the reducer's hooks on each parameter's gradient accumulation.
  The trainer scores with ``accelerator.unwrap_model(model)``, the inner module, so no forward of the
  wrapper runs; OAR-G takes ``torch.autograd.grad`` with respect to the input embeddings only, which
  never accumulates a parameter gradient, so no reducer hook fires. Scoring issues no collective.
- **FSDP2.** ``fully_shard`` changes the model in place (accelerate's ``unwrap_model`` strips DDP,
  DeepSpeed and FSDP1 wrappers, not an ``FSDPModule``), and each sharded module's forward hook
  all-gathers its parameters, reshards them after the forward (and again after the backward), so
  every scoring pass is a round of per-layer all-gathers. Ranks with different numbers of passes
  then pair different layers' all-gathers, or hang at the next training step.

``gathered_for_scoring(model)`` makes FSDP2 scoring collective-free: on entry every rank gathers the
full weights once (one all-gather per sharded module, in module order, on every rank alike) and keeps
them gathered through all scoring passes (no reshard after forward or backward, no gradient
reduction); on exit the modules' settings are restored and every module is resharded, which frees the
gathered weights and clears the iteration state the scoring passes left behind. The alternative,
agreeing on the largest pass count (an all-reduce per phase) and padding with dummy passes, keeps the
per-layer memory of sharding but costs a full round of all-gathers (forward, and again for OAR-G's
backward) per pass, and OAR-P runs one pass per chunk: for Qwen2.5-7B that is ~15 GB of bf16 weights
moved per pass instead of once per step, and the scorers would carry distributed bookkeeping. The
price of gathering once is memory: the full compute-dtype weights sit on every GPU during scoring
(Qwen2.5-7B in bf16: ~15 GB per GPU). Scoring runs between optimizer steps, when the gradients are
freed, so the update's peak (gradients, then activations) is not raised by it.

Other launchers: DeepSpeed ZeRO-3 gathers parameters in module hooks as FSDP does and is not handled
here (the project does not launch it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

try:  # torch.distributed is optional in some builds (it is present in every supported one)
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # pragma: no cover
    FSDPModule = None


def fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """The model's ``fully_shard``-ed modules in module order (the same order on every rank)."""
    if FSDPModule is None:
        return []
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextmanager
def gathered_for_scoring(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block, ``model`` runs any number of forwards (and input-gradient backwards) without
    a collective. A no-op for a model without FSDP2 modules (one process, DDP's inner module)."""
    modules = fsdp_modules(model)
    if not modules:
        yield model
        return
    if modules[0] is not model:
        raise ValueError("gathered_for_scoring needs the fully_shard-ed root module (the one the trainer trains)")

    root = model
    # Lazy init (which FSDP runs on the root's first forward) decides the root's own reshard setting
    # from the settings in force: run it now, before they are changed below.
    root._get_fsdp_state()._lazy_init()
    states = list(dict.fromkeys(m._get_fsdp_state() for m in modules))  # grouped modules share a state
    saved = [
        (
            state._auto_reshard_after_forward,
            [(g.post_forward_mesh_info, g.reshard_after_backward, g.reduce_grads, g.all_reduce_grads)
             for g in state._fsdp_param_groups],
        )
        for state in states
    ]
    try:
        root.set_reshard_after_forward(False)
        root.set_reshard_after_backward(False)
        root.set_requires_gradient_sync(False)
        for module in modules:  # the only collectives of a scoring call, the same on every rank
            module.unshard()
        yield model
    finally:
        for state, (auto, groups) in zip(states, saved):
            state._auto_reshard_after_forward = auto
            for group, (mesh_info, after_backward, reduce, all_reduce) in zip(state._fsdp_param_groups, groups):
                group.post_forward_mesh_info = mesh_info
                group.reshard_after_backward = after_backward
                group.reduce_grads = reduce
                group.all_reduce_grads = all_reduce
        # Reshards every module and clears the per-iteration trackers the scoring forwards filled
        # (post-forward order, a grouped module left mid-forward by OAR-G's own embedding lookup).
        # No gradient reduction is in flight here: scoring reduces none.
        root.reset_iter_state()
