"""One trial's work: train with the given scaler settings, judge the run, build its attrs.

:func:`run_trial` trains one setting; :func:`run_population` trains K at once (population mode).
Both turn each run into a trial with :func:`outcome_of`, the one place the record is built.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from search.core import (
    ENDED_BY_RULE,
    FIRST_STEP,
    LR_CURVE,
    OVERFLOW_STEPS,
    OVERFLOWS_AT_MINIMUM,
    POPULATION,
    STEPS_AT_MINIMUM,
    PenaltyConfig,
)
from search.scalers import RuleSetting, ScalerConfig
from search.tasks.base import Problem
from search.training._penalty import assess
from search.training._population import train_population
from search.training._trainer import TrainResult, train

VERSIONS = {
    "torch": torch.__version__,
    "optuna": importlib.metadata.version("optuna"),  # Not imported: training knows nothing of Optuna.
    "python": platform.python_version(),
}


@dataclass(frozen=True)
class TrialOutcome:
    """A finished run as Optuna will store it: value, user attrs, the loss per optimizer step as intermediate
    values."""

    value: float
    user_attrs: dict[str, Any]
    intermediate_values: dict[int, float]
    pruned: bool


def run_trial(
    problem: Problem,
    scaler_config: ScalerConfig | RuleSetting,
    *,
    steps: int,
    amp_dtype: torch.dtype,
    penalty: PenaltyConfig,
    device_label: str,
    timeout: float | None = None,
    should_prune: Callable[[int, float], bool] | None = None,
    n_reports: int = 10,
    continue_scaler: bool = False,
) -> TrialOutcome:
    """Trains once and returns what the trial records.

    Args:
        problem: The study's problem, already on the device.
        scaler_config: The trial's GradScaler settings, or its setting of a framework's rule.
        steps: Optimizer steps, resolved once for the whole run from the settings'
            ``--epochs``/``--steps`` (:func:`search.training._trainer.run_steps`).
        amp_dtype: Autocast dtype.
        penalty: Penalty weights and thresholds.
        device_label: The device string stored with the trial (e.g. ``cuda:0 (NVIDIA H100)``).
        timeout: Seconds the trial may train (--trial-timeout), not counting the references that
            the process's first trial computes for all; None for no limit.
        should_prune: Called at up to ``n_reports`` evenly spaced steps with the loss so far;
            True stops the run as PRUNED. None disables pruning and its host syncs.
        n_reports: Number of sparse reports for pruning (each one a sync, never a storage call).
        continue_scaler: Continue the scaler the problem's checkpoint saved (baseline ``as-run``; see
            :func:`~search.training.train`).
    """
    intermediate: dict[int, float] = {}
    checkpoints: tuple[int, ...] = ()
    stop = None
    if should_prune is not None:
        checkpoints = pruning_checkpoints(steps, n_reports)

        def stop(step: int, loss: float) -> bool:
            intermediate[step] = loss if math.isfinite(loss) else penalty.nonfinite
            return should_prune(step, intermediate[step])

    result = train(
        problem,
        scaler_config,
        steps=steps,
        amp_dtype=amp_dtype,
        timeout=timeout,
        checkpoints=checkpoints,
        should_stop=stop,
        continue_scaler=continue_scaler,
    )
    return outcome_of(result, penalty, device_label, intermediate)


def run_population(
    problem: Problem,
    scaler_configs: Sequence[ScalerConfig],
    *,
    steps: int,
    amp_dtype: torch.dtype,
    penalty: PenaltyConfig,
    device_label: str,
    timeout: float | None = None,
    should_prune: Sequence[Callable[[int, float], bool]] | None = None,
    n_reports: int = 10,
) -> list[TrialOutcome]:
    """Trains K settings at once (:func:`search.training._population.train_population`); one outcome per
    setting.

    Each outcome is built by :func:`outcome_of`, as :func:`run_trial` builds one, plus the
    population's size (:data:`search.core._record.POPULATION`); ``train_seconds`` is what the member
    really cost, the population's wall time divided by K. Arguments as for :func:`run_trial`, except
    ``should_prune``: one callable per setting, each asked at the same sparse checkpoints; a pruned
    member stops there (its weights and scale freeze) while the others go on. ``timeout`` applies
    to the whole population: past it, every member fails with :class:`~search.training._trainer.TrialTimeout`.

    Raises:
        PopulationError: The problem cannot be vectorised.
    """
    size = len(scaler_configs)
    intermediate: list[dict[int, float]] = [{} for _ in range(size)]
    checkpoints: tuple[int, ...] = ()
    stop = None
    if should_prune is not None:
        checkpoints = pruning_checkpoints(steps, n_reports)

        def stop(member: int, step: int, loss: float) -> bool:
            intermediate[member][step] = loss if math.isfinite(loss) else penalty.nonfinite
            return should_prune[member](step, intermediate[member][step])

    results = train_population(
        problem,
        scaler_configs,
        steps=steps,
        amp_dtype=amp_dtype,
        timeout=timeout,
        checkpoints=checkpoints,
        should_stop=stop,
    )
    outcomes = []
    for result, reported in zip(results, intermediate):
        # train_population reports the population's wall time for every member; a member cost 1/K of it.
        outcome = outcome_of(
            replace(result, train_seconds=result.train_seconds / size), penalty, device_label, reported
        )
        outcome.user_attrs[POPULATION] = size
        outcomes.append(outcome)
    return outcomes


def pruning_checkpoints(total: int, n_reports: int) -> tuple[int, ...]:
    """The up to ``n_reports`` evenly spaced step counts of a ``total``-step run after which a pruner
    is asked (each a host sync)."""
    return tuple(sorted({max(1, round(total * k / n_reports)) for k in range(1, n_reports + 1)}))


def outcome_of(
    result: TrainResult,
    penalty: PenaltyConfig,
    device_label: str,
    intermediate: dict[int, float] | None = None,
) -> TrialOutcome:
    """The trial record of a finished run: its objective value, user attrs and intermediate values.

    The one place a :class:`~search.training._trainer.TrainResult` becomes a trial, for an ordinary trial and
    for a population's member alike, so that the two records cannot drift apart.

    Args:
        result: The run.
        penalty: Penalty weights and thresholds.
        device_label: The device string stored with the trial.
        intermediate: The values already reported to a pruner (step -> loss), completed here with
            the whole loss curve.
    """
    intermediate = dict(intermediate or {})
    # The whole loss curve as intermediate values: optuna-dashboard plots them on each trial's
    # page. They go into the trial's one batched write, so they cost no extra storage call.
    for step, loss in enumerate(result.loss_curve):
        intermediate[step] = loss if math.isfinite(loss) else penalty.nonfinite
    verdict = assess(result, penalty)
    attrs = {
        "final_loss": _finite_or_none(result.final_loss),
        "final_loss_fp32": _finite_or_none(result.final_loss_fp32),
        "eval_loss": _finite_or_none(result.eval_loss),
        "initial_eval_loss": _finite_or_none(result.initial_eval_loss),
        "eval_median": _finite_or_none(result.eval_median),
        "initial_eval_median": _finite_or_none(result.initial_eval_median),
        "evaluation": result.evaluation,
        "skipped_steps": result.skipped_steps,
        "nonfinite": verdict.nonfinite,
        "failure": verdict.failure,
        "final_scale": _finite_or_none(result.scale_curve[-1]) if result.scale_curve else None,
        "loss_curve": [_finite_or_none(v) for v in result.loss_curve],
        "scale_curve": [_finite_or_none(v) for v in result.scale_curve],
        "learned": verdict.learned,
        "zero_grad_fraction": round(result.zero_grad_fraction, 6),
        "fp32_zero_fraction": round(result.fp32_zero_fraction, 6),
        "device": device_label,
        "versions": VERSIONS,
        "train_seconds": round(result.train_seconds, 6),
        # The skipped steps as measured (found_inf), under every rule: nothing reads them back from the scale.
        OVERFLOW_STEPS: [step for step, skipped in enumerate(result.skipped) if skipped],
    }
    if len(set(result.lr_curve)) > 1:  # A schedule: the rate of each step. A constant rate is the task's.
        attrs[LR_CURVE] = list(result.lr_curve)
    if result.first_step:
        attrs[FIRST_STEP] = result.first_step
    if result.min_scale is not None:  # A rule with a minimum scale: what it did there.
        attrs[ENDED_BY_RULE] = result.ended_by_rule
        attrs[STEPS_AT_MINIMUM] = result.steps_at_minimum
        attrs[OVERFLOWS_AT_MINIMUM] = result.overflows_at_minimum
    return TrialOutcome(verdict.value, attrs, intermediate, result.stopped_early)


def _finite_or_none(value: float) -> float | None:
    # JSON has no NaN: non-finite numbers are stored as null, with ``nonfinite`` set.
    return value if math.isfinite(value) else None
