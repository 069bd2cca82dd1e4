"""How the shipped chain_d8 policy was chosen (``analysis.policy_selection``; config/studies/policy-selection.yaml,
run by ``make select-policy``): its candidates piloted with GRPO in order until one passes the declared rule.
The registry checks the rule; workflow_scripts/select_policy.py runs the candidates and writes its table.
"""

from __future__ import annotations

from oar.config_error import ConfigError
from oar.studies.registry import Study


def check(reg) -> None:
    """The declared selection rule names the config's models and runs (oar.analysis.policy_selection)."""
    rule = reg.config["analysis"].get("policy_selection")
    if not rule:
        return
    from oar.analysis.policy_selection import check_rule

    problems = check_rule(rule, list(reg.config["models"]), reg.config["runs"]["main"])
    if problems:
        raise ConfigError(*problems[0])


STUDY = Study(name="policy_selection", key="analysis.policy_selection", check=check)
