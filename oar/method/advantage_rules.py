"""Methods whose token advantages are GRPO's plus a term of their own, with no gate: by name (torch-free).

Such a method (an advantage rule) hands TRL token advantages ``A_{i,t} = A_i + u_{i,t}``, GRPO's advantage of
response i plus a per-token term its function computes from the generation batch; OAR's gate is not used,
so no tau, beta or floor applies. Each rule's function has one signature,

    function(advantages, completion_ids, completion_mask, groups, rewards, excluded) -> advantages

with ``advantages`` GRPO's [B], the completions and their mask [B, T], each row's group (its prompt) and
reward, and ``excluded`` the token ids the rule leaves out (the tokenizer's pad token); it returns [B, T].

The one built in is ``ktae_rule``: KTAE's own rule as its authors released it, GRPO's group-standardised
advantage plus the signed key-token value of every completion token (``oar.method.ktae.rule_advantages``),
beside ``ktae``, which puts KTAE's magnitude through OAR's gate instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oar.method.lazy_targets import resolved_target
from oar.method import scorer_registry


@dataclass(frozen=True)
class AdvantageRule:
    """One advantage rule: the method's name, its function (or the import path it is loaded from on first
    use) and a line on what it trains. Every rule reads each row's group and reward."""

    name: str
    target: Callable[..., Any] | str
    description: str = ""

    @property
    def function(self) -> Callable[..., Any]:
        return resolved_target(self)


_RULES: dict[str, AdvantageRule] = {}
for _name, _target, _description in (
    ("ktae_rule", "oar.method.ktae:rule_advantages",
     "KTAE's own rule: GRPO's advantage plus the signed key-token value of each completion token"),
):
    scorer_registry.reserve_name(_name, f"the advantage rule {_name!r} (oar.method.advantage_rules)")
    _RULES[_name] = AdvantageRule(_name, _target, _description)
BUILTIN_RULES = tuple(_RULES)


def rule_spec(name: Any) -> AdvantageRule | None:
    """The advantage rule registered as ``name``, or None where ``name`` is none."""
    return _RULES.get(name) if isinstance(name, str) else None
