"""GRAIL's gradient-activation saliency (Pala, Toh and Poria, "GRAIL: Gradient-Reweighted Advantages for
Reinforcement Learning with Verifiable Rewards", arXiv 2606.04889) as a token scorer.

GRAIL reads no answer probe: it takes the response as the policy wrote it (prompt | completion), finds the
*first* complete ``\\boxed{...}`` in the completion, and takes the gradient of the answer's negative
log-likelihood, teacher forced in the response itself,

    L = - sum over the box's tokens a of log pi(y_a | prompt, y_<a)

(the whole span: ``\\boxed{``, the answer and the closing brace), with respect to the input embeddings of
every position. A token's saliency is the norm of the gradient times the activation, elementwise:

    s_t = || dL/de_t  (.)  e_t ||_2

GRAIL then turns the saliencies of a completion into advantage weights by a z-score of log s_t, clipped
(``mean + std * z``, within ``[w_min, w_max]``); that transform is monotone in s_t, so as an entry of the
token-credit benchmark, which ranks tokens, and as a scorer for OAR's gate the token scores s_t itself. A
response without a box gets no signal (GRAIL gives it weight 1): every score 0, which the gate turns into
weight 1.

Choices the definition leaves, as taken here:

- the box's tokens are those whose characters overlap the box's text (the project's token character
  spans, ``oar.method.probes.token_char_spans``; the authors re-encode the text before and in the box);
- the saliency of token t is its own embedding's (position t). The released trainer reads the gradient
  one position earlier (``grads[:, -(T + 1):-1]``, the input that predicts token t): ``shifted=True``
  scores that way;
- the training temperature divides the logits in the authors' code; the testbed samples at 1, so none is
  applied here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

BOX_MARKER = "\\boxed{"


def first_boxed_span(text: str) -> tuple[int, int] | None:
    """[start, end) characters of the first complete ``\\boxed{...}`` in ``text`` (marker and closing brace
    included, braces matched by depth), or None."""
    at = 0
    while True:
        start = text.find(BOX_MARKER, at)
        if start < 0:
            return None
        depth, j = 1, start + len(BOX_MARKER)
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            return start, j
        at = start + len(BOX_MARKER)  # an unclosed box: look for a later one


def first_box_tokens(tokenizer, response_ids: Sequence[int]) -> tuple[int, int] | None:
    """[first, last) response positions of the tokens that overlap the first complete box, or None."""
    from oar.method.probes import token_char_spans

    if not response_ids:
        return None
    text, starts, ends = token_char_spans(tokenizer, response_ids)
    span = first_boxed_span(text)
    if span is None:
        return None
    inside = [k for k, (a, b) in enumerate(zip(starts, ends)) if a < span[1] and b > span[0]]
    return (inside[0], inside[-1] + 1) if inside else None


def grail_scores(model, probes: Sequence, tokenizer, chunk_tokens: int = 512, shifted: bool = False) -> list[Tensor]:
    """GRAIL's saliency of every reasoning token of every probe (float32, on the host; see the module).

    Rows of prompt + whole response run right-padded (a causal model's real positions never see the
    padding after them, so no mask) in micro-batches of at most ``chunk_tokens`` tokens; the gradient is
    taken with ``torch.autograd.grad`` with respect to the input embeddings only."""
    from oar.method.scoring_batches import micro_batches, model_device

    if tokenizer is None:
        raise ValueError("GRAIL finds the answer box in the response's text: the call needs the tokenizer")
    device = model_device(model)
    embed = model.get_input_embeddings()
    seqs = [list(p.prompt_ids) + list(p.response_ids) for p in probes]
    boxes = [first_box_tokens(tokenizer, p.response_ids) for p in probes]
    out: list[Tensor] = [torch.zeros(p.reasoning_len, dtype=torch.float32) for p in probes]
    scored = [i for i, box in enumerate(boxes) if box is not None and probes[i].reasoning_len > 0]
    for group in micro_batches([len(seqs[i]) for i in scored], chunk_tokens):
        rows = [scored[g] for g in group]
        width = max(len(seqs[i]) for i in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        answer = torch.zeros(len(rows), width, dtype=torch.bool)  # positions of the box's tokens
        for r, i in enumerate(rows):
            ids[r, : len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
            start = len(probes[i].prompt_ids)
            answer[r, start + boxes[i][0] : start + boxes[i][1]] = True
        ids, answer = ids.to(device), answer.to(device)
        with torch.enable_grad():
            leaf = embed(ids).detach().requires_grad_(True)
            logp = F.log_softmax(model(inputs_embeds=leaf).logits.float(), dim=-1)
            # the token at position q is predicted at q - 1
            token_logp = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -(token_logp * answer[:, 1:]).sum()
            (grad,) = torch.autograd.grad(loss, leaf)
        saliency = (grad.float() * leaf.detach().float()).norm(dim=-1)  # [rows, width]
        for r, i in enumerate(rows):
            start = len(probes[i].prompt_ids) - (1 if shifted else 0)
            out[i] = saliency[r, start : start + probes[i].reasoning_len].detach().cpu()
    return out
