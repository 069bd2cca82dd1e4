r"""The step balance: each reasoning step's share of the gate's weight held to its share of the tokens.

The mechanism test located what costs OAR's scorers accuracy: credit on the last step that the earlier
steps do not get. The answer is copied from the last step, so a scorer that reads the answer's distribution
(OAR-G, OAR-P) ranks the last step's tokens above every earlier step's, and the gate turns that ranking
into weight moved from the earlier steps to the last. Holding the last step's parsed decisive tokens to the
rest's weight recovered OAR-G's loss, but no real task has parsed decisive tokens. What every response does
have is its own steps, written between delimiters. The step balance removes the credit moved *between*
steps and keeps the scorer's ranking *within* each step:

    for each step k of a response, with n_k reasoning tokens and gate weights w_t:
        w'_t = w_t * n_k / sum_{u in step k} w_u

so each step's weights sum to its number of tokens, and the reasoning's sum to R (the gate's mass
preservation, kept exactly: the last operation rescales the row to the sum it had). A response of one step
is returned as it was; so is every non-reasoning position. The balance is idempotent.

Steps are split by the response's own delimiters: a regular expression (``oar.step_delimiter``); a token
belongs to the step in which its last character lies, the delimiter's characters closing the step before
it. The maths default is a blank line (``\n\n``), how step-by-step maths solutions separate their steps;
the chain task writes its steps as sentences, so a chain run sets ``\.\s``. Torch-free but for
:func:`balance_steps` (the settings read the delimiter's check from here).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

MATHS_DELIMITER = "\n\n"  # a blank line between steps: the maths default


def delimiter_problem(value: Any) -> str | None:
    """What is wrong with a step delimiter setting, or None: a regular expression that compiles and matches
    no empty text (a delimiter that can match nothing would cut everywhere)."""
    if not isinstance(value, str) or not value:
        return f"must be a non-empty regular expression (a string), got {value!r}"
    try:
        pattern = re.compile(value)
    except re.error as error:
        return f"must be a regular expression, got {value!r} ({error})"
    if pattern.fullmatch(""):
        return f"must not match the empty text (it would cut between every character), got {value!r}"
    return None


def step_cuts(text: str, delimiter: str) -> list[int]:
    """The character offsets where the steps of ``text`` start after its first: each delimiter match's end,
    where text follows it (a delimiter at the very end closes the last step and starts none)."""
    return [m.end() for m in re.finditer(delimiter, text) if m.end() < len(text) and m.end() > m.start()]


def count_steps(text: str, delimiter: str) -> int:
    """How many steps ``text`` splits into (1 where the delimiter never cuts it)."""
    return len(step_cuts(text, delimiter)) + 1


def token_steps(text: str, ends: Sequence[int], delimiter: str) -> tuple[int, ...]:
    """The step (0, 1, ...) of each token of ``text`` that ends at ``ends[j]`` (exclusive): how many cuts
    (:func:`step_cuts`) lie at or before its last character. A token is placed by its last character so that
    a word token carrying the delimiter's space before it (" Note") opens the next step, and a token of the
    delimiter alone (". ") closes the step before it."""
    cuts = step_cuts(text, delimiter)
    out, k = [], 0
    for end in ends:
        while k < len(cuts) and cuts[k] <= end - 1:
            k += 1
        out.append(k)
    return tuple(out)


def balance_steps(weights: Tensor, reasoning_mask: Tensor, steps: Sequence[Sequence[int] | None]) -> Tensor:
    """Per row, each step's reasoning weights rescaled to sum to its number of tokens (module docstring).

    Args:
        weights: [B, T] the gate's weights (positive on reasoning positions).
        reasoning_mask: [B, T] bool, True on the row's reasoning positions (the first R of the response).
        steps: per row, the step of each reasoning position in order (:func:`token_steps`), or None (the row
            is left as it was).
    Returns:
        [B, T] tensor in ``weights``' dtype; each changed row's reasoning sums to what it summed to before.
    """
    import torch

    if weights.shape != reasoning_mask.shape or weights.dim() != 2 or len(steps) != weights.shape[0]:
        raise ValueError(f"weights {tuple(weights.shape)}, reasoning_mask {tuple(reasoning_mask.shape)} and "
                         f"{len(steps)} rows of steps must agree on [B, T]")
    mask = reasoning_mask.bool()
    work = weights.detach().to(torch.float64)
    out = work.clone()
    for i, row in enumerate(steps):
        if row is None:
            continue
        positions = mask[i].nonzero().flatten()
        if len(row) != positions.numel():
            raise ValueError(f"row {i}: {len(row)} step labels for {positions.numel()} reasoning positions")
        if positions.numel() == 0 or len(set(row)) < 2:
            continue
        labels = torch.as_tensor(list(row), dtype=torch.long)
        values = work[i, positions]
        sums = torch.zeros(int(labels.max()) + 1, dtype=torch.float64).index_add_(0, labels, values)
        counts = torch.bincount(labels).to(torch.float64)
        if not bool((sums[counts > 0] > 0).all()):
            continue  # a step with no weight cannot be scaled to its share: the row is left as the gate made it
        balanced = values * (counts / sums.clamp_min(1e-300))[labels]
        # the gate's mass: the row's reasoning sum before, exactly (float rounding of the per-step scales aside)
        out[i, positions] = balanced * (values.sum() / balanced.sum())
    return out.to(weights.dtype)


def step_labels(tokenizer, probes: Sequence, delimiter: str) -> list[tuple[int, ...]]:
    """Each probe's reasoning tokens' steps (:func:`token_steps`), from its reasoning's text as the tokenizer
    decodes it (``oar.method.probes.token_char_spans``)."""
    from oar.method.probes import token_char_spans

    out = []
    for p in probes:
        text, _, ends = token_char_spans(tokenizer, p.response_ids[: p.reasoning_len])
        out.append(token_steps(text, ends, delimiter))
    return out


def per_token_ratio(final_weight: float, final_tokens: float, early_weight: float, early_tokens: float) -> float:
    """The mediator: the weight per last-step decisive token over the weight per earlier-step decisive token,
    from the shares (or sums) of weight and of tokens of the two groups (oar.method.metrics.STEP_CREDIT); 1
    for uniform weights and for the truth gate. nan where a group is empty or weightless."""
    values = (final_weight, final_tokens, early_weight, early_tokens)
    if any(math.isnan(v) for v in values) or min(final_tokens, early_tokens, early_weight) <= 0:
        return float("nan")
    return (final_weight / final_tokens) / (early_weight / early_tokens)


def step_balanced(weights: Tensor, reasoning_mask: Tensor, probes: Sequence, settings: object) -> Tensor:
    """The registered intervention ``oar_g_steps`` (``oar.method.weight_transforms``): the gate's weights
    step-balanced by the steps the trainer attached to each probe (``Probe.steps``, split by
    ``settings.step_delimiter``)."""
    return balance_steps(weights, reasoning_mask, [p.steps for p in probes])
