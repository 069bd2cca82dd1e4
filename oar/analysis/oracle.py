"""Oracle causal tokens (method.md section 8): substitute, re-decode greedily, see if the answer moves.

For one response with reasoning tokens u_1..u_R (its probe from :func:`oar.method.probes.build_probes`),
position j is *causal* when the sequence ``prompt | u_1..u_{j-1} | pad``, continued by greedy decoding,
ends with a final answer (``oar.grading.extraction.extract_answer``, the same extraction as the rewards)
that is not equivalent (``oar.grading.equivalence.answers_match``) to the reference answer. Two references:

- ``"response"``: the response's own answer. Exact when the response is itself a greedy decode (then
  the clean prefix re-decodes to the same response), which is how the workflow samples its held-out set.
- ``"clean"``: the answer of a greedy re-decode of the clean prefix ``prompt | u_1..u_j``, at the
  same position; it isolates the substitution's effect for sampled responses, at twice the cost.

The intervention at position j (``INTERVENTIONS``): ``pad`` (the tokenizer's pad id, as OAR-P), ``space``
(the single token of " "), ``alternative`` (the model's most likely token at j other than u_j and other
than a special token), ``delete`` (u_j removed; u_{j+1} is kept and decoding resumes after it) and
``none`` (u_j kept: a null intervention, whose flips measure the re-decoding's own noise).

Re-decoding is batched: the R prefixes of a response are left-padded into batches of ``batch_size``
(similar lengths together), each decoded with ``model.generate`` (greedy, no repetition penalty) for at
most ``remaining + slack_tokens`` new tokens, ``remaining`` being how many content tokens followed the
prefix in the original response, capped at ``max_new_tokens``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from oar.grading.equivalence import answers_match
from oar.grading.extraction import extract_answer
from oar.method.probes import Probe

REFERENCES = ("response", "clean")
# What replaces reasoning token j before the rest is re-decoded. OAR-P's scorer always substitutes pad (the
# method's definition); the oracle's intervention is a separate choice, because a token the model never
# saw mid-text (pad) can throw a small model off the problem altogether, so that almost every position
# "flips" the answer. "none" is the null intervention (token j kept): it must flip nothing.
INTERVENTIONS = ("pad", "space", "alternative", "delete", "none")


@dataclass
class OracleResult:
    """Oracle of one response. ``answers[j]`` is the answer after substituting reasoning token j."""

    reasoning_len: int
    reference_answer: str | None
    causal: list[int]
    answers: list[str | None]
    clean_answers: list[str | None] | None = None
    intervention: str = "pad"
    tokens_generated: int = 0
    wall_s: float = 0.0
    budgets: list[int] = field(default_factory=list)


def _eos_ids(model, tokenizer) -> list[int]:
    from oar.evaluation.generation import eos_token_ids

    return eos_token_ids(model, tokenizer)


@torch.no_grad()
def greedy_continuations(model, prefixes: Sequence[Sequence[int]], budgets: Sequence[int], pad_id: int,
                         eos_ids: Sequence[int], batch_size: int = 32) -> list[list[int]]:
    """Greedy continuation of each prefix, at most ``budgets[i]`` tokens, cut before the first eos.

    Prefixes are sorted by length and left-padded in batches (attention mask 0 on padding), so the
    result does not depend on the order they are given in.
    """
    if len(prefixes) != len(budgets):
        raise ValueError(f"{len(prefixes)} prefixes for {len(budgets)} budgets")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = next(model.parameters()).device
    order = sorted(range(len(prefixes)), key=lambda i: (len(prefixes[i]), i))
    out: list[list[int]] = [[] for _ in prefixes]
    eos = set(int(e) for e in eos_ids)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        width = max(len(prefixes[i]) for i in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            seq = list(prefixes[i])
            ids[r, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[r, width - len(seq) :] = 1
        new_tokens = max(1, max(budgets[i] for i in batch))
        generated = model.generate(
            input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new_tokens, do_sample=False,
            pad_token_id=pad_id, eos_token_id=list(eos_ids), repetition_penalty=1.0,
        )[:, width:].tolist()
        for r, i in enumerate(batch):
            seq = generated[r][: budgets[i]]
            stop = next((k for k, t in enumerate(seq) if t in eos), None)
            out[i] = seq if stop is None else seq[:stop]
    return out


def space_token_id(tokenizer) -> int:
    """The single token of " " (the neutral substitute); an error if " " is not one token."""
    ids = tokenizer.encode(" ", add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"' ' is {len(ids)} tokens for this tokenizer; intervention 'space' needs one")
    return int(ids[0])


@torch.no_grad()
def alternative_tokens(model, tokenizer, prompt: Sequence[int], response: Sequence[int],
                       positions: Sequence[int]) -> list[int]:
    """For each position j, the model's most likely token at response position j other than
    ``response[j]`` and other than a special token (one forward pass of the clean sequence)."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt) + list(response)], dtype=torch.long, device=device)
    logits = model(input_ids=ids).logits[0].float()
    banned = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long, device=device)
    out = []
    for j in positions:
        row = logits[len(prompt) + j - 1].clone()
        row[banned] = -math.inf
        row[int(response[j])] = -math.inf
        out.append(int(row.argmax()))
    return out


