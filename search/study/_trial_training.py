"""Training for the trial loop: one trial or a population, and how a failed one is accounted.

Every path of the loop (queued, sampled, population) trains through :class:`TrialTraining`: the
same settings, the same timeout rule, the same "worker" attr, and the same run statistics when a
trial ends.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna
import torch
from optuna.trial import TrialState

from search.core import (
    AS_RUN_BASELINE,
    BASELINE,
    DEVICE,
    FAIL_REASON,
    FAIL_TRACEBACK,
    Interrupted,
    Settings,
    process_token,
)
from search.core import WORKER as WORKER_ATTR
from search.scalers import RuleSetting, ScalerConfig
from search.tasks import TaskError
from search.tasks.base import Problem
from search.training import TrialOutcome, TrialTimeout, run_population, run_trial

if TYPE_CHECKING:
    from search.study._trial_loop import RunStats

WORKER = process_token()  # Which process ran a trial (user attr "worker").


class TrialTraining:
    """Trains the loop's trials and counts how they ended in ``stats``.

    Args:
        problem: The task's problem, already on ``device``.
        settings: Validated settings.
        device_label: Stored with every trial.
        amp_dtype: Autocast dtype.
        pruner: The pruner, or None for no pruning.
        stats: This run's statistics, updated as trials end.
        steps: Optimizer steps of every trial (the run plan's ``steps_per_trial``).
    """

    def __init__(
        self,
        problem: Problem,
        settings: Settings,
        device_label: str,
        amp_dtype: torch.dtype,
        pruner: optuna.pruners.BasePruner | None,
        stats: RunStats,
        steps: int,
    ) -> None:
        self.problem = problem
        self.steps = steps
        self.settings = settings
        self.device_label = device_label
        self.amp_dtype = amp_dtype
        self.pruner = pruner
        self.stats = stats
        # The first optimizer a process builds costs ~1 s of lazy imports in torch 2.13; pay it
        # here so that the first trial's train_seconds is comparable with the others.
        with contextlib.suppress(Exception):  # A broken factory fails in the trials, recorded.
            device = next(problem.model.parameters()).device
            problem.make_optimizer([torch.nn.Parameter(torch.zeros(1, device=device))])

    def train(
        self, trial: optuna.Trial, scaler_config: ScalerConfig | RuleSetting, prune: bool = True
    ) -> TrialOutcome:
        """Trains one trial; pruning reports go to ``trial`` (the replica's copy, or a queued trial)."""
        should_prune = _pruning_judge(trial) if self.pruner is not None and prune else None
        # The run as it was: the checkpoint's own scaler goes on from its state, not afresh at its setting.
        continued = trial.user_attrs.get(BASELINE) == AS_RUN_BASELINE
        outcome = run_trial(
            self.problem,
            scaler_config,
            should_prune=should_prune,
            continue_scaler=continued,
            **self._training_kwargs(),
        )
        outcome.user_attrs[WORKER_ATTR] = WORKER
        return outcome

    def train_population(
        self, members: list[optuna.Trial], configs: list[ScalerConfig]
    ) -> list[TrialOutcome]:
        """Trains K trials at once; --trial-timeout is one limit for all (its members end together)."""
        should_prune = [_pruning_judge(trial) for trial in members] if self.pruner is not None else None
        outcomes = run_population(self.problem, configs, should_prune=should_prune, **self._training_kwargs())
        for outcome in outcomes:
            outcome.user_attrs[WORKER_ATTR] = WORKER
        return outcomes

    def _training_kwargs(self) -> dict[str, Any]:
        """What a trial and a population train with, from the settings."""
        run = self.settings.run
        return {
            "steps": self.steps,
            "amp_dtype": self.amp_dtype,
            "penalty": self.settings.penalty,
            "device_label": self.device_label,
            "timeout": run.trial_timeout or None,
        }

    def failure_attrs(self, error: BaseException, trials: int = 1) -> dict[str, Any]:
        """The attrs of a trial that failed with ``error``; ``trials`` counts a population's K as K failures.
        """
        if isinstance(error, Interrupted):
            reason = f"interrupted ({error})"
            if trials > 1:
                reason += f", with the {trials} trials of its population"
        else:
            reason = f"{type(error).__name__}: {error}".strip()[:500]
            if isinstance(error, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        self.stats.failed += trials
        self.stats.fail_reasons += [reason] * trials
        attrs = {FAIL_REASON: reason, DEVICE: self.device_label, WORKER_ATTR: WORKER}
        if not isinstance(error, (Interrupted, TrialTimeout)):  # Raised by the task's code: it would again.
            attrs[FAIL_TRACEBACK] = "".join(traceback.format_exception(error))[-4000:]
            self.stats.task_failures.append((reason, attrs[FAIL_TRACEBACK]))
        return attrs

    def count(self, state: TrialState) -> None:
        """Counts a trial recorded COMPLETE or PRUNED."""
        if state == TrialState.COMPLETE:
            self.stats.completed += 1
        else:
            self.stats.pruned += 1


def _pruning_judge(trial: optuna.Trial) -> Callable[[int, float], bool]:
    """The pruner's verdict on ``trial`` (the replica's copy) after each reported loss."""

    def should_prune(step: int, loss: float) -> bool:
        trial.report(loss, step)
        return trial.should_prune()

    return should_prune


def raise_task_exit(error: BaseException) -> None:
    """A task's ``sys.exit`` during a trial (recorded as FAIL) ends the run as an error, not a success."""
    if isinstance(error, SystemExit):
        raise TaskError(
            f"the task called sys.exit({error.code!r}) during a trial (recorded as FAIL)"
        ) from error
