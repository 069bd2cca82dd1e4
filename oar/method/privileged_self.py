"""An RLSD-style privileged self (Yang et al., "Self-Distilled RLVR", arXiv 2604.03128) as a token scorer:
how much more likely the policy finds each token of its response when it is also given the problem's
reference answer.

RLSD's teacher is the policy itself with privileged information r in its context; its student, the same
policy without it. A token's privileged-information gain is

    delta_t = log pi(y_t | x, r, y_<t) - log pi(y_t | x, y_<t)

and RLSD trains with the token weight ``exp(sign(A) delta_t)`` on the reward's advantage A: the verifier
sets the direction, the teacher the size (a token the answer makes likelier is reinforced more in a right
response; one it makes less likely is blamed more in a wrong one). Three scorers read it:

- ``rlsd_signed``: delta_t itself (signed; the token-credit benchmark scores its sign);
- ``rlsd``: |delta_t|, how much the answer changes the token's likelihood, whichever way;
- ``rlsd_weight``: RLSD's own weight ``exp(sign(A_i) delta_t)``, A_i the response's reward minus its group's
  mean (a group whose rewards are equal has A = 0 and weight 1 everywhere: no signal).

It reads the answer key (the ``reference_answer`` need): a ground-truth entry. Choices the definition leaves,
as taken here: the privileged information is the reference answer (not a reference chain), written as
:data:`HINT` into the prompt's last turn: before the prompt's last end-of-turn token (the tokenizer's eos, as
a chat template closes the user's message), or after the prompt where it has none; the hint's ids are the
tokenizer's, the prompt's and the response's stay the ids given. RLSD clips its weight; the bounds are not
known to the project and none are applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

HINT = "\n\nThe reference answer is \\boxed{{{answer}}}."


def privileged_prompt(prompt_ids: Sequence[int], hint_ids: Sequence[int], end_of_turn: int | None) -> tuple[int, ...]:
    """``prompt_ids`` with ``hint_ids`` inserted before its last ``end_of_turn`` token (appended where it has
    none)."""
    prompt = list(prompt_ids)
    at = max((k for k, t in enumerate(prompt) if t == end_of_turn), default=None) if end_of_turn is not None else None
    at = len(prompt) if at is None else at
    return tuple(prompt[:at] + list(hint_ids) + prompt[at:])


def privileged_gains(model, probes: Sequence, references: Sequence[str], tokenizer,
                     chunk_tokens: int = 512) -> list[Tensor]:
    """delta_t of every reasoning token of every probe (float64, host; see the module)."""
    from oar.method.implicit_reward import reasoning_logprobs

    if tokenizer is None:
        raise ValueError("the privileged self writes the reference answer into the prompt: the call needs the "
                         "tokenizer")
    if len(references) != len(probes):
        raise ValueError(f"{len(references)} reference answers for {len(probes)} probes")
    teachers = []
    for p, answer in zip(probes, references):
        hint = tokenizer(HINT.format(answer=answer), add_special_tokens=False)["input_ids"]
        teachers.append(replace(p, prompt_ids=privileged_prompt(p.prompt_ids, hint, tokenizer.eos_token_id)))
    taught = reasoning_logprobs(model, teachers, chunk_tokens)
    plain = reasoning_logprobs(model, probes, chunk_tokens)
    return [t.double() - s.double() for t, s in zip(taught, plain)]


def advantage_signs(groups: Sequence[int], rewards: Sequence[float]) -> list[float]:
    """sign(reward - the group's mean reward) of every row: GRPO's advantage's sign."""
    total: dict[int, list[float]] = {}
    for g, r in zip(groups, rewards):
        total.setdefault(g, []).append(float(r))
    means = {g: sum(v) / len(v) for g, v in total.items()}
    return [float((r > means[g]) - (r < means[g])) for g, r in zip(groups, rewards)]


def rlsd_weights(gains: Sequence[Tensor], signs: Sequence[float]) -> list[Tensor]:
    """RLSD's token weight ``exp(sign(A) delta_t)`` (float32)."""
    return [torch.exp(sign * gain).float() for gain, sign in zip(gains, signs)]
