"""Outcome probes: what a response's final answer looks like to the model (method.md sections 2-3).

``build_probes``: from a prompt's and a response's **token ids** (never re-tokenised text), locate the
answer span (``oar.method.answer_spans``: by default the maths rules, the last ``\\boxed{}``, an "answer
is" statement or the last number; or a pattern or a function of the user's) and build the probe
``prompt | reasoning | conclude | answer``, where ``conclude`` is the conclusion text (by default
``CONCLUDE_TEXT``). An *outcome* then reads the answer distribution off the
probe's last logits: ``lt_logits`` (first answer token), ``as_mean`` (softmax of the mean answer-span
logits) or ``as_joint`` (mean answer log-likelihood). A response without an answer span falls back to
``lt_logits``. The scorers (``oar.method.importance``) perturb the reasoning and compare outcomes.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from oar.method.answer_spans import MATHS_CONCLUSION, AnswerRule
from oar.method.names import PROBES

CONCLUDE_TEXT = MATHS_CONCLUSION


@dataclass(frozen=True)
class Probe:
    """One response's probe. Reasoning tokens are ``response_ids[:reasoning_len]``."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    reasoning_len: int
    conclude_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]  # the model's own answer-span tokens; empty when there is no answer
    answer_kind: str | None = None  # "boxed", "statement", "last_number", "pattern", "finder" or None
    pad_id: int = field(kw_only=True)  # what OAR-P and the oracle substitute (substitute_token_id)
    # Reasoning positions that decide the answer, where a task's grammar tells (the truth scorer); else None.
    decisive: tuple[int, ...] | None = field(default=None, kw_only=True)
    # Of those, the positions in the reasoning's last step (the restatement the answer is copied from).
    final_step: tuple[int, ...] | None = field(default=None, kw_only=True)
    # Reasoning positions that cannot change the answer (remark and note words), where the grammar tells.
    irrelevant: tuple[int, ...] | None = field(default=None, kw_only=True)
    # The step (0, 1, ...) of each reasoning token, split by the response's own delimiters where the step
    # balance reads them (oar.method.steps); else None.
    steps: tuple[int, ...] | None = field(default=None, kw_only=True)

    @property
    def has_answer(self) -> bool:
        return len(self.answer_ids) > 0

    def ids(self, kind: str) -> list[int]:
        """Probe token ids for an outcome ``kind``; LT-Logits stops after ``conclude`` (answer tokens
        would not change its logits, causally, and only cost compute)."""
        head = list(self.prompt_ids) + list(self.response_ids[: self.reasoning_len]) + list(self.conclude_ids)
        return head if kind == "lt_logits" else head + list(self.answer_ids)

    @property
    def reasoning_start(self) -> int:
        return len(self.prompt_ids)


def pad_token_id(tokenizer) -> int:
    """The id substituted for a reasoning token by OAR-P and the oracle: the tokenizer's pad token
    (method.md section 4). A tokenizer without one (many base models) falls back to its eos, the token
    TRL and transformers pad with then. The model config's pad id is never read: it may disagree."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token: OAR-P and the oracle substitute the pad id")
    return int(pad)


def substitute_token_id(tokenizer, substitute: str = "pad") -> int:
    """The id OAR-P and the oracle put in place of a reasoning token: ``"pad"``, the paper's choice
    (:func:`pad_token_id`), or a text that is exactly one token of this tokenizer. A small policy may
    never have seen its pad id as an input; a token it has seen perturbs it without being a novelty."""
    if substitute == "pad":
        return pad_token_id(tokenizer)
    ids = tokenizer(substitute, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"substitute {substitute!r} is {len(ids)} tokens of this tokenizer, not one")
    return int(ids[0])


# The words before the box, when a response states its conclusion itself: at most this long, without
# digits or maths (a box at the end of a computation keeps that computation as reasoning).
_MAX_CONCLUSION_CHARS = 80
_SENTENCE_END = re.compile(r"[.!?:](?=\s)|\n")


def conclusion_start(text: str, marker: int) -> int | None:
    """Where the response's own concluding sentence starts, when the words between the last sentence
    boundary and the box marker (``text[marker]``) are a statement (``Therefore, the final answer is ``),
    else None: no boundary, longer than 80 characters, or holding a digit or a maths symbol (``= \\ ^ _ { }``)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, marker)]
    if not ends:
        return None
    start = ends[-1]
    words = text[start:marker]
    if not words.strip() or len(words) > _MAX_CONCLUSION_CHARS or re.search(r"[0-9=\\^_{}]", words):
        return None
    return start


