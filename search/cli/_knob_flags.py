"""A rule's setting from a command's flags: GradScaler's own four, and ``--knob NAME=VALUE`` for any knob.

Every value is checked against its knob as the rule states it (a factor in (0, 1), a whole number ...), so a
bad one is one line of bad input before anything is trained.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from search.core import UsageError
from search.scalers import RULES, RuleSetting, ScalerConfig


def setting_from_flags(
    scaler: str, flags: Mapping[str, float | None], knobs: Sequence[str]
) -> ScalerConfig | RuleSetting:
    """The setting the flags give: ``scaler``'s defaults, then GradScaler's flags, then each ``--knob``.

    Args:
        scaler: The rule (``--scaler``).
        flags: GradScaler's flags as given, by flag (``{"--init-scale": 8.0, "--growth-factor": None}``).
        knobs: Each ``--knob NAME=VALUE``, as given.

    Raises:
        UsageError: A flag of another rule, a value its knob refuses, or knobs valid alone but not together.
    """
    rule = RULES[scaler]
    values = dict(rule.default)
    for flag, value in flags.items():
        if value is None:
            continue
        name = flag[2:].replace("-", "_")
        if name not in rule.names:
            raise UsageError(
                f"{flag} is GradScaler's; {rule.title}'s settings are given as --knob NAME=VALUE"
            )
        if not (math.isfinite(value) and rule.knob(name).valid(value)):
            raise UsageError(f"{flag} must be {rule.knob(name).rule} ({rule.title}'s rule), got {value:g}")
        values[name] = rule.knob(name).cast(value)
    for item in knobs:
        name, sep, text = item.partition("=")
        if not sep or name not in rule.names:
            raise UsageError(
                f"--knob {item}: {rule.title}'s settings are {', '.join(rule.names)} (as NAME=VALUE)"
            )
        knob = rule.knob(name)
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"--knob {item}: not a number") from None
        if not (math.isfinite(value) and knob.valid(value)):
            raise UsageError(f"--knob {item}: {name} must be {knob.rule}")
        values[name] = knob.cast(value)
    setting = rule.setting(values)
    try:
        setting.make()
    except ValueError as e:  # Knobs valid alone but not together (a minimum above the start).
        raise UsageError(f"{rule.title}'s settings: {e}") from None
    return setting
