"""A loss-scale rule as the service uses it: its knobs, its baselines, how it moves the scale, its written
form.

:class:`ScalerRule` describes one rule: PyTorch's GradScaler (``torch``) or a framework's (DeepSpeed,
Megatron-LM, fairseq). Everything rule-specific lives on it, so the layers above ask the rule instead of
testing which one it is: the knobs a study searches and their defaults (the study's baselines), one
trial's setting (:meth:`ScalerRule.setting`), the step-for-step state machine of one run (None where
GradScaler moves the scale itself), how the scale cycles at its overflow edge, the precisions it scales,
how a setting is written the way the user's code or config writes it, and how the rule's scaler goes on from
a checkpoint that saved it (:class:`~search.scalers._saved.SavedState`).
:class:`RuleSetting` is one trial's setting under a framework's rule; GradScaler's is
:class:`~search.scalers.ScalerConfig`. Both have ``rule``, ``values``, ``make()`` and ``block()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from search.scalers._knob import BOOL, INT, Knob
from search.scalers._saved import SavedState


class ScaleRule(Protocol):
    """A framework's rule for the loss scale: its current ``scale``, moved by ``update(overflow)``.

    ``update`` returns what it did (``"backed off"``, ``"grew"``, ``"at minimum"``, ...) and raises
    :class:`~search.scalers.ScaleAtMinimum` where the framework ends the run. ``min_loss_scale`` is
    the lowest scale the rule trains at.
    """

    scale: float
    min_loss_scale: float

    def update(self, overflow: bool) -> str: ...


class Cycle(NamedTuple):
    """How a rule's scale cycles at its overflow edge: after ``window`` clean steps it grows by ``growth``;
    ``overflows`` overflows in a row (its hysteresis) then back it off by ``backoff``."""

    window: int
    growth: float
    backoff: float
    overflows: int


@dataclass(frozen=True)
class ScalerRule:
    """One loss-scale rule, as a study of ``--scaler NAME`` searches it.

    Example:
        ::

            from search.scalers import RULES

            rule = RULES["deepspeed"]
            setting = rule.setting(rule.default)
            print(setting.block())  # DeepSpeed's fp16 JSON block, every key written out

    Args:
        name: The ``--scaler`` value (``"deepspeed"``).
        title: How people name the rule (``"DeepSpeed"``).
        knobs: Its settings, in the order its config lists them.
        baselines: ``(tag, values)`` of the settings every study of it measures once; the first is *the*
            default the answer is measured against.
        build: A fresh state machine for one run from a setting's values; None where GradScaler's own
            ``update()`` moves the scale.
        replay: The same rule in plain Python, for the answer to replay a recorded run with other values
            (which knobs acted, which roundings run the same); :attr:`build` unless given.
        block: The setting as the user writes it (a GradScaler line, a JSON block, command-line flags).
        config: The block as data, for a rule whose block is a config file's JSON (DeepSpeed's):
            ``--best-out`` writes it as a JSON object, not a string to decode again; None where the block is
            code or flags.
        source: Where the rule comes from (file and version or commit).
        cycle: How the scale cycles at its overflow edge under a setting (:class:`Cycle`).
        start_knob: The knob that sets the scale at the start.
        window_knob: The knob that sets how many clean steps the scale waits before it grows.
        grows_with: The knobs that act only when the scale grows (GradScaler's ``growth_factor``).
        skips_with: The knobs that act only after an overflow (a back-off factor, a hysteresis, a floor).
        contour_with: The knob the report's contour pairs with :attr:`start_knob`.
        notes: Caveats the answer states with the block (where the framework honours a knob).
        setting: One trial's setting from its values (:class:`RuleSetting` unless given).
        amp_dtypes: The autocast precisions the rule scales.
        population: Whether population mode (K trials in one vectorised run) can train it.
        space_table: Where its ranges sit in a config's ``[space]``: ``""`` at the top
            (``[space.init_scale]``), else a table of its own (``[space.deepspeed.hysteresis]``).
        default_label: How tables name its default's row.
        baselines_about: Where the baselines come from, for tables that list them (empty: the defaults only).
        maker: Whose default the rule's defaults are (``"PyTorch"`` for GradScaler; the title otherwise).
        saved: How the framework saves its scaler in a checkpoint (:class:`SavedState`), for the run "as it
            was"; None where it saves none.
    """

    name: str
    title: str
    knobs: tuple[Knob, ...]
    baselines: tuple[tuple[str, Mapping[str, float]], ...]
    build: Callable[[Mapping[str, float]], ScaleRule | None]
    block: Callable[[Mapping[str, float]], str]
    source: str
    cycle: Callable[[Mapping[str, float]], Cycle]
    start_knob: str
    window_knob: str
    grows_with: tuple[str, ...] = ()
    skips_with: tuple[str, ...] = ()
    contour_with: str = ""
    notes: Callable[[Mapping[str, float]], list[str]] = lambda values: []
    config: Callable[[Mapping[str, float]], dict[str, Any]] | None = None
    setting: Callable[[Mapping[str, Any]], Any] | None = None
    replay: Callable[[Mapping[str, float]], ScaleRule] | None = None
    amp_dtypes: tuple[str, ...] = ("float16",)
    population: bool = False
    space_table: str | None = None
    default_label: str = ""
    maker: str = ""
    baselines_about: str = ""
    saved: SavedState | None = None

    def __post_init__(self) -> None:
        if self.replay is None:
            object.__setattr__(self, "replay", self.build)
        if self.setting is None:
            object.__setattr__(self, "setting", lambda values: RuleSetting(self.name, dict(values)))
        if self.space_table is None:
            object.__setattr__(self, "space_table", self.name)
        if not self.maker:
            object.__setattr__(self, "maker", self.title)
        if not self.default_label:
            object.__setattr__(self, "default_label", f"{self.default_tag} (default)")
        _BY_NAME[self.name] = self

    @property
    def default(self) -> dict[str, float]:
        """The rule's default values of every knob."""
        return {knob.name: knob.default for knob in self.knobs}

    @property
    def default_tag(self) -> str:
        """The baseline tag of the rule's default (``seed-1``, ``deepspeed-default``)."""
        return self.baselines[0][0]

    @property
    def names(self) -> tuple[str, ...]:
        """The knobs' names, in order."""
        return tuple(knob.name for knob in self.knobs)

    @property
    def replays(self) -> bool:
        """Whether the service moves the scale by replaying the rule step by step (a framework's rule), rather
        than by GradScaler's own ``update()``: then the answer is the rule's own config block, found by
        replay.
        """
        return self.build(self.default) is not None

    def paste(self, values: Mapping[str, float]) -> str | dict[str, Any]:
        """The setting as ``--best-out`` writes it: :attr:`config`'s data where the block is JSON, else the
        block."""
        return self.block(values) if self.config is None else self.config(values)

    def knob(self, name: str) -> Knob:
        """The knob called ``name``."""
        return next(k for k in self.knobs if k.name == name)

    def start_scale(self, values: Mapping[str, float]) -> float:
        """The scale a setting starts at (``2**initial_scale_power`` for DeepSpeed)."""
        value = float(values[self.start_knob])
        return 2.0**value if self.knob(self.start_knob).octaves else value

    def start_value(self, scale: float) -> float:
        """``scale`` as :attr:`start_knob` writes it (its exponent for DeepSpeed's ``initial_scale_power``).
        """
        knob = self.knob(self.start_knob)
        return math.log2(scale) if knob.octaves else scale

    def saved_setting(self, state: Mapping[str, Any]) -> tuple[dict[str, float], tuple[str, ...]]:
        """The setting a saved scaler (:attr:`saved`) trains on from where it was: the scale it had reached
        as :attr:`start_knob`, the knobs it saved, and the framework's defaults for the knobs it did not save,
        which the second item names."""
        assert self.saved is not None, f"{self.title} saves no scaler state"
        values: dict[str, float] = self.default
        start = self.start_value(self.saved_scale(state))
        values[self.start_knob] = _as_knob(self.knob(self.start_knob), start)
        held = {knob: key for key, knob in self.saved.knobs.items() if key in state}
        # A plain checkpoint may add the knobs a framework does not save, under the rule's own names.
        held |= {n: n for n in self.names if n in state and n not in held and n != self.start_knob}
        for name in held:
            values[name] = _as_knob(self.knob(name), float(state[held[name]]))
        assumed = tuple(n for n in self.names if n != self.start_knob and n not in held)
        return values, assumed

    def saved_scale(self, state: Mapping[str, Any]) -> float:
        """The scale a saved scaler had reached (a number, or a framework's one-element tensor)."""
        assert self.saved is not None, f"{self.title} saves no scaler state"
        return float(state[self.saved.scale])

    def resumed(self, values: Mapping[str, float], state: Mapping[str, Any]) -> ScaleRule | None:
        """The rule's state machine for ``values`` (:meth:`saved_setting`'s), going on from the saved
        ``state``: its scale and its counters where the framework saved them, as its own ``load_state_dict``
        restores them. None where GradScaler moves the scale (its ``load_state_dict`` restores it)."""
        machine = self.build(values)
        if machine is not None and self.saved is not None and self.saved.restore is not None:
            self.saved.restore(machine, state)
        return machine


def _as_knob(knob: Knob, value: float) -> float:
    """``value`` as the knob holds it: a whole number for an int or bool knob where it is one (one that is
    not stays as it is, for the space to refuse in words)."""
    return int(value) if knob.kind in (INT, BOOL) and float(value).is_integer() else float(value)


# Every rule by name, as each is defined: a setting finds its rule here (the catalogue orders them for
# --scaler).
_BY_NAME: dict[str, ScalerRule] = {}


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
    def framework(self) -> ScalerRule:
        """The rule this setting is of."""
        return _BY_NAME[self.rule]

    def make(self) -> ScaleRule:
        """A fresh state machine for one run with this setting."""
        return self.framework.build(self.values)

    def block(self) -> str:
        """The setting in the framework's own config form."""
        return self.framework.block(self.values)
