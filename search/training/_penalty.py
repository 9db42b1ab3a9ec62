"""Turns a training run into an objective value and a failure code.

Optuna treats a NaN objective as FAIL and its samplers then ignore the trial, so a search
could never learn where the unsafe region is. Every run therefore gets a finite value:

* ``nonfinite`` (loss or weights became NaN/Inf): ``nonfinite * (2 - first_bad_step / steps)``,
  i.e. between ``nonfinite`` and ``2 * nonfinite``, the earlier the divergence the worse. With the
  default 10 this is above any finite cross-entropy a run that trains at all reaches.
* everything else: ``eval_loss + skip * skipped_fraction + silent * [silent failure]``, where
  ``eval_loss`` is the evaluation every trial is judged on (:mod:`search.training._evaluation`: the final
  weights' fp32 loss on the evaluation set, or for a full-batch task the last step's loss). The
  ``silent`` term (default 1.0, more than the untrained 2-class loss ln 2 = 0.69) puts every run
  that did not learn behind every run that did; the ``skip`` term (default 0.1) gently prefers
  settings that waste fewer steps among equally good losses.

Under a framework's scale rule (``--scaler``, :mod:`search.scalers`) two more: ``ended_at_minimum``,
the framework would have ended the run (DeepSpeed's ZeRO and fairseq stop at their minimum scale),
valued like a divergence at that step (``nonfinite * (2 - ended_step / planned_steps)``: the user's
run died there); and ``pinned_at_minimum``, the scale sat at its minimum and at least
``churn_threshold`` of the steps taken there overflowed (Megatron clamps and goes on skipping), a
silent failure.

Failure codes, first match wins: ``nonfinite``; ``ended_at_minimum``; ``pinned_at_minimum``;
``overflow_churn`` (at least ``churn_threshold`` of the steps skipped); ``underflow`` (the share of gradient
entries that were exactly zero exceeds the share an fp32 run of the same problem has by at least
``underflow_threshold``: the loss scale was too small for fp16, whether or not the run still learned a little;
the fp32 share keeps a model's own exact zeros, dead ReLUs or unused embedding rows, from counting);
``frozen`` (did not learn for another reason: a flat loss, or a finite one that rose, alike); ``none``. A run
*learned* when its evaluation fell by at least ``learn_threshold`` (default 10%) from the initial weights'
  evaluation, comparing like with like:
the median chunk loss of the same evaluation before and after (for a full-batch task, the last
step's loss against the first step's). ``skipped_fraction`` counts the steps GradScaler itself
skipped (its ``found_inf``); the zero fraction is taken before clipping, on unskipped steps
(:mod:`search.training._trainer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from search.core import PenaltyConfig
from search.training._trainer import TrainResult


@dataclass(frozen=True)
class Assessment:
    """The verdict on one run: objective value, failure code and flags."""

    value: float
    failure: str
    nonfinite: bool
    learned: bool
    first_nonfinite_step: int | None


def assess(result: TrainResult, penalty: PenaltyConfig) -> Assessment:
    """Computes the objective value (always finite) and the failure code of ``result``."""
    steps = max(1, result.steps)
    first_bad = next((i for i, v in enumerate(result.loss_curve) if not math.isfinite(v)), None)
    if first_bad is None and not (
        result.weights_finite and math.isfinite(result.final_loss_fp32) and math.isfinite(result.eval_loss)
    ):
        first_bad = result.steps  # Diverged in the last update: the loss was still finite.
    if first_bad is not None:
        value = penalty.nonfinite * (2.0 - first_bad / steps)
        return Assessment(value, "nonfinite", True, False, first_bad)
    if result.ended_by_rule:  # The framework stopped the run: as bad as a divergence at that step.
        value = penalty.nonfinite * (2.0 - result.steps / max(1, result.planned_steps or result.steps))
        return Assessment(value, "ended_at_minimum", False, False, None)

    learned = result.eval_median <= (1.0 - penalty.learn_threshold) * result.initial_eval_median
    skipped_fraction = result.skipped_steps / steps
    if (
        result.overflows_at_minimum
        and result.overflows_at_minimum >= penalty.churn_threshold * result.steps_at_minimum
    ):
        failure = "pinned_at_minimum"
    elif skipped_fraction >= penalty.churn_threshold:
        failure = "overflow_churn"
    elif result.zero_grad_fraction - result.fp32_zero_fraction >= penalty.underflow_threshold:
        failure = "underflow"
    elif not learned:
        failure = "frozen"
    else:
        failure = "none"
    evaluated = result.eval_median if penalty.evaluation == "median" else result.eval_loss
    value = evaluated + penalty.skip * skipped_fraction
    if failure != "none":
        value += penalty.silent
    return Assessment(value, failure, False, learned, None)
