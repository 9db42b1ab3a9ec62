"""A rule's scaler as a checkpoint saves it, and a run that goes on from there.

A run restarted from its checkpoint either continues its scaler (the framework loads the scaler's saved
state) or starts it afresh at new settings. Each framework saves its own names: GradScaler its
``state_dict()``; DeepSpeed's ZeRO optimizers pickle the whole ``DynamicLossScaler`` (its attributes
``cur_scale``, ``cur_iter``, ``last_overflow_iter``, ``cur_hysteresis`` and its settings); Megatron-LM
``DynamicGradScaler.state_dict()`` (``scale``, ``growth_tracker``, ``hysteresis_tracker``); fairseq's fp16
optimizers the ``loss_scale`` alone. :class:`SavedState` says, for one rule, which keys tell its state, which
key holds the scale, under which names it saves its knobs, and how its counters go on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SavedState:
    """How one framework saves its loss scaler in a checkpoint.

    Example:
        ::

            from search.scalers import RULES

            rule = RULES["megatron"]
            saved = {"scale": 2.0**20, "growth_tracker": 37, "hysteresis_tracker": 1}
            values, assumed = rule.saved_setting(saved)  # the scale as initial_loss_scale; the rest defaults
            scale = rule.resumed(values, saved)  # 37 clean steps counted, one overflow from a back-off

    Args:
        keys: The keys that all appear in this framework's saved state, and together in no other's.
        scale: The key of the scale the run had reached (a number or a one-element tensor).
        knobs: The rule's knobs the state holds, by the framework's own key (``{"delayed_shift":
            "hysteresis"}``); a knob it does not hold is taken at the framework's default, and said so.
        restore: Sets a fresh state machine's counters from the state (None: GradScaler, whose own
            ``load_state_dict`` restores them, or a framework that saves none).
        source: Where the names were read (file and version or commit).
        only: Whether the state holds nothing but :attr:`keys` and knobs (a key as common as fairseq's
            ``loss_scale`` also appears in other libraries' states, apex's among them).
    """

    keys: tuple[str, ...]
    scale: str
    source: str
    knobs: Mapping[str, str] = field(default_factory=dict)
    restore: Callable[[Any, Mapping[str, Any]], None] | None = None
    only: bool = False

    def holds(self, state: Mapping[str, Any], knob_names: tuple[str, ...] = ()) -> bool:
        """Whether ``state`` is this framework's saved scaler (``knob_names``: the rule's knobs, which a
        plain checkpoint may add)."""
        if not all(key in state for key in self.keys):
            return False
        allowed = {*self.keys, *self.knobs, *knob_names}
        return not self.only or all(key in allowed for key in state)


def as_mapping(state: Any) -> Mapping[str, Any] | None:
    """A saved scaler as a mapping: a dict as it is, an object (DeepSpeed's pickled ``DynamicLossScaler``)
    as its attributes; None for anything else."""
    if isinstance(state, Mapping):
        return state
    attributes = getattr(state, "__dict__", None)
    return attributes if isinstance(attributes, dict) else None
