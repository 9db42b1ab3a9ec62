"""Failing the RUNNING trials of dead workers (kill -9, lost host), so that Optuna queues them again.

A trial with no heartbeat for twice the interval is stale: ``optuna.storages.fail_stale_trials``
fails it and its ``RetryHeartbeatStaleTrialCallback`` queues a retry. Every worker does this
between trials; the count says how many this worker failed, for the run's summary.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from search.core import FAIL_REASON


def fail_stale_trials(study: optuna.Study, storage_call: Callable[[Callable[[], Any], str], Any]) -> int:
    """Fails the study's stale trials; returns how many this call failed.

    Args:
        study: The study in storage.
        storage_call: Runs a storage call, riding out an outage (``(call, what) -> result``).
    """

    def stale_fails() -> set[int]:
        # Optuna fails a stale trial without a fail_reason; every trial we fail has one.
        trials = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        return {t.number for t in trials if FAIL_REASON not in t.user_attrs}

    before = storage_call(stale_fails, "reading failed trials")
    with warnings.catch_warnings():  # "Experimental" since Optuna 2.9.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage_call(lambda: optuna.storages.fail_stale_trials(study), "failing stale trials")
    return len(storage_call(stale_fails, "reading failed trials") - before)
