"""The minimal change: a measured setting with the settings that did not act put back to PyTorch's defaults.

GradScaler multiplies its scale by ``backoff_factor`` only on a skipped step, and by
``growth_factor`` only after ``growth_interval`` unskipped steps in a row. So in a run where no step
was skipped, ``backoff_factor`` never acted; in a run where the scale never grew, ``growth_factor``
never acted, and neither did ``growth_interval`` as long as PyTorch's default interval (2000) would
not have grown the scale either, that is, when no stretch of unskipped steps reached it. Putting
such settings back to their defaults changes nothing in that run, step for step: the line a user
pastes then carries only what made the difference (``init_scale`` always acts).

Read from the trial's own scale curve (:func:`search.core.scale_moves`), never guessed.
"""

from __future__ import annotations

import math
from dataclasses import replace

from optuna.trial import FrozenTrial

from search.core import OVERFLOW_STEPS, SCALE_CURVE, SEED_BASELINES, scale_moves
from search.scalers import PARAM_NAMES, ScalerConfig

PYTORCH_DEFAULT = SEED_BASELINES[0][1]  # ScalerConfig(2.0**16, 2.0, 0.5, 2000)


def minimal_change(trial: FrozenTrial, config: ScalerConfig) -> tuple[ScalerConfig, dict[str, str]]:
    """``config`` (the settings ``trial`` ran) with the settings that did not act in its run at the defaults.

    Args:
        trial: The COMPLETE trial that measured ``config``.
        config: Its four settings.

    Returns:
        ``(minimal, reset)``: the settings to use, and per setting put back to PyTorch's default
        (only those that differed), why it did not act. A trial without a readable scale curve
        keeps all its settings.
    """
    curve = trial.user_attrs.get(SCALE_CURVE)
    if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
        return config, {}
    moves = scale_moves(curve, config.init_scale, trial.user_attrs.get(OVERFLOW_STEPS))
    longest = stretch = 0  # The longest stretch of unskipped steps (without growth, the tracker's run).
    for move in moves:
        stretch = stretch + 1 if move == 0 else 0
        longest = max(longest, stretch)
    why: dict[str, str] = {}
    if -1 not in moves:
        why["backoff_factor"] = "no step was skipped"
    if 1 not in moves and longest < PYTORCH_DEFAULT.growth_interval:
        grew = f"the scale never grew in its {len(moves)} steps"
        why["growth_factor"] = grew
        why["growth_interval"] = grew + (
            f" (nor would it at the default interval {PYTORCH_DEFAULT.growth_interval}: at most {longest} "
            "unskipped steps in a row)"
            if -1 in moves
            else f", fewer than the default interval {PYTORCH_DEFAULT.growth_interval}"
        )
    reset = {p: reason for p, reason in why.items() if getattr(config, p) != getattr(PYTORCH_DEFAULT, p)}
    minimal = replace(config, **{p: getattr(PYTORCH_DEFAULT, p) for p in reset})
    return minimal, reset


def changed_settings(config: ScalerConfig) -> tuple[str, ...]:
    """The settings of ``config`` that differ from PyTorch's defaults, in GradScaler's order."""
    return tuple(p for p in PARAM_NAMES if getattr(config, p) != getattr(PYTORCH_DEFAULT, p))
