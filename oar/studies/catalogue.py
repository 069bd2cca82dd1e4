"""The project's studies, registered in order (importing this module registers them): the decisive run's
primary comparisons (``analysis.primary``), the upper-bound and ceiling tests (``analysis.upper_bound``), the
policy selection (``analysis.policy_selection``), the mechanism run and the rescue (``analysis.mechanism``),
the dose-response (``runs.dose``, ``analysis.dose_response``) and where the weight goes in training, OAR-P's
credit (``training.oar.log_step_credit``), and whether the paper's claims reproduced (``analysis.reproduction``;
its table is the report's first, by its category). A new study is one more module of oar/studies/ with its ``STUDY``,
added to the list below (``tests/test_new_study.py`` registers one in a few lines, from a test).
"""

from oar.studies import decisive, dose_response, mechanism, policy_selection, reproduction, step_credit, upper_bound
from oar.studies.registry import STUDIES, register_study

__all__ = ["STUDIES"]

# the order their checks run in (the first error is the one raised) and their tables are listed in
for _module in (decisive, upper_bound, policy_selection, mechanism, dose_response, step_credit, reproduction):
    register_study(_module.STUDY)
