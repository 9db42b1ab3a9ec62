"""Queued trials (the baselines, roundings of the answer, retries of failed ones): claimed and run.

A queued trial is claimed with the same atomic pop as ``study.ask()`` (safe across processes and
hosts), is RUNNING with a heartbeat while it trains, and is finished in one transaction. A failed
baseline is queued again, so that every study ends with every baseline's row.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from search.core import (
    BASELINE,
    FAIL_REASON,
    FINISHED,
    ROUNDING_OF,
    Interrupted,
    baseline_of,
    deferred_interrupts,
    held_interrupts,
    suggest,
)
from search.storage import first_beat, fixed_params_of, heartbeat, trial_id_of
from search.study._trial_training import raise_task_exit

if TYPE_CHECKING:
    from search.study._trial_loop import Runner


def run_queued_trial(runner: Runner) -> bool:
    """Runs one queued trial; False when another worker claimed the last one first."""
    # A signal during the claim is held and raised inside the try below, so that the claimed
    # (RUNNING) trial is recorded as FAIL and its baseline queued again, never left RUNNING.
    runner.flight.handling = True
    with held_interrupts() as pending:
        beaten = time.monotonic()  # The claim records the trial's first heartbeat.
        trial = _claim(runner)
        runner.flight.trial_id = trial_id_of(trial) if trial is not None else None
    if trial is None:
        if pending:
            raise Interrupted(pending[0])
        return False
    recorder, training = runner.recorder, runner.training
    try:
        if pending:
            raise Interrupted(pending[0])
        with heartbeat(runner.study, trial_id_of(trial), beaten):
            duplicate = _duplicate_of(runner, trial)
            if duplicate is not None:
                recorder.finish(trial, TrialState.FAIL, None, {FAIL_REASON: duplicate})
                return True
            # A queued trial's fixed params are written to storage here (idempotent, so retried).
            scaler_config = runner.storage_call(
                lambda: suggest(
                    trial, runner.settings.space, runner.settings.run.scaler, fixed_params_of(trial)
                ),
                "setting params",
            )
            # A rounding of the answer's line is measured whole: it is the line a user pastes.
            outcome = training.train(trial, scaler_config, prune=ROUNDING_OF not in trial.user_attrs)
    except BaseException as error:
        attrs = training.failure_attrs(error)
        with deferred_interrupts():
            recorder.finish(trial, TrialState.FAIL, None, attrs)
            recorder.requeue_baseline(trial)
        runner.on_trial(TrialState.FAIL, None)
        if isinstance(error, Exception):
            return True
        raise_task_exit(error)
        raise
    state = TrialState.PRUNED if outcome.pruned else TrialState.COMPLETE
    # A signal held during the write is raised only after the trial is counted, so that the
    # progress bar and the interrupt message agree with what storage holds.
    with held_interrupts() as pending:
        value = outcome.value if state == TrialState.COMPLETE else None
        recorded = recorder.finish(trial, state, value, outcome.user_attrs, outcome.intermediate_values)
    if recorded:
        training.count(state)
        runner.on_trial(state, outcome.value)
    if pending:
        raise Interrupted(pending[0])
    return True


def _claim(runner: Runner) -> optuna.Trial | None:
    """Claims a WAITING trial (like ``study.ask``'s atomic pop, without its fallback to sampling).

    Its first heartbeat is part of the claim, so that it can be found stale if this process
    dies (or gives up on an outage) before the heartbeat thread starts: Optuna ignores RUNNING
    trials with no heartbeat.
    """
    writer = runner.recorder.writer
    trial_id = runner.storage_call(lambda: writer.claim(first=BASELINE), "claiming a queued trial")
    if trial_id is None:
        return None
    if not writer.batched:  # Another storage: the claim could not beat.
        first_beat(runner.study, trial_id, runner.settings.run.storage_retry)
    return runner.stored_trial(trial_id)


def _duplicate_of(runner: Runner, trial: optuna.Trial) -> str | None:
    # A safety net for exactly-once baselines: a retry queued by Optuna's stale-trial
    # callback can race with a resume that re-enqueues the same failed baseline.
    tag = baseline_of(trial)
    if tag is None:
        return None
    def holders(states: tuple[TrialState, ...]) -> list[int]:
        return runner.storage_call(
            lambda: runner.recorder.writer.numbers_with_user_attr(BASELINE, tag, states),
            "reading the baseline's trials",
        )

    # A finished copy wins; of two running, the older: two claimants never fail each other.
    other = next((number for number in holders(FINISHED) if number != trial.number), None)
    if other is None:
        other = next((n for n in holders((TrialState.RUNNING,)) if n < trial.number), None)
    return None if other is None else f"duplicate of baseline {tag} (trial {other}); not run"
