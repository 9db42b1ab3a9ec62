"""The scalers a study can search: PyTorch's GradScaler (``torch``) and the frameworks' own rules."""

from __future__ import annotations

from search.scalers._deepspeed import DEEPSPEED
from search.scalers._fairseq import FAIRSEQ
from search.scalers._megatron import MEGATRON
from search.scalers._rule import FrameworkRule

TORCH = "torch"  # GradScaler's own rule: search.core's four settings, not a FrameworkRule.
RULES: dict[str, FrameworkRule] = {rule.name: rule for rule in (DEEPSPEED, MEGATRON, FAIRSEQ)}
SCALERS = (TORCH, *RULES)  # --scaler's choices, in the order the docs list them.
