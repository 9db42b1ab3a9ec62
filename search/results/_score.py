"""What confirmation runs compare: a run's score, its objective without the skipped-step term."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from search.core import LOSS_CURVE, NONFINITE, SKIPPED_STEPS


def run_score(trial: FrozenTrial, skip_weight: float) -> float:
    """What confirmation compares: the run's objective without its skipped-step term.

    The search adds ``skip * skipped fraction`` to prefer, among near-equal runs, the one that wasted
    fewer steps; but a skipped step costs a run nothing beyond what its evaluation already shows
    (skipping the steps of a few corrupted batches can even help), and that term is in the loss's
    own units, so on a task whose loss is small it can outweigh the evaluation. A change is worth
    making when the model is better, so confirmation compares the evaluation plus the failure
    penalty: the objective less that term (a non-finite run's value has no such term).
    """
    value = float(trial.value)
    curve = trial.user_attrs.get(LOSS_CURVE) or []
    skipped = trial.user_attrs.get(SKIPPED_STEPS) or 0
    if trial.user_attrs.get(NONFINITE) or not curve:
        return value
    return value - skip_weight * skipped / len(curve)
