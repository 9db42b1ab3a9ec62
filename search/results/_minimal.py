"""The minimal change, by replay, for every rule: a measured setting with the knobs that did not act put back
to the rule's defaults.

A trial records the steps that overflowed (its skipped steps, as measured). Replaying the rule on that
sequence (:attr:`~search.scalers.ScalerRule.replay`: GradScaler's ``_amp_update_scale_`` arithmetic, or a
framework's rule step for step) with one knob at its default gives the scale before every step; where those
scales are the trial's own, and the run ends (or not) at the same step, the gradients are the same, so the run
is the same step for step (induction over the steps). Such a knob did not act: the line a user pastes then
carries only what made the difference.

Under GradScaler this puts ``backoff_factor`` back when no step was skipped, and ``growth_factor`` and
``growth_interval`` when the scale never grew (nor would at the default interval 2000); the same holds for a
framework's hysteresis, window or floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from search.core import SCALE_CURVE, SEED_BASELINES, skipped_of
from search.scalers import GRADSCALER, PARAM_NAMES, ScaleAtMinimum, ScalerConfig, ScalerRule

PYTORCH_DEFAULT = SEED_BASELINES[0][1]  # ScalerConfig(2.0**16, 2.0, 0.5, 2000)


def replay(rule: ScalerRule, values: Mapping[str, Any], overflows: set[int], steps: int) -> tuple[Any, ...]:
    """The scale before each step (float32, as GradScaler holds it) and the step the rule ends the run at,
    running ``rule`` with ``values`` on a recorded overflow sequence."""
    machine = rule.replay(values)
    scales = []
    for step in range(steps):
        scales.append(float(np.float32(machine.scale)))
        try:
            machine.update(step in overflows)
        except ScaleAtMinimum:
            return (*scales, "ended", step)
    return (*scales, float(np.float32(machine.scale)))


def replays_the_same(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether other values replay ``trial``'s recorded run (its overflow steps) as ``values`` do; None when
    the trial recorded no whole run to replay."""
    curve = trial.user_attrs.get(SCALE_CURVE)
    if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
        return None
    steps, overflowed = len(curve), set(skipped_of(trial, rule.start_scale(values)))
    measured = replay(rule, values, overflowed, steps)
    return lambda other: replay(rule, other, overflowed, steps) == measured


def minimal_values(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` (the setting ``trial`` ran) with every knob put back to the rule's default where replay
    shows it did not act.

    Returns:
        ``(minimal, reset)``: the values to use, and per knob put back (only those that differed), why it did
        not act. A trial without a readable scale curve keeps all its values.
    """
    current = dict(values)
    same = replays_the_same(trial, current, rule)
    if same is None:
        return current, {}
    reset: dict[str, str] = {}
    for knob in rule.knobs:
        if current[knob.name] == knob.default:
            continue
        trying = {**current, knob.name: knob.default}
        if same(trying):
            current = trying
            reset[knob.name] = _why_idle(trial, values, rule, knob.name)
    return current, reset


def _why_idle(trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule, name: str) -> str:
    """Why a knob that replay put back did not act, in the terms of what it does."""
    steps = len(trial.user_attrs[SCALE_CURVE])
    overflows = set(skipped_of(trial, rule.start_scale(values)))
    default = rule.knob(name).default
    if name in rule.skips_with and not overflows:
        return "no step was skipped"
    machine, grew, stretch, longest = rule.replay(values), False, 0, 0
    for step in range(steps):
        stretch = 0 if step in overflows else stretch + 1
        longest = max(longest, stretch)
        try:
            grew = machine.update(step in overflows) == "grew" or grew
        except ScaleAtMinimum:
            break
    if not grew and name in rule.grows_with:
        return f"the scale never grew in its {steps} steps"
    if not grew and name == rule.window_knob:
        return f"the scale never grew in its {steps} steps" + (
            f" (nor would it at the default {name} {default:g}: at most {longest} unskipped steps in a row)"
            if overflows
            else f", fewer than the default {name} {default:g}"
        )
    return (
        f"at the default {default:g} the rule gives the same scale at every one of the {steps} steps on this"
        f" run's {len(overflows)} overflows"
    )


def minimal_change(trial: FrozenTrial, config: ScalerConfig) -> tuple[ScalerConfig, dict[str, str]]:
    """:func:`minimal_values` of a GradScaler setting, as a :class:`~search.scalers.ScalerConfig`."""
    minimal, reset = minimal_values(trial, config.values, GRADSCALER)
    return GRADSCALER.setting(minimal), reset


def changed_settings(config: ScalerConfig) -> tuple[str, ...]:
    """The settings of ``config`` that differ from PyTorch's defaults, in GradScaler's order."""
    return tuple(p for p in PARAM_NAMES if getattr(config, p) != getattr(PYTORCH_DEFAULT, p))