def token_char_spans(tokenizer, ids: Sequence[int]) -> tuple[str, list[int], list[int]]:
    """Decoded text of ``ids`` and each token's [start, end) character span in it.

    A token's end is the length of the decoded prefix that ends with it. Fast path: per-token pieces
    that concatenate to the whole decode. Byte-level BPE can split one character across tokens (the
    pieces then hold replacement characters); then the prefixes are decoded from the last point where
    the text was whole characters (:func:`_ends_from_whole_characters`), and only where even that does
    not rebuild the decode, from the start for every token (exact for any tokenizer, but quadratic in
    the length).
    """
    ids = list(ids)
    text = _decode(tokenizer, ids)
    pieces = tokenizer.batch_decode([[i] for i in ids], **AS_WRITTEN)
    if "".join(pieces) == text:
        ends = list(_cumsum(len(p) for p in pieces))
    else:
        ends = _ends_from_whole_characters(tokenizer, ids, pieces, text)
        if ends is None:
            ends = _ends_from_every_prefix(tokenizer, ids)
    starts = [0] + ends[:-1]
    return text, starts, ends


REPLACEMENT = "\ufffd"  # what a decode shows for a character whose bytes are not all there
AS_WRITTEN = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}  # decode every token, unaltered


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), **AS_WRITTEN)


def _ends_from_whole_characters(tokenizer, ids: list[int], pieces: list[str], text: str) -> list[int] | None:
    """Prefix ends, decoding each token together with the tokens since the last whole character.

    Where a decoded chunk does not end in a replacement character its bytes ended on a character
    boundary, and a byte-level decode of what follows does not depend on what came before; so a
    prefix's length is the chunks before it plus the decode of the open chunk. Each token costs a
    decode of a few tokens, not of its whole prefix. Every closed chunk must equal the whole decode at
    its place, and together rebuild it: where they do not (a tokenizer whose decode is not local),
    None.
    """
    ends: list[int] = []
    start, offset = 0, 0  # first token of the open chunk, characters before it
    for k in range(len(ids)):
        chunk = pieces[k] if start == k else _decode(tokenizer, ids[start : k + 1])
        ends.append(offset + len(chunk))
        if not chunk.endswith(REPLACEMENT) or k == len(ids) - 1:
            if text[offset : offset + len(chunk)] != chunk:
                return None
            start, offset = k + 1, offset + len(chunk)
    return ends if offset == len(text) else None


def _ends_from_every_prefix(tokenizer, ids: list[int]) -> list[int]:
    return [len(_decode(tokenizer, ids[: k + 1])) for k in range(len(ids))]


def _cumsum(values):
    total = 0
    for v in values:
        total += v
        yield total