def _answer(tokenizer, ids: Sequence[int], fallback_last_number: bool, answer_statement: bool = True) -> str | None:
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    span = extract_answer(text, fallback_last_number=fallback_last_number, answer_statement=answer_statement)
    return span.text if span is not None else None


def same_answer(a: str | None, b: str | None, timeout_s: float = 5.0) -> bool:
    """Both absent, or equivalent answers."""
    if a is None or b is None:
        return a is None and b is None
    return a == b or answers_match(a, b, timeout_s=timeout_s)


def _content_len(tokenizer, response_ids: Sequence[int]) -> int:
    special = set(tokenizer.all_special_ids)
    n = len(response_ids)
    while n > 0 and response_ids[n - 1] in special:
        n -= 1
    return n


def intervened(prompt: Sequence[int], response: Sequence[int], content: int, j: int, intervention: str,
               substitute: int | None) -> tuple[list[int], int]:
    """(response tokens kept before re-decoding, how many content tokens they stand for) after the
    intervention at position j; the model re-decodes from the end of the kept tokens."""
    if intervention == "none":
        return list(response[: j + 1]), j + 1
    if intervention == "delete":
        kept = list(response[:j]) + list(response[j + 1 : min(j + 2, content)])
        return kept, min(j + 2, content)
    return list(response[:j]) + [int(substitute)], j + 1


def causal_tokens(model, tokenizer, probe: Probe, reference: str = "response", slack_tokens: int = 16,
                  max_new_tokens: int = 256, batch_size: int = 32, fallback_last_number: bool = True,
                  timeout_s: float = 5.0, positions: Sequence[int] | None = None,
                  intervention: str = "pad", answer_statement: bool = True) -> OracleResult:
    """The oracle causal reasoning positions of one response (see the module docstring).

    ``positions`` restricts the positions tried (default: every reasoning token); ``answers`` then holds
    None for the others.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if intervention not in INTERVENTIONS:
        raise ValueError(f"intervention must be one of {INTERVENTIONS}, got {intervention!r}")
    started = time.perf_counter()
    was_training = model.training
    model.eval()
    pad_id = probe.pad_id  # the tokenizer's pad (oar.method.probes.pad_token_id), as OAR-P substitutes
    eos_ids = _eos_ids(model, tokenizer)
    prompt = list(probe.prompt_ids)
    response = list(probe.response_ids)
    r_len = probe.reasoning_len
    content = _content_len(tokenizer, response)
    todo = list(range(r_len)) if positions is None else sorted({int(j) for j in positions})
    if any(j < 0 or j >= r_len for j in todo):
        raise ValueError(f"positions must lie in [0, {r_len})")
    ref_answer = _answer(tokenizer, response[:content], fallback_last_number, answer_statement)

    def budget(consumed: int) -> int:
        return max(1, min(max_new_tokens, content - consumed + slack_tokens))

    try:
        if intervention == "alternative":
            substitutes: list[int | None] = alternative_tokens(model, tokenizer, prompt, response, todo)
        else:
            fixed = {"pad": pad_id, "space": space_token_id(tokenizer) if intervention == "space" else None}
            substitutes = [fixed.get(intervention)] * len(todo)
        kept = [intervened(prompt, response, content, j, intervention, x) for j, x in zip(todo, substitutes)]
        budgets = [budget(consumed) for _, consumed in kept]
        conts = greedy_continuations(model, [prompt + k for k, _ in kept], budgets, pad_id, eos_ids, batch_size)
        tokens = sum(len(c) for c in conts)
        sub_answers = [_answer(tokenizer, k + c, fallback_last_number, answer_statement)
                       for (k, _), c in zip(kept, conts)]
        clean_answers = None
        if reference == "clean":
            clean_budgets = [budget(j + 1) for j in todo]
            clean_prefixes = [prompt + response[: j + 1] for j in todo]
            clean = greedy_continuations(model, clean_prefixes, clean_budgets, pad_id, eos_ids, batch_size)
            tokens += sum(len(c) for c in clean)
            clean_answers = [_answer(tokenizer, response[: j + 1] + c, fallback_last_number, answer_statement)
                             for j, c in zip(todo, clean)]
    finally:
        model.train(was_training)

    answers: list[str | None] = [None] * r_len
    full_clean: list[str | None] | None = [None] * r_len if clean_answers is not None else None
    causal = []
    for k, j in enumerate(todo):
        answers[j] = sub_answers[k]
        target = ref_answer if clean_answers is None else clean_answers[k]
        if full_clean is not None:
            full_clean[j] = clean_answers[k]
        if not same_answer(sub_answers[k], target, timeout_s):
            causal.append(j)
    return OracleResult(reasoning_len=r_len, reference_answer=ref_answer, causal=causal, answers=answers,
                        clean_answers=full_clean, intervention=intervention, tokens_generated=tokens,
                        wall_s=time.perf_counter() - started, budgets=[budget(j + 1) for j in range(r_len)])
