"""Sampled trials: asked of the in-memory replica, trained, and written to storage whole.

Training happens with no storage call at all, and the finished trial (params, value, every attr,
intermediate values, the sampler's own system attrs) is written with one write; nothing of it is
ever RUNNING in storage, so an interrupt or a crash cannot leave a stale RUNNING trial. In a
shared study (other processes may work on it) the trial is instead registered RUNNING with its
params in one transaction and beats while it trains, so that if its worker dies a live one fails
it and re-runs the same params; it is finished in one more transaction.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import Interrupted, deferred_interrupts, held_interrupts, suggest
from search.scalers import RuleSetting, ScalerConfig
from search.storage import first_beat, heartbeat
from search.study._trial_training import raise_task_exit
from search.training import TrialOutcome

if TYPE_CHECKING:
    from search.study._trial_loop import Runner

# Records how a trial ended: (state, value, user attrs, intermediate values) -> the stored trial's id,
# or None when a peer failed it first.
_Record = Callable[[TrialState, float | None, dict, dict[int, float]], int | None]


def run_sampled_trial(runner: Runner, trials: list[FrozenTrial]) -> None:
    """Samples one trial against ``trials`` (the study as last read), trains it and records it."""
    runner.flight.handling = True
    started = datetime.datetime.now()
    runner.replica.sync(trials)
    trial = runner.replica.study.ask()
    scaler_config = suggest(trial, runner.settings.space, runner.settings.run.scaler)
    if runner.shared:
        _run_registered(runner, trial, scaler_config, started)
        return

    def record(state: TrialState, value: float | None, attrs: dict, values: dict[int, float]) -> int | None:
        # The replica's trial carries the params and the sampler's system attrs.
        frozen = runner.replica.frozen(trial)
        runner.flight.trial_id = runner.recorder.write(frozen, state, value, attrs, values, started)
        return runner.flight.trial_id

    _train_and_record(runner, trial, lambda: runner.training.train(trial, scaler_config), record)


def _run_registered(
    runner: Runner, trial: optuna.Trial, scaler_config: ScalerConfig | RuleSetting, started: datetime.datetime
) -> None:
    """A sampled trial that is RUNNING in storage, with a heartbeat, while it trains."""
    recorder = runner.recorder
    with held_interrupts() as pending:
        # Registered with its first heartbeat in the same transaction (TrialWriter.add).
        beaten = time.monotonic()
        trial_id = recorder.write(runner.replica.frozen(trial), TrialState.RUNNING, None, {}, {}, started)
        runner.flight.trial_id = trial_id
        if not recorder.writer.batched:
            first_beat(runner.study, trial_id, runner.settings.run.storage_retry)
        # What this process wrote stands for the stored trial (finished without reading it back),
        # unless the write was found after a lost acknowledgement.
        written = recorder.last_written
        stored = written if written is not None else runner.stored_trial(trial_id)

    def train() -> TrialOutcome:
        if pending:
            raise Interrupted(pending[0])
        with heartbeat(runner.study, trial_id, beaten):
            return runner.training.train(trial, scaler_config)  # Pruning reports go to the replica.

    def record(state: TrialState, value: float | None, attrs: dict, values: dict[int, float]) -> int | None:
        return trial_id if recorder.finish(stored, state, value, attrs, values) else None

    _train_and_record(runner, trial, train, record)


def _train_and_record(
    runner: Runner, trial: optuna.Trial, train: Callable[[], TrialOutcome], record: _Record
) -> None:
    """Trains a sampled trial and records how it ended; ``record`` gives None when a peer failed it first."""
    training = runner.training
    try:
        outcome = train()
    except BaseException as error:
        attrs = training.failure_attrs(error)
        with deferred_interrupts():
            runner.replica.settle(trial, TrialState.FAIL, None, {}, record(TrialState.FAIL, None, attrs, {}))
        runner.on_trial(TrialState.FAIL, None)
        if isinstance(error, Exception):
            return
        raise_task_exit(error)
        raise
    state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
    value = outcome.value if state == TrialState.COMPLETE else None
    with held_interrupts() as pending:  # Raised after counting, as for a queued trial.
        stored_id = record(state, value, outcome.user_attrs, outcome.intermediate_values)
        runner.replica.settle(trial, state, value, outcome.intermediate_values, stored_id)
    if stored_id is not None:
        training.count(state)
        runner.on_trial(state, outcome.value)
    if pending:
        raise Interrupted(pending[0])