def build_probe(
    tokenizer,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    conclude_ids: Sequence[int],
    fallback_last_number: bool = True,
    own_conclusion: bool = False,
    substitute_id: int | None = None,
    answer_statement: bool = True,
    answer_rule: AnswerRule | None = None,
) -> Probe:
    """Locate reasoning and answer tokens in one response's own ids.

    Trailing special tokens (eos, pad) are neither reasoning nor answer. The answer span comes from
    ``answer_rule`` (``oar.method.answer_spans.AnswerRule``; default: the maths rules of
    ``oar.grading.extraction.extract_answer`` under ``fallback_last_number`` and ``answer_statement``) on
    the decoded response, mapped back to token positions through each token's character span: reasoning
    = tokens that end before the answer marker (``\\boxed{``, the statement, the number, the pattern's
    match), answer = tokens that overlap the answer text.

    ``own_conclusion``: when a boxed answer follows a concluding statement of the response's own
    (:func:`conclusion_start`), the reasoning ends before that statement and the probe continues with
    the response's own words up to the box, instead of appending ``conclude_ids`` after them (which
    repeats the template in a sequence the policy never wrote). ``substitute_id`` defaults to the pad id.
    """
    response_ids = list(response_ids)
    special = set(tokenizer.all_special_ids)
    content_len = len(response_ids)
    while content_len > 0 and response_ids[content_len - 1] in special:
        content_len -= 1
    text, starts, ends = token_char_spans(tokenizer, response_ids[:content_len])
    if answer_rule is None:
        answer_rule = AnswerRule(fallback_last_number=fallback_last_number, answer_statement=answer_statement)
    span = answer_rule.find(text)
    if span is None:
        reasoning_len, answer = content_len, ()
    else:
        reasoning_len = bisect.bisect_right(ends, span.reasoning_end)
        first = bisect.bisect_right(ends, span.start)  # first token ending after the answer starts
        last = bisect.bisect_left(starts, span.end)  # tokens starting before the answer ends
        answer = _answer_ids(tokenizer, text, starts, ends, response_ids, first, last, span.start, span.end)
        own = conclusion_start(text, span.reasoning_end) if own_conclusion and span.kind == "boxed" else None
        if own is not None and answer:
            reasoning_len = bisect.bisect_right(ends, own)  # tokens that end before the statement
            # the response's own tokens up to the answer; a token holding the box's brace and the
            # answer's first characters contributes its part before the answer, re-encoded
            head = text[starts[first] : span.start] if starts[first] < span.start else ""
            conclude_ids = response_ids[reasoning_len:first] + (
                tokenizer(head, add_special_tokens=False)["input_ids"] if head else [])
    return Probe(
        prompt_ids=tuple(prompt_ids),
        response_ids=tuple(response_ids),
        reasoning_len=reasoning_len,
        conclude_ids=tuple(conclude_ids),
        answer_ids=answer,
        answer_kind=span.kind if span is not None and answer else None,
        pad_id=pad_token_id(tokenizer) if substitute_id is None else substitute_id,
    )


def _answer_ids(tokenizer, text, starts, ends, ids, first, last, start, end) -> tuple[int, ...]:
    """The answer text ``text[start:end]`` as the response's own tokens ``ids[first:last]``, except at
    a boundary token that straddles the answer's edge (SmolLM2's ``{\\`` holds the brace of ``\\boxed{``
    and the backslash of ``\\frac``): only its part inside the answer is kept, encoded on its own, so
    ``conclude + answer`` spells the box and the answer each exactly once."""
    if first >= last:
        return ()
    head_cut, tail_cut = starts[first] < start, ends[last - 1] > end
    if not head_cut and not tail_cut:
        return tuple(ids[first:last])

    def encode(piece: str) -> list[int]:
        return tokenizer(piece, add_special_tokens=False)["input_ids"] if piece else []

    if first == last - 1:  # one token holds the whole answer and more
        return tuple(encode(text[start:end]))
    head = encode(text[start : ends[first]]) if head_cut else [ids[first]]
    tail = encode(text[starts[last - 1] : end]) if tail_cut else [ids[last - 1]]
    return tuple(head + list(ids[first + 1 : last - 1]) + tail)


def build_probes(
    tokenizer,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    fallback_last_number: bool = True,
    conclusion: str = CONCLUDE_TEXT,
    own_conclusion: bool = False,
    substitute: str = "pad",
    answer_statement: bool = True,
    answer_pattern: str = "",
    answer_finder: str = "",
) -> list[Probe]:
    """Probes for unpadded prompts and responses (one list of ids each); see :func:`build_probe`.

    ``conclusion`` is the text appended after the reasoning, leading into the answer; ``answer_pattern``
    (a regular expression whose one group is the answer) or ``answer_finder`` (an import path
    ``package.module:function``) replace the maths rules of finding the answer span
    (``oar.method.answer_spans.AnswerRule``)."""
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(response_ids)} responses")
    conclude = tokenizer(conclusion, add_special_tokens=False)["input_ids"]
    substitute_id = substitute_token_id(tokenizer, substitute)
    rule = AnswerRule(pattern=answer_pattern, finder=answer_finder, conclusion=conclusion,
                      fallback_last_number=fallback_last_number, answer_statement=answer_statement)
    return [build_probe(tokenizer, p, r, conclude, fallback_last_number, own_conclusion, substitute_id,
                        answer_statement=answer_statement, answer_rule=rule)
            for p, r in zip(prompt_ids, response_ids)]


