"""How many steps a study's trials ran, and what trials of that length cannot show about GradScaler's growth settings.

GradScaler grows its scale only after ``growth_interval`` unskipped steps in a row, so a trial of
N steps never sees a growth at an interval above N, PyTorch's default 2000 included. Its answer on
``init_scale`` and ``backoff_factor`` holds for those N steps; on the growth settings it says only
what happens within them, not in the user's run of 100,000 steps.
"""

from __future__ import annotations

from collections.abc import Iterable

from optuna.trial import FrozenTrial

from search.core import LOSS_CURVE, SpaceConfig
from search.results._minimal import PYTORCH_DEFAULT


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


def horizon_note(steps: int | None, space: SpaceConfig | None = None) -> str | None:
    """One line on what trials of ``steps`` steps cannot show, or None when they can show the default's growth, or
    when ``space`` searches no growth_interval longer than them (a search from a diagnosis whose growth window
    says the scale must move: every interval it tried acted)."""
    if steps is None or steps >= PYTORCH_DEFAULT.growth_interval:
        return None
    if space is not None:
        interval = space.growth_interval
        if (interval.fixed if interval.fixed is not None else interval.high) < steps:
            return None
    return (
        f"horizon: each trial ran {steps} optimizer steps, and GradScaler grows the scale only after "
        f"growth_interval unskipped steps in a row, so these trials show nothing of a growth_interval above "
        f"{steps} (PyTorch's default is {PYTORCH_DEFAULT.growth_interval}) nor of how the scale moves later in "
        "a longer run; to judge the growth settings, run trials as long as that (--steps)"
    )
