"""Surprisal, a trivial baseline of the token-credit benchmark: a reasoning token scores ``-log p`` of itself
under the distribution the policy sampled it from (the policy's own logits one position earlier).

It reads one forward of the policy and nothing about the outcome. It is here to be read against: on the
chain testbed a step's relation is ``=`` or the sloppy ``~``, and the policy pretrained on solutions where a
step is an estimate with a small probability gives ``~`` that small probability wherever it stands (on the
shipped response sets every sampled ``~`` has -log p of at least 1.34 on ``chain_f1`` and 2.16 on
``chain_d8``, and every sampled ``=`` lies below that but 0.03% of ``chain_f1``'s). So surprisal ranks an erring ``~``
above every later right ``=`` without knowing the step was wrong: the erring column rewards ranking the
rarer relation first, and a method that scores no better than surprisal there has shown nothing about
blame. The ``~`` is not a response's most surprising token (a remark's first word or a result's digit is
drawn from a wider distribution), which is why surprisal's recall is low.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from oar.method.controls import reasoning_token_statistic
from oar.method.probes import Probe
from oar.method.scorer_config import ScorerConfig


@torch.no_grad()
def surprisal_scores(model, probes: Sequence[Probe], config: ScorerConfig) -> list[Tensor]:
    """Per probe, ``-log pi(y_t | prompt, y_<t)`` of each reasoning token ``y_t`` (nats), the prompt and
    reasoning run as the entropy control runs them (left-padded micro-batches of ``config.chunk_tokens``)."""
    return reasoning_token_statistic(model, probes, config,
                                     lambda logp, sampled: -logp.gather(-1, sampled[..., None]).squeeze(-1))
