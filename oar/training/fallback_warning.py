"""The trainer's warning when most responses of a generation batch have no answer span: their outcome
fell back to LT-Logits, the sign that the outcome settings (the conclusion and how the answer span is
found, ``oar.method.answer_spans``) do not fit the task's answers."""

from __future__ import annotations

import logging

from oar.method.answer_spans import MATHS_CONCLUSION
from oar.training.settings import OARSettings

logger = logging.getLogger(__name__)


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1


def ordinal(n: int) -> str:
    return f"{n}{'th' if n % 100 in (11, 12, 13) else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class FallbackWarning:
    """Warns when more than half of a generation batch's scored responses fell back to LT-Logits for want
    of an answer span (``oar/fallback_no_answer`` over ``oar/frac_scored``'s rows).

    Said once, at the first such batch, and again only while it persists: at the 10th, 100th, 1,000th
    such batch of the run, so that a run whose answers never match says so a few times rather than every
    step. Batches under the LT-Logits probe (``oar_probe="lt_logits"``, the warm-up steps) need no answer
    span and never fall back, so they never warn.
    """

    def __init__(self, settings: OARSettings):
        self.settings = settings
        self.batches = 0  # generation batches so far where most scored responses fell back

    def observe(self, fallen_back: float, scored: float) -> str | None:
        """Count one generation batch (every process's rows); the warning's text where it is said, else None."""
        if scored == 0 or 2 * fallen_back <= scored:
            return None
        self.batches += 1
        if not _is_power_of_ten(self.batches):
            return None
        message = self.message(int(fallen_back), int(scored))
        logger.warning(message)
        return message

    def message(self, fallen_back: int, scored: int) -> str:
        settings = self.settings
        if settings.answer_pattern:
            rule = f"the answer pattern oar_answer_pattern={settings.answer_pattern!r}"
            change = "Check oar_answer_pattern against your responses: its one group is the answer"
        elif settings.answer_finder:
            rule = f"the answer finder oar_answer_finder={settings.answer_finder!r}"
            change = "Check what oar_answer_finder returns for your responses"
        else:
            rule = "the maths rules: the last \\boxed{}, an 'answer is' statement, the last number"
            change = ("If your task's answers are not maths results, set oar_answer_pattern (a regular expression "
                      "whose one group is the answer) or oar_answer_finder (package.module:function), and "
                      "oar_conclusion to the text your responses write before the answer")
        own_span = settings.answer_pattern or settings.answer_finder
        if own_span and settings.conclusion == MATHS_CONCLUSION:
            change += ("; oar_conclusion is still the maths one: set it to the text your responses write before "
                       "their answer")
        return (f"OAR found no answer span in {fallen_back} of {scored} scored responses (looked for by {rule}), "
                f"so their outcome fell back to LT-Logits, the model's next token after the conclusion "
                f"{settings.conclusion!r}: their token credit follows that token, not their answer. {change} "
                f"(in the workflow: training.oar.*; docs/library.md, 'When OAR applies'). This is the "
                f"{ordinal(self.batches)} such generation batch; said again at the 10th, 100th, ...")
