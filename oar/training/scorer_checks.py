"""The trainer's checks of its scorer beyond each call's contract (``oar.method.scorer_contract``, checked
in ``oar.method.importance.score``): a user's scorer tried on a made-up batch when the trainer is built,
and all-zero scores, which train GRPO without a word, warned of.

**At construction.** A scorer of one's own (registered, or named by import path) is first called after
the first generation, minutes into a run on a large model. :func:`check_on_made_up_batch` calls it at
once, on two short fixed maths responses to one prompt, through ``score`` and so through every check a
training call gets (its needs met, its output's shape and values, the models' weights left as they
were); an error names the scorer and says it came from this check. The built-in scorers are not
checked (the test suite runs each). A scorer that reads the chain task's parsed positions
(``parsed_steps``) is skipped, with a debug line: no made-up response has them; so is any scorer where
the process holds no weights yet (parameters on the meta device, as FSDP's low-memory loading leaves
all but one process) or under DeepSpeed, whose ZeRO-3 partitions the weights before training. The check leaves
torch's random generators as it found them, so a run trains the same with it as it would without.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from oar.method.importance import Scores, score
from oar.method.probes import ProbeOptions
from oar.method.scorer_config import ScorerConfig
from oar.method.scorer_registry import BUILTIN_SCORERS, ScorerSpec
from oar.training.probing import response_ids

logger = logging.getLogger(__name__)

# The made-up batch: one prompt, a right and a wrong answer (one group, rewards 1 and 0), each with a
# reasoning, a concluding statement and a boxed answer, so that every outcome probe has its answer span.
CHECK_PROMPT = "What is 2 + 3?"
CHECK_RESPONSES = ("2 + 3 = 5, since 3 more than 2 is 5.\n\nTherefore, the final answer is \\boxed{5}.",
                   "2 + 3 = 6, since 3 more than 3 is 6.\n\nTherefore, the final answer is \\boxed{6}.")
CHECK_REWARDS = (1.0, 0.0)


def made_up_probes(tokenizer, options: ProbeOptions):
    """The made-up batch's probes, read as the run reads its responses (its ``ProbeOptions``)."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor's text tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    prompt = response_ids(tokenizer, CHECK_PROMPT)  # tokenized as a response is: no special tokens
    return options.build(tokenizer, [prompt] * len(CHECK_RESPONSES),
                         [response_ids(tokenizer, r) + eos for r in CHECK_RESPONSES])


def check_on_made_up_batch(spec: ScorerSpec, model: Any, tokenizer: Any, options: ProbeOptions,
                           config: ScorerConfig, reference_model: Any = None) -> bool:
    """Call a user's scorer once on the made-up batch, with every check of a training call; whether it
    was called (False: a built-in, or needs the batch cannot meet). Raises what the scorer or the checks
    raise (``ScorerError`` naming the scorer), with a note saying it came from this check."""
    if spec.name in BUILTIN_SCORERS:
        return False
    if spec.reads("parsed_steps"):
        logger.debug("scorer %r not checked at construction: it reads the chain task's parsed positions, which "
                     "no made-up response has", spec.name)
        return False
    if isinstance(model, torch.nn.Module) and any(p.device.type == "meta" for p in model.parameters()):
        logger.debug("scorer %r not checked at construction: this process holds no weights yet (meta device: "
                     "FSDP's low-memory loading)", spec.name)
        return False
    probes = made_up_probes(tokenizer, options)
    groups = {"groups": [0] * len(probes), "rewards": list(CHECK_REWARDS)} if spec.reads("groups") else {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):  # a scorer that draws from the global generator
            score(spec, model, probes, config, seed=0, reference_model=reference_model, **groups)
    except Exception as error:
        note = (f"(raised by scorer {spec.name!r} on OARTrainer's check at construction: two made-up maths "
                "responses, oar.training.scorer_checks)")
        add_note = getattr(error, "add_note", None)  # Python 3.11 and later; on 3.10 the note goes to the log
        if add_note is not None:
            add_note(note)
        else:
            logger.error(note)
        raise
    return True


def all_zero(scores: Scores) -> bool:
    """Whether a call scored rows and gave 0 to every reasoning token of every one of them: the gate then
    gives every token weight 1, GRPO's uniform advantages."""
    rows = scores.scored
    return bool(rows.any()) and not bool(scores.scores[rows].any())
