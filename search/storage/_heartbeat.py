"""Heartbeats of RUNNING trials, so that the trial of a dead worker can be found and run again.

A trial that is RUNNING in storage (a claimed baseline or retry, or a sampled trial of a shared
study) beats while it trains: a thread records its heartbeat every ``--heartbeat-interval``
seconds through the storage's public ``record_heartbeat``. Between trials every worker calls
``optuna.storages.fail_stale_trials`` (:class:`search.study._trial_loop.Runner`): a RUNNING trial with no
heartbeat for twice the interval (kill -9, a lost host) becomes FAIL, and Optuna's
``RetryHeartbeatStaleTrialCallback`` queues it again. Optuna ignores RUNNING trials that never
beat, so the first beat is recorded at once, before the trial trains (:func:`first_beat`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import optuna
from optuna.trial import TrialState

from search.storage._optuna_internals import orm_models, storage_of
from search.storage._retry import with_retry
from search.storage._study_tables import study_tables
from search.storage._trial_writer import TrialWriter

_logger = logging.getLogger("search")


def heartbeat_interval(storage: optuna.storages.BaseStorage) -> int | None:
    """The storage's heartbeat interval in seconds, or None where heartbeats are off or unsupported."""
    return getattr(storage, "get_heartbeat_interval", lambda: None)()


@contextlib.contextmanager
def heartbeat(
    study: optuna.Study, trial_id: int | Sequence[int], beaten: float | None = None
) -> Iterator[None]:
    """Records the heartbeat of a RUNNING trial, or of a population's K trials, while the block runs.

    Optuna beats only inside ``study.optimize``; this loop claims trials with ``ask``, so it
    beats itself, through the storage's public ``record_heartbeat``. A population's trials share
    one thread, which beats for all of them in one transaction
    (:meth:`search.storage._trial_writer.TrialWriter.record_heartbeats`): K trials cost one write per
    interval, not K threads and K writes.

    ``beaten``: ``time.monotonic()`` taken before the write that recorded the trials' last heartbeat
    (the claim or the registration: :func:`first_beat`, ``TrialWriter.add``); the first beat is then
    one interval after it, not at once: a trial that trains for less than the interval costs no beat.
    """
    storage = storage_of(study)
    interval = heartbeat_interval(storage)
    if not interval:
        yield
        return
    stop = threading.Event()
    if isinstance(trial_id, int):
        name = str(trial_id)
        record: Callable[[], None] = functools.partial(storage.record_heartbeat, trial_id)
    else:
        ids = list(trial_id)
        name = f"{ids[0]}+{len(ids) - 1}"
        record = functools.partial(TrialWriter(study).record_heartbeats, ids)

    def beat() -> None:
        if beaten is not None and stop.wait(max(0.0, interval - (time.monotonic() - beaten))):
            return
        while True:
            try:
                record()
            except Exception as error:  # The database is away: keep beating, it may come back.
                _logger.debug("heartbeat of trial %s failed: %s", name, error)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def first_beat(study: optuna.Study, trial_id: int, retry_budget: float) -> None:
    """Records a just-RUNNING trial's first heartbeat, so that it can be found stale at once.

    Retried through an outage for up to ``retry_budget`` seconds (:func:`search.storage._retry.with_retry`).
    """
    storage = storage_of(study)
    if heartbeat_interval(storage):
        with_retry(
            lambda: storage.record_heartbeat(trial_id), what="recording a heartbeat", budget=retry_budget
        )


def beating_trials(study: optuna.Study) -> int:
    """How many of the study's RUNNING trials have a heartbeat: each will finish or go stale and be retried.

    A worker that has reached the study's N waits for these before it stops, so that a dead peer's
    trial is failed and run again rather than left RUNNING. A RUNNING trial that never beat (heartbeats
    off, or left by another program) can never go stale, so it is not counted: waiting would never end.
    """
    storage = storage_of(study)
    if not heartbeat_interval(storage):
        return 0
    tables = study_tables(study)
    if tables is None:  # Another storage that beats: it keeps no heartbeat rows we can read.
        return len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
    models = orm_models()
    trial, beat = models.TrialModel, models.TrialHeartbeatModel
    with tables.transaction() as session:
        return (
            session.query(trial.trial_id)
            .join(beat, beat.trial_id == trial.trial_id)
            .filter(trial.study_id == tables.study_id, trial.state == TrialState.RUNNING)
            .count()
        )
