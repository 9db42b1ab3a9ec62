"""Turns a training run into an objective value and a failure code.

Optuna treats a NaN objective as FAIL and its samplers then ignore the trial, so a search
could never learn where the unsafe region is. Every run therefore gets a finite value:

* ``nonfinite`` (loss or weights became NaN/Inf): ``nonfinite * (2 - first_bad_epoch / epochs)``,
  i.e. between ``nonfinite`` and ``2 * nonfinite``, the earlier the divergence the worse. With the
  default 10 this is above any finite cross-entropy a run that trains at all reaches.
* everything else: ``final_loss + skip * skipped_fraction + silent * [silent failure]``. The
  ``silent`` term (default 1.0, more than the untrained 2-class loss ln 2 = 0.69) puts every run
  that did not learn behind every run that did; the ``skip`` term (default 0.1) gently prefers
  settings that waste fewer steps among equally good losses.

Failure codes, first match wins: ``nonfinite``; ``overflow_churn`` (at least ``churn_threshold``
of the steps skipped); ``underflow`` (did not learn, and at least ``underflow_threshold`` of the
gradient entries were exactly zero: the loss scale was too small for fp16); ``frozen`` (did not
learn for another reason); ``none``. A run *learned* when the fp32 loss of its final weights is at
least ``learn_threshold`` (default 10%) below the loss of epoch 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from search.config import PenaltyConfig
from search.trainer import TrainResult

__all__ = ["FAILURE_CODES", "SILENT_FAILURES", "Assessment", "assess"]

FAILURE_CODES = ("none", "nonfinite", "overflow_churn", "underflow", "frozen")
SILENT_FAILURES = ("overflow_churn", "underflow", "frozen")


@dataclass(frozen=True)
class Assessment:
    """The verdict on one run: objective value, failure code and flags."""

    value: float
    failure: str
    nonfinite: bool
    learned: bool
    first_nonfinite_epoch: int | None


def assess(result: TrainResult, penalty: PenaltyConfig) -> Assessment:
    """Computes the objective value (always finite) and the failure code of ``result``."""
    epochs = max(1, result.epochs)
    first_bad = next((i for i, v in enumerate(result.loss_curve) if not math.isfinite(v)), None)
    if first_bad is None and not (result.weights_finite and math.isfinite(result.final_loss_fp32)):
        first_bad = result.epochs  # Diverged in the last update: the loss was still finite.
    if first_bad is not None:
        value = penalty.nonfinite * (2.0 - first_bad / epochs)
        return Assessment(value, "nonfinite", True, False, first_bad)

    first = result.loss_curve[0] if result.loss_curve else math.nan
    learned = result.final_loss_fp32 <= (1.0 - penalty.learn_threshold) * first
    skipped_fraction = result.skipped_steps / epochs
    if skipped_fraction >= penalty.churn_threshold:
        failure = "overflow_churn"
    elif not learned and result.zero_grad_fraction >= penalty.underflow_threshold:
        failure = "underflow"
    elif not learned:
        failure = "frozen"
    else:
        failure = "none"
    value = result.final_loss + penalty.skip * skipped_fraction
    if failure != "none":
        value += penalty.silent
    return Assessment(value, failure, False, learned, None)
