"""How many steps a study's trials ran, and what trials of that length cannot show about a rule's growth
window.

Every rule grows its scale only after a window of steps without an overflow (GradScaler's
``growth_interval``, DeepSpeed's and Megatron-LM's ``loss_scale_window``, fairseq's
``fp16_scale_window``), so a trial of N steps never sees a growth at a window above N, the rule's own
default included. Its answer on the start scale and the back-off holds for those N steps; on the growth
settings it says only what happens within them, not in the user's run of 100,000 steps.
"""

from __future__ import annotations

from collections.abc import Iterable

from optuna.trial import FrozenTrial

from search.core import LOSS_CURVE, SpaceConfig
from search.scalers import RULES, TORCH


def trial_steps(trial: FrozenTrial | None) -> int | None:
    """The optimizer steps a trial ran (its loss curve's length), or None without a curve."""
    curve = trial.user_attrs.get(LOSS_CURVE) if trial is not None else None
    return len(curve) if curve else None


def counted_steps(epochs: int, steps: int, trials: Iterable[FrozenTrial]) -> int | None:
    """The optimizer steps of each trial of a study that counts steps, or None for one that counts epochs.

    ``epochs`` and ``steps`` as the study recorded them. A task that trains by steps from a loader
    (``LoaderProblem``) records 0 epochs and, run without ``--steps``, 0 steps: its own default, which only
    building the task tells; its trials' loss curves (one value a step) tell it without torch. None as well
    when no trial has a curve yet.
    """
    if steps:
        return steps
    if epochs:
        return None
    return max((trial_steps(t) or 0 for t in trials), default=0) or None


def horizon_note(steps: int | None, space: SpaceConfig | None = None, scaler: str = TORCH) -> str | None:
    """One line on what trials of ``steps`` steps cannot show, or None when they can show the default's
    growth, or when ``space`` searches no growth window longer than them (a search from a diagnosis whose
    window says the scale must move: every window it tried acted)."""
    rule = RULES[scaler]
    default = rule.cycle(rule.default).window
    if steps is None or steps >= default:
        return None
    if space is not None:
        window = space.ranges(scaler)[rule.window_knob]
        if (window.fixed if window.fixed is not None else window.high) < steps:
            return None
    name = rule.window_knob
    return (
        f"horizon: each trial ran {steps} optimizer steps, and {rule.title} grows the scale only after "
        f"{name} unskipped steps in a row, so these trials show nothing of a {name} above "
        f"{steps} ({rule.maker}'s default is {default}) nor of how the scale moves later in "
        "a longer run; to judge the growth settings, run trials as long as that (--steps)"
    )
