"""Writing a whole trial to storage in one transaction: adding, finishing, beating, many at once.

:class:`TrialWriter` is the one face of a study's fast writes. On an ``RDBStorage`` with this
Optuna's schema it writes the rows itself (:mod:`search.storage._study_tables`: one statement per
table, one transaction per trial instead of ~25 storage calls); on anything else it falls back to
Optuna's own calls (``study.add_trial``, ``study.tell``). Claiming, exactly-once enqueue and
finding a write are the queue's (:mod:`search.storage._trial_queue`), study attrs are
:mod:`search.storage._study_attrs`'; this class offers them too, so that callers hold one writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from search.storage._optuna_internals import check_trial, orm_models, storage_of, trial_id_of
from search.storage._study_attrs import set_study_system_attrs, set_study_user_attrs
from search.storage._study_tables import study_tables
from search.storage._trial_queue import (
    claim_waiting,
    enqueue_once,
    find_by_system_attr,
    numbers_with_user_attr,
)

models = orm_models()


# A RUNNING trial to finish: a claimed one (an ``optuna.Trial``), or what this process wrote of one it
# registered (a ``FrozenTrial``, as :class:`search.storage._recorder.TrialRecorder` keeps it): its user
# attrs and curve are then known to be those storage holds, so nothing else is read or deleted.
Running = optuna.Trial | FrozenTrial


@dataclass(frozen=True)
class Finish:
    """How one RUNNING trial ends: for :meth:`TrialWriter.finish_many`."""

    trial: Running
    state: TrialState
    value: float | None
    user_attrs: dict[str, Any]
    intermediate_values: dict[int, float] = field(default_factory=dict)


class TrialWriter:
    """Adds finished trials to one study, and sets many study system attrs at once, fast on RDB storages.

    Args:
        study: The study to write to.
    """

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self._tables = study_tables(study)
        # (id, number) of the trial the last :meth:`add` committed, on RDB storages; None after a
        # failed add. Its number counts every trial stored before it, whoever wrote them.
        self.last_added: tuple[int, int] | None = None
        # (id, number) of each trial the last :meth:`add_many` committed, likewise.
        self.last_added_many: list[tuple[int, int]] | None = None

    @property
    def batched(self) -> bool:
        """Whether the one-statement-per-table path is in use."""
        return self._tables is not None

    def add(self, trial: FrozenTrial) -> int:
        """Stores ``trial`` (from ``optuna.trial.create_trial``: finished, or RUNNING); returns its id.

        A RUNNING trial gets its first heartbeat in the same transaction: a RUNNING trial that never
        beat is never found stale by Optuna, so it must not exist even if the process dies (or
        gives up on an outage) right after the commit.
        """
        tables = self._tables
        if tables is None:
            self.study.add_trial(trial)
            return trial_id_of(self.study.get_trials(deepcopy=False)[-1])
        self.last_added = None
        check_trial(trial)
        with tables.transaction() as session:
            # The same lock and numbering as RDBStorage._create_new_trial.
            tables.lock_study(session)
            number = tables.count_trials(session)
            trial_id = tables.insert_trial(session, trial, number)
            if trial.state == TrialState.RUNNING:
                session.add(models.TrialHeartbeatModel(trial_id=trial_id))  # Stamped by the database.
        self.last_added = (trial_id, number)  # Committed.
        return trial_id

    def add_many(self, trials: Sequence[FrozenTrial]) -> list[int]:
        """Stores ``trials`` in one transaction, numbered in order; returns their ids.

        A population's K trials (finished, or RUNNING) reach storage together or not at all. Each
        RUNNING trial gets its first heartbeat in the same transaction, as in :meth:`add`.
        """
        tables = self._tables
        if tables is None:
            ids = []
            for trial in trials:
                ids.append(self.add(trial))
                if trial.state == TrialState.RUNNING:
                    storage_of(self.study).record_heartbeat(ids[-1])
            return ids
        self.last_added_many = None
        for trial in trials:
            check_trial(trial)
        with tables.transaction() as session:
            tables.lock_study(session)
            first = tables.count_trials(session)
            ids = [tables.insert_trial(session, trial, first + i) for i, trial in enumerate(trials)]
            session.add_all(
                [
                    models.TrialHeartbeatModel(trial_id=tid)  # Stamped by the database.
                    for tid, trial in zip(ids, trials)
                    if trial.state == TrialState.RUNNING
                ]
            )
        self.last_added_many = [(tid, first + i) for i, tid in enumerate(ids)]  # Committed.
        return ids

    def record_heartbeats(self, trial_ids: Sequence[int]) -> None:
        """Records the heartbeat of many RUNNING trials in one transaction (``record_heartbeat`` makes one
        each)."""
        tables = self._tables
        if tables is None:
            for tid in trial_ids:
                storage_of(self.study).record_heartbeat(tid)
            return
        beat = models.TrialHeartbeatModel
        with tables.transaction() as session:
            now = session.execute(sqlalchemy.func.now()).scalar_one()
            rows = session.query(beat).filter(beat.trial_id.in_(list(trial_ids))).with_for_update().all()
            for row in rows:
                row.heartbeat = now
            present = {row.trial_id for row in rows}
            session.add_all([beat(trial_id=tid) for tid in trial_ids if tid not in present])

    def finish_many(self, finishes: Sequence[Finish]) -> list[bool]:
        """Finishes many RUNNING trials in one transaction, each as :meth:`finish` does.

        A trial that is no longer RUNNING (a peer took its worker for dead and failed it) is left as
        it is and the others are still finished; the result says, per trial, whether it was finished
        here.
        """
        tables = self._tables
        done = []
        if tables is None:
            for f in finishes:
                if storage_of(self.study).get_trial(trial_id_of(f.trial)).state.is_finished():
                    done.append(False)
                    continue
                self.finish(f.trial, f.state, f.value, f.user_attrs, f.intermediate_values)
                done.append(True)
            return done
        with tables.transaction() as session:
            for f in finishes:
                row = models.TrialModel.find_or_raise_by_id(trial_id_of(f.trial), session, for_update=True)
                if row.state.is_finished():
                    done.append(False)
                    continue
                tables.finish_row(
                    session, row, f.state, f.value, f.user_attrs, f.intermediate_values, _held(f.trial)
                )
                done.append(True)
        return done

    def finish(
        self,
        trial: Running,
        state: TrialState,
        value: float | None,
        user_attrs: dict,
        intermediate_values: dict[int, float] | None = None,
    ) -> None:
        """Finishes a RUNNING trial (claimed with ``study.ask``): attrs, curve, value and state at once.

        The same rows as ``set_user_attr`` for each attr, ``report`` for each intermediate value,
        then ``study.tell``, in one transaction. (Our samplers' ``after_trial`` hooks do nothing for
        these trials, so none is called.)
        """
        intermediate_values = intermediate_values or {}
        tables = self._tables
        if tables is None:
            if isinstance(trial, FrozenTrial):
                trial = optuna.Trial(self.study, trial_id_of(trial))
            for key, attr in user_attrs.items():
                trial.set_user_attr(key, attr)
            for step, reported in intermediate_values.items():
                if step not in trial.storage.get_trial(trial_id_of(trial)).intermediate_values:
                    trial.report(reported, step)
            self.study.tell(trial, value, state=state)
            return
        with tables.transaction() as session:
            row = models.TrialModel.find_or_raise_by_id(trial_id_of(trial), session, for_update=True)
            tables.backend.check_trial_is_updatable(row.trial_id, row.state)
            tables.finish_row(session, row, state, value, user_attrs, intermediate_values, _held(trial))

    def claim(self, first: str | None = None) -> int | None:
        """Claims a WAITING trial (RUNNING, with its first heartbeat, in one transaction).

        Like ``study.ask``'s pop, but the heartbeat is part of the claim (see :meth:`add`). Claims
        are serialised by the study's lock (the study row; the database on SQLite), which every
        insert of a trial takes too. The trial with the lowest id is claimed, except that with
        ``first`` (a user attr key, e.g. the baseline tag) the WAITING trials carrying it go first,
        in the order of its value: a baseline queued again after its worker died takes its place in
        the baselines' order (seed-1 before seed-2) instead of going behind the others.

        Returns:
            The trial's id, or None when nothing is waiting.
        """
        return claim_waiting(self.study, self._tables, first)

    def find(self, key: str, value: str) -> int | None:
        """The id of a trial of the study whose system attr ``key`` equals ``value``, if any.

        A write whose commit went through but whose acknowledgement was lost (the connection
        dropped at that moment) is found this way before it is retried.
        """
        return find_by_system_attr(self.study, self._tables, key, value)

    def numbers_with_user_attr(self, key: str, value: Any, states: tuple[TrialState, ...]) -> list[int]:
        """The numbers of the study's trials in ``states`` whose user attr ``key`` is ``value``, in order (one
        query on RDB storages, rather than reading the whole study)."""
        return numbers_with_user_attr(self.study, self._tables, key, value, states)

    def enqueue_once(self, trials: list[FrozenTrial], tag: str) -> list[FrozenTrial]:
        """Adds the WAITING ``trials`` whose user attr ``tag`` no unfailed trial has yet.

        The check and the inserts run in one transaction holding the study's lock (the study
        row on PostgreSQL/MySQL, the database on SQLite), so that several processes starting at
        the same moment enqueue each one exactly once.

        Returns:
            The trials that were added.
        """
        return enqueue_once(self.study, self._tables, trials, tag)

    def set_study_system_attrs(self, attrs: dict[str, Any]) -> None:
        """Sets many study system attrs in one transaction (``set_study_system_attr`` makes one each)."""
        set_study_system_attrs(self.study, self._tables, attrs)

    def set_study_user_attrs(self, attrs: dict[str, Any]) -> None:
        """Sets many study user attrs in one transaction (``study.set_user_attr`` makes one each)."""
        set_study_user_attrs(self.study, self._tables, attrs)


def _held(trial: Running) -> FrozenTrial | None:
    """What storage holds of ``trial``'s user attrs and curve, if its record says so (:data:`Running`)."""
    return trial if isinstance(trial, FrozenTrial) else None
