"""Whether a few records decide a study's evaluation, and what to do about it.

Every trial is judged on its final weights' loss over the evaluation set (the mean) unless the
study chose the median chunk loss (``[penalty] evaluation = "median"``). When a handful of records
the model cannot fit (corrupted targets, say) carry most of that mean, the trials are ranked by
how those few records happened to come out, not by how well each setting trained on the rest.
Every trial also records the median of its chunk losses (``eval_median``), which the typical chunk
decides: a mean far above it is the sign.
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from search.core import EVAL_LOSS, EVAL_MEDIAN

DOMINANCE_RATIO = 3.0  # A mean this many times the median chunk loss is decided by a few records.


def dominance_note(trial: FrozenTrial | None, evaluation: str) -> str | None:
    """One line saying that a few records decide the evaluation of ``trial``, or None when they do not.

    Args:
        trial: A COMPLETE trial (the best one, as the summary shows it), or None.
        evaluation: The study's ``[penalty] evaluation`` (``mean`` or ``median``): a study already
            judged on the median needs no note.
    """
    if trial is None or evaluation == "median":
        return None
    mean, median = trial.user_attrs.get(EVAL_LOSS), trial.user_attrs.get(EVAL_MEDIAN)
    if not _positive(mean) or not _positive(median) or mean < DOMINANCE_RATIO * median:
        return None
    return (
        f"a few records decide the evaluation: on trial #{trial.number} its loss over the evaluation set is"
        f" {mean:.3g}, {mean / median:.0f}x the median chunk loss ({median:.3g}), so trials are ranked by how"
        " those records came out; give the task validation data or an eval function (docs/tasks.md), or"
        ' judge trials on the median chunk loss with [penalty] evaluation = "median" in a --config file (a'
        " new study)"
    )


def judged_evaluation(trial: FrozenTrial) -> str:
    """The evaluation a trial without failure code was judged by, read from its record: its objective is its
    evaluation (docs/objective.md), the mean (``eval_loss``) or the median chunk loss (``eval_median``)."""
    mean, median = trial.user_attrs.get(EVAL_LOSS), trial.user_attrs.get(EVAL_MEDIAN)
    if _positive(median) and trial.value is not None and (not _positive(mean) or mean != median):
        return "median" if abs(trial.value - median) < abs(trial.value - mean) else "mean"
    return "mean"


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 0
