"""The scalers a study can search: PyTorch's GradScaler (``torch``) and the frameworks' own rules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search.scalers._deepspeed import DEEPSPEED
from search.scalers._fairseq import FAIRSEQ
from search.scalers._gradscaler import GRADSCALER
from search.scalers._megatron import MEGATRON
from search.scalers._rule import ScalerRule

RULES: dict[str, ScalerRule] = {rule.name: rule for rule in (GRADSCALER, DEEPSPEED, MEGATRON, FAIRSEQ)}
SCALERS = tuple(RULES)  # --scaler's choices, in the order the docs list them.
# The frameworks' rules: each has a [space.NAME] table of its own, where GradScaler's four sit at the top.
FRAMEWORKS = tuple(name for name, rule in RULES.items() if rule.space_table)


def saved_rule(state: Mapping[str, Any]) -> ScalerRule | None:
    """The rule whose saved scaler ``state`` is (GradScaler's ``state_dict()``, DeepSpeed's
    ``DynamicLossScaler`` attributes, ...), told by its keys; None where it is none of them, or the keys of
    more than one."""
    rules = [r for r in RULES.values() if r.saved is not None and r.saved.holds(state, r.names)]
    return rules[0] if len(rules) == 1 else None
