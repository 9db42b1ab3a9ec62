"""Populations (``--population K``): K sampled trials asked of the replica, trained together, written at once.

Each member's record is an ordinary trial's (:func:`search.training.outcome_of`), plus the
population's size. In a shared study the K trials are RUNNING in storage (registered in one
transaction, one heartbeat thread for all) and finished in one more; otherwise nothing of them
reaches storage before they are written finished. An exception fails all K with its reason; an
interrupt fails all K as interrupted and re-raises; --trial-timeout applies to the population as a
whole.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import FINISHED, Interrupted, Settings, deferred_interrupts, held_interrupts, suggest
from search.storage import Finish, NewTrial, heartbeat
from search.study._trial_training import raise_task_exit

if TYPE_CHECKING:
    from search.study._trial_loop import Runner


def population_size(settings: Settings, trials: list[FrozenTrial]) -> int:
    """K, or fewer at the end: the trials still needed, so that --trials means N with one worker.

    Trials RUNNING in storage (a peer's) count as needed already: two workers of a
    population each take a share instead of both taking K, and the study ends with N to
    N + K - 1. At least one, as a worker with nothing left to share runs one trial like an
    ordinary worker would.
    """
    run = settings.run
    busy = sum(t.state in FINISHED or t.state == TrialState.RUNNING for t in trials)
    return max(1, min(run.population, run.trials - busy))


def run_population_trials(runner: Runner, trials: list[FrozenTrial]) -> None:
    """K sampled trials against ``trials`` (the study as last read), trained at once, written at once."""
    flight, recorder, replica, training = runner.flight, runner.recorder, runner.replica, runner.training
    flight.handling = True
    flight.population = []
    started = datetime.datetime.now()
    replica.sync(trials)
    members = [replica.study.ask() for _ in range(population_size(runner.settings, trials))]
    configs = [suggest(trial, runner.settings.space) for trial in members]
    stored: list[optuna.Trial] | list[FrozenTrial] = []
    beaten = 0.0
    pending: list[int] = []
    if runner.shared:
        with held_interrupts() as pending:  # Registered whole, never half: raised inside the try below.
            new = [NewTrial(replica.frozen(trial), TrialState.RUNNING) for trial in members]
            beaten = time.monotonic()  # Each registered with its first heartbeat (TrialWriter.add_many).
            ids = recorder.write_many(new, started)
            flight.population = ids
            # What this process wrote stands for the stored trials, as for one sampled trial.
            written = recorder.last_written_many
            stored = written if written is not None else [runner.stored_trial(trial_id) for trial_id in ids]

    def record(
        states: list[TrialState],
        values: list[float | None],
        attrs: list[dict],
        curves: list[dict[int, float]],
    ) -> list[bool]:
        """Writes how the K members ended, in one transaction; per member, False when a peer failed it first.
        """
        entries = list(zip(states, values, attrs, curves))
        if runner.shared:
            return recorder.finish_many([Finish(t, *entry) for t, entry in zip(stored, entries)])
        new = [NewTrial(replica.frozen(t), *entry) for t, entry in zip(members, entries)]
        flight.population = recorder.write_many(new, started)
        return [True] * len(members)

    try:
        if pending:
            raise Interrupted(pending[0])
        beating = heartbeat(runner.study, flight.population, beaten) if runner.shared else None
        with beating or contextlib.nullcontext():
            outcomes = training.train_population(members, configs)
    except BaseException as error:
        attrs, k = training.failure_attrs(error, len(members)), len(members)
        with deferred_interrupts():
            recorded = record(
                [TrialState.FAIL] * k, [None] * k, [dict(attrs) for _ in range(k)], [{} for _ in range(k)]
            )
            for trial, stored_id in zip(members, _stored_ids(flight.population, recorded)):
                replica.settle(trial, TrialState.FAIL, None, {}, stored_id)
        for _ in members:
            runner.on_trial(TrialState.FAIL, None)
        if isinstance(error, Exception):
            return
        raise_task_exit(error)
        raise
    states = [TrialState.PRUNED if o.pruned else TrialState.COMPLETE for o in outcomes]
    values = [o.value if state == TrialState.COMPLETE else None for o, state in zip(outcomes, states)]
    with held_interrupts() as pending:  # Raised after counting, as for a queued trial.
        attrs = [o.user_attrs for o in outcomes]
        curves = [o.intermediate_values for o in outcomes]
        recorded = record(states, values, attrs, curves)
        for member in zip(members, states, values, curves, _stored_ids(flight.population, recorded)):
            replica.settle(*member)
    for outcome, state, was_recorded in zip(outcomes, states, recorded):
        if was_recorded:
            training.count(state)
            runner.on_trial(state, outcome.value)
    if pending:
        raise Interrupted(pending[0])


def _stored_ids(ids: list[int], recorded: list[bool]) -> list[int | None]:
    """Each member's stored id, None where a peer failed it first."""
    return [trial_id if was else None for trial_id, was in zip(ids, recorded, strict=True)]
