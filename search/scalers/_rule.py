"""A framework's loss-scale rule as the service uses it: its knobs, its baselines, its config form.

:class:`FrameworkRule` describes one framework (DeepSpeed, Megatron-LM, fairseq): the knobs a study
searches, the framework's defaults (the study's baselines), how to build the step-for-step state
machine of one run from a setting, and how to write a setting the way the user's config writes it.
:class:`RuleSetting` is one trial's setting under such a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from search.scalers._knob import Knob


class ScaleRule(Protocol):
    """A framework's rule for the loss scale: its current ``scale``, moved by ``update(overflow)``.

    ``update`` returns what it did (``"backed off"``, ``"grew"``, ``"at minimum"``, ...) and raises
    :class:`~search.scalers.ScaleAtMinimum` where the framework ends the run. ``min_loss_scale`` is
    the lowest scale the rule trains at.
    """

    scale: float
    min_loss_scale: float

    def update(self, overflow: bool) -> str: ...


@dataclass(frozen=True)
class FrameworkRule:
    """One framework's scaler, as a study of ``--scaler NAME`` searches it.

    Args:
        name: The ``--scaler`` value (``"deepspeed"``).
        title: How people name the framework (``"DeepSpeed"``).
        knobs: Its settings, in the order its config lists them.
        baselines: ``(tag, values)`` of the framework's defaults, enqueued once per study; the first
            is *the* default the answer is measured against.
        build: A fresh state machine for one run from a setting's values.
        block: The setting as the user writes it (a JSON block, command-line flags).
        source: Where the rule comes from (file and version or commit).
        notes: Caveats the answer states with the block (where the framework honours a knob).
    """

    name: str
    title: str
    knobs: tuple[Knob, ...]
    baselines: tuple[tuple[str, Mapping[str, float]], ...]
    build: Callable[[Mapping[str, float]], ScaleRule]
    block: Callable[[Mapping[str, float]], str]
    source: str
    notes: Callable[[Mapping[str, float]], list[str]] = lambda values: []

    @property
    def default(self) -> dict[str, float]:
        """The framework's default values of every knob."""
        return {knob.name: knob.default for knob in self.knobs}

    @property
    def default_tag(self) -> str:
        """The baseline tag of the framework's default (``deepspeed-default``)."""
        return self.baselines[0][0]

    def knob(self, name: str) -> Knob:
        """The knob called ``name``."""
        return next(k for k in self.knobs if k.name == name)


@dataclass(frozen=True)
class RuleSetting:
    """One trial's setting of a framework's scaler: every knob's value, under the knob's own name.

    Example:
        ::

            from search.scalers import RULES, RuleSetting

            setting = RuleSetting("deepspeed", RULES["deepspeed"].default)
            print(setting.block())  # DeepSpeed's fp16 JSON block, every key written out
    """

    rule: str
    values: Mapping[str, Any]

    @property
    def framework(self) -> FrameworkRule:
        from search.scalers._catalogue import RULES  # The catalogue imports this module.

        return RULES[self.rule]

    def make(self) -> ScaleRule:
        """A fresh state machine for one run with this setting."""
        return self.framework.build(self.values)

    def block(self) -> str:
        """The setting in the framework's own config form."""
        return self.framework.block(self.values)