def probes_from_padded(
    tokenizer,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    fallback_last_number: bool = True,
    conclusion: str = CONCLUDE_TEXT,
    own_conclusion: bool = False,
    substitute: str = "pad",
    answer_statement: bool = True,
    answer_pattern: str = "",
    answer_finder: str = "",
) -> list[Probe]:
    """Probes from TRL-style tensors: prompts left-padded, completions right-padded, with masks.

    Column t of a completion row is response position t, so scores come back aligned with
    ``completion_ids``.
    """
    # each tensor copied to the host once: a row's masked read on the device would make the host wait
    # for the GPU twice a response
    prompt_ids, prompt_mask, completion_ids, completion_mask = (
        t.cpu() for t in (prompt_ids, prompt_mask, completion_ids, completion_mask))
    prompts = [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask)]
    responses = [row[mask.bool()].tolist() for row, mask in zip(completion_ids, completion_mask)]
    return build_probes(tokenizer, prompts, responses, fallback_last_number, conclusion, own_conclusion, substitute,
                        answer_statement=answer_statement, answer_pattern=answer_pattern, answer_finder=answer_finder)


@dataclass(frozen=True)
class ProbeOptions:
    """How a response is read into its probe, in one place: the options of :func:`build_probes` that a
    run's ``oar`` block (``oar.training.settings.OARSettings``), a response set's spec and the held-out
    scripts' flags all set (the defaults are :func:`build_probes`')."""

    fallback_last_number: bool = True
    own_conclusion: bool = False
    substitute: str = "pad"
    answer_statement: bool = True
    conclusion: str = CONCLUDE_TEXT
    answer_pattern: str = ""
    answer_finder: str = ""

    @classmethod
    def of(cls, settings: Any) -> ProbeOptions:
        """The probe options among ``settings``' attributes (an ``OARSettings``, a response set's spec);
        one it does not have keeps its default (a response set's spec reads maths answers)."""
        return cls(**{f.name: getattr(settings, f.name, f.default) for f in fields(cls)})

    def build(self, tokenizer, prompt_ids: Sequence[Sequence[int]],
              response_ids: Sequence[Sequence[int]]) -> list[Probe]:
        """:func:`build_probes` under these options."""
        return build_probes(tokenizer, prompt_ids, response_ids, **asdict(self))

    def from_padded(self, tokenizer, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                    completion_mask: Tensor) -> list[Probe]:
        """:func:`probes_from_padded` under these options."""
        return probes_from_padded(tokenizer, prompt_ids, prompt_mask, completion_ids, completion_mask, **asdict(self))


# ----------------------------------------------------------------------------------------------------
# Outcomes
# ----------------------------------------------------------------------------------------------------


def resolve_probe_kind(probe: Probe, requested: str) -> str:
    """The outcome used for one response: the requested one, or LT-Logits when it has no answer span."""
    if requested not in PROBES:
        raise ValueError(f"unknown outcome probe {requested!r}; expected one of {PROBES}")
    return requested if requested == "lt_logits" or probe.has_answer else "lt_logits"


@dataclass
class Outcome:
    """Outcome of a batch of probes: log-probabilities [N, V] (KL kinds) and/or phi [N] (AS-Joint)."""

    logprobs: Tensor | None
    phi: Tensor | None


def outcome_from_logits(logits: Tensor, kind: str, answer: Tensor | None = None) -> Outcome:
    """Outcome from the probe's last ``A + 1`` logits [N, A + 1, V] (float32 inside).

    Position 0 of ``logits`` predicts the first answer token; positions 0..A-1 predict the A answer
    tokens ``answer`` [N, A] (teacher forcing); the last position predicts past the answer and is unused.
    """
    z = logits.float()
    if kind == "lt_logits":
        return Outcome(F.log_softmax(z[:, 0], dim=-1), None)
    if answer is None or answer.shape[1] == 0:
        raise ValueError(f"probe {kind!r} needs answer tokens")
    span = z[:, : answer.shape[1]]
    if kind == "as_mean":
        return Outcome(F.log_softmax(span.mean(dim=1), dim=-1), None)
    token_logp = F.log_softmax(span, dim=-1).gather(-1, answer[..., None]).squeeze(-1)
    return Outcome(None, token_logp.mean(dim=1))


def divergence(clean: Outcome, other: Outcome, clamp: bool = True) -> Tensor:
    """KL(p_clean || p_other) per row, or phi_clean - phi_other for AS-Joint (clamped at 0 for OAR-P)."""
    if clean.phi is not None:
        drop = clean.phi - other.phi
        return drop.clamp_min(0.0) if clamp else drop
    p = clean.logprobs.exp()
    return (p * (clean.logprobs - other.logprobs)).sum(dim=-1)
