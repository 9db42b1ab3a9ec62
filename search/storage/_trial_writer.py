"""Writing a finished trial to storage in one transaction with one statement per table.

``study.add_trial`` already writes a whole trial in one transaction, but it issues a SELECT and
an upsert per param and per attr: about 1-2 ms each here, so a trial with 4 params and 13 attrs
costs ~20-40 ms, more than plain Optuna's per-trial work we are benchmarked against. This writer
inserts the same rows through Optuna's own ORM models, batched (SQLAlchemy's insertmanyvalues),
and numbers the trial exactly as ``RDBStorage`` does (lock the study row, insert, count earlier
trials). It is used only for an ``RDBStorage`` whose schema is the one this Optuna release
creates; anything else falls back to ``study.add_trial``. ``tests/test_trial_writer.py`` checks
that both paths store identical trials on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy.orm
from optuna.distributions import distribution_to_json
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.trial import FrozenTrial, TrialState

__all__ = ["Finish", "TrialWriter"]


@dataclass(frozen=True)
class Finish:
    """How one RUNNING trial ends: for :meth:`TrialWriter.finish_many`."""

    trial: optuna.Trial
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
        self._rdb = _unwrap_rdb(study)
        self._study_id = None
        self._numbered = -1
        # (id, number) of the trial the last :meth:`add` committed, on RDB storages; None after a
        # failed add. Its number counts every trial stored before it, whoever wrote them.
        self.last_added: tuple[int, int] | None = None
        if self._rdb is not None:
            self._study_id = self._rdb.get_study_id_from_name(study.study_name)

    @property
    def batched(self) -> bool:
        """Whether the one-statement-per-table path is in use."""
        return self._rdb is not None

    def add(self, trial: FrozenTrial) -> int:
        """Stores ``trial`` (from ``optuna.trial.create_trial``: finished, or RUNNING); returns its id.

        A RUNNING trial gets its first heartbeat in the same transaction: a RUNNING trial that never
        beat is never found stale by Optuna, so it must not exist even if the process dies (or
        gives up on an outage) right after the commit.
        """
        if self._rdb is None:
            self.study.add_trial(trial)
            return self.study.get_trials(deepcopy=False)[-1]._trial_id
        self.last_added = None
        trial._validate()
        with self._transaction() as session:
            # The same lock and numbering as RDBStorage._create_new_trial.
            models.StudyModel.find_or_raise_by_id(self._study_id, session, for_update=True)
            trial_id = self._insert(session, trial)
            if trial.state == TrialState.RUNNING:
                session.add(models.TrialHeartbeatModel(trial_id=trial_id))  # Stamped by the database.
        self.last_added = (trial_id, self._numbered)  # Committed.
        return trial_id

    def claim(self, first: str | None = None) -> int | None:
        """Claims a WAITING trial (RUNNING, with its first heartbeat, in one transaction).

        Like ``study.ask``'s pop, but the heartbeat is part of the claim (see :meth:`add`). Claims
        are serialised by the study's lock (the study row; the database on SQLite), which every
        insert of a trial takes too. The trial with the lowest id is claimed, except that with
        ``first`` (a user attr key, e.g. the baseline tag) the WAITING trials carrying it go first,
        in the order of its value: a baseline queued again after its worker died takes its place in
        the seed's table (seed-1 before seed-2) instead of going behind the others.

        Returns:
            The trial's id, or None when nothing is waiting.
        """
        if self._rdb is None:
            return self.study._pop_waiting_trial_id()
        trial = models.TrialModel
        attr = models.TrialUserAttributeModel
        with self._transaction() as session:
            models.StudyModel.find_or_raise_by_id(self._study_id, session, for_update=True)
            waiting = (
                session.query(trial)
                .filter(trial.study_id == self._study_id, trial.state == TrialState.WAITING)
                .order_by(trial.trial_id)
                .all()
            )
            if not waiting:
                return None
            row = waiting[0]
            if first is not None and len(waiting) > 1:
                ids = [w.trial_id for w in waiting]
                tags = dict(
                    session.query(attr.trial_id, attr.value_json)
                    .filter(attr.trial_id.in_(ids), attr.key == first)
                    .all()
                )
                if tags:
                    # Natural order of the values ("seed-2" before "seed-10"), then the trial id.
                    def order(w: Any) -> tuple[int, int, str, int]:
                        value = json.loads(tags[w.trial_id]) if w.trial_id in tags else None
                        text = str(value)
                        return (0, len(text), text, w.trial_id) if value is not None else (1, 0, "", w.trial_id)

                    row = min(waiting, key=order)
            row.state = TrialState.RUNNING
            row.datetime_start = datetime.datetime.now()  # As RDBStorage.set_trial_state_values does.
            session.add(models.TrialHeartbeatModel(trial_id=row.trial_id))
            return row.trial_id

    def add_many(self, trials: Sequence[FrozenTrial]) -> list[int]:
        """Stores ``trials`` in one transaction, numbered in order; returns their ids.

        A population's K trials (finished, or RUNNING) reach storage together or not at all. Each
        RUNNING trial gets its first heartbeat in the same transaction, as in :meth:`add`.
        """
        if self._rdb is None:
            ids = []
            for trial in trials:
                ids.append(self.add(trial))
                if trial.state == TrialState.RUNNING:
                    self.study._storage.record_heartbeat(ids[-1])
            return ids
        for trial in trials:
            trial._validate()
        with self._transaction() as session:
            models.StudyModel.find_or_raise_by_id(self._study_id, session, for_update=True)
            ids = [self._insert(session, trial) for trial in trials]
            session.add_all(
                [
                    models.TrialHeartbeatModel(trial_id=tid)  # Stamped by the database.
                    for tid, trial in zip(ids, trials)
                    if trial.state == TrialState.RUNNING
                ]
            )
            return ids

    def record_heartbeats(self, trial_ids: Sequence[int]) -> None:
        """Records the heartbeat of many RUNNING trials in one transaction (``record_heartbeat`` makes one each)."""
        if self._rdb is None:
            for tid in trial_ids:
                self.study._storage.record_heartbeat(tid)
            return
        beat = models.TrialHeartbeatModel
        with self._transaction() as session:
            now = session.execute(sqlalchemy.func.now()).scalar_one()
            rows = session.query(beat).filter(beat.trial_id.in_(list(trial_ids))).with_for_update().all()
            for row in rows:
                row.heartbeat = now
            present = {row.trial_id for row in rows}
            session.add_all([beat(trial_id=tid) for tid in trial_ids if tid not in present])

    def find(self, key: str, value: str) -> int | None:
        """The id of a trial of the study whose system attr ``key`` equals ``value``, if any.

        A write whose commit went through but whose acknowledgement was lost (the connection
        dropped at that moment) is found this way before it is retried.
        """
        if self._rdb is None:
            trials = self.study.get_trials(deepcopy=False)
            return next((t._trial_id for t in trials if t.system_attrs.get(key) == value), None)
        attr = models.TrialSystemAttributeModel
        with self._transaction() as session:
            query = (
                session.query(attr.trial_id)
                .join(models.TrialModel, models.TrialModel.trial_id == attr.trial_id)
                .filter(models.TrialModel.study_id == self._study_id)
                .filter(attr.key == key, attr.value_json == json.dumps(value))
            )
            row = query.first()
            return None if row is None else row[0]

    def enqueue_once(self, trials: list[FrozenTrial], tag: str) -> list[FrozenTrial]:
        """Adds the WAITING ``trials`` whose user attr ``tag`` no unfailed trial has yet.

        The check and the inserts run in one transaction holding the study's lock (the study
        row on PostgreSQL/MySQL, the database on SQLite), so that several processes starting at
        the same moment enqueue each one exactly once.

        Returns:
            The trials that were added.
        """
        if self._rdb is None:  # In-memory storage: one process, no race.
            present = _tags_present(self.study.get_trials(deepcopy=False), tag)
            added = [t for t in trials if t.user_attrs.get(tag) not in present]
            for t in added:
                self.study.add_trial(t)
            return added
        attr = models.TrialUserAttributeModel
        with self._transaction() as session:
            models.StudyModel.find_or_raise_by_id(self._study_id, session, for_update=True)
            rows = (
                session.query(attr.value_json)
                .join(models.TrialModel, models.TrialModel.trial_id == attr.trial_id)
                .filter(models.TrialModel.study_id == self._study_id)
                .filter(models.TrialModel.state != TrialState.FAIL)
                .filter(attr.key == tag)
                .all()
            )
            present = {json.loads(value) for (value,) in rows}
            added = [t for t in trials if t.user_attrs.get(tag) not in present]
            for t in added:
                t._validate()
                self._insert(session, t)
        return added

    def _insert(self, session: sqlalchemy.orm.Session, trial: FrozenTrial) -> int:
        # The caller holds the study's lock: numbering below counts the trials before this one.
        row = models.TrialModel(study_id=self._study_id, number=None, state=trial.state)
        row.datetime_start = trial.datetime_start
        row.datetime_complete = trial.datetime_complete
        session.add(row)
        session.flush()
        tid = row.trial_id
        params = [
            {
                "trial_id": tid,
                "param_name": name,
                "param_value": trial.distributions[name].to_internal_repr(value),
                "distribution_json": distribution_to_json(trial.distributions[name]),
            }
            for name, value in trial.params.items()
        ]
        _insert_rows(session, models.TrialParamModel, params)
        values = []
        if trial.value is not None:
            stored, kind = models.TrialValueModel.value_to_stored_repr(trial.value)
            values.append({"trial_id": tid, "objective": 0, "value": stored, "value_type": kind})
        _insert_rows(session, models.TrialValueModel, values)
        _insert_rows(session, models.TrialIntermediateValueModel, _curve_rows(tid, trial.intermediate_values))
        _insert_rows(session, models.TrialUserAttributeModel, _attr_rows(tid, trial.user_attrs))
        _insert_rows(session, models.TrialSystemAttributeModel, _attr_rows(tid, trial.system_attrs))
        row.number = row.count_past_trials(session)
        self._numbered = row.number
        return tid

    def set_study_system_attrs(self, attrs: dict[str, Any]) -> None:
        """Sets many study system attrs in one transaction (``set_study_system_attr`` makes one each).

        optuna-dashboard keeps a figure or a note as chunks of ~2 kB, one system attr each: a study
        page's figures are a hundred attrs, and one transaction per attr made publishing cost
        seconds on SQLite.
        """
        if self._rdb is None:
            for key, value in attrs.items():
                self.study._storage.set_study_system_attr(self.study._study_id, key, value)
            return
        if not attrs:
            return
        model = models.StudySystemAttributeModel
        with self._transaction() as session:
            existing = {
                row.key: row
                for row in session.query(model).filter(model.study_id == self._study_id, model.key.in_(list(attrs)))
            }
            for key, value in attrs.items():
                if key in existing:
                    existing[key].value_json = json.dumps(value)
                else:
                    session.add(model(study_id=self._study_id, key=key, value_json=json.dumps(value)))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlalchemy.orm.Session]:
        assert self._rdb is not None
        session = self._rdb.scoped_session()
        try:
            yield session
            session.commit()
        except Exception:
            session.rollback()
            raise
        finally:
            session.close()

    def finish_many(self, finishes: Sequence[Finish]) -> list[bool]:
        """Finishes many RUNNING trials in one transaction, each as :meth:`finish` does.

        A trial that is no longer RUNNING (a peer took its worker for dead and failed it) is left as
        it is and the others are still finished; the result says, per trial, whether it was finished
        here.
        """
        if self._rdb is None:
            done = []
            for f in finishes:
                if self.study._storage.get_trial(f.trial._trial_id).state.is_finished():
                    done.append(False)
                    continue
                self.finish(f.trial, f.state, f.value, f.user_attrs, f.intermediate_values)
                done.append(True)
            return done
        done = []
        with self._transaction() as session:
            for f in finishes:
                row = models.TrialModel.find_or_raise_by_id(f.trial._trial_id, session, for_update=True)
                if row.state.is_finished():
                    done.append(False)
                    continue
                self._finish_row(session, row, f.state, f.value, f.user_attrs, f.intermediate_values)
                done.append(True)
        return done

    def finish(
        self,
        trial: optuna.Trial,
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
        if self._rdb is None:
            for key, attr in user_attrs.items():
                trial.set_user_attr(key, attr)
            for step, reported in intermediate_values.items():
                if step not in trial.storage.get_trial(trial._trial_id).intermediate_values:
                    trial.report(reported, step)
            self.study.tell(trial, value, state=state)
            return
        with self._transaction() as session:
            row = models.TrialModel.find_or_raise_by_id(trial._trial_id, session, for_update=True)
            self._rdb.check_trial_is_updatable(row.trial_id, row.state)
            self._finish_row(session, row, state, value, user_attrs, intermediate_values)

    def _finish_row(
        self,
        session: sqlalchemy.orm.Session,
        row: models.TrialModel,
        state: TrialState,
        value: float | None,
        user_attrs: dict,
        intermediate_values: dict[int, float],
    ) -> None:
        attrs = models.TrialUserAttributeModel
        session.query(attrs).filter(attrs.trial_id == row.trial_id, attrs.key.in_(list(user_attrs))).delete()
        _insert_rows(session, attrs, _attr_rows(row.trial_id, user_attrs))
        if value is not None:
            stored, kind = models.TrialValueModel.value_to_stored_repr(value)
            _insert_rows(
                session,
                models.TrialValueModel,
                [{"trial_id": row.trial_id, "objective": 0, "value": stored, "value_type": kind}],
            )
        curve = models.TrialIntermediateValueModel
        session.query(curve).filter(
            curve.trial_id == row.trial_id, curve.step.in_(list(intermediate_values))
        ).delete()  # Steps the pruner already reported are written again, with the same value.
        _insert_rows(session, curve, _curve_rows(row.trial_id, intermediate_values))
        row.state = state
        row.datetime_complete = datetime.datetime.now()


def _insert_rows(session: sqlalchemy.orm.Session, model: type[models.BaseModel], rows: list[dict[str, Any]]) -> None:
    # One executemany on the table, not an ORM object per row: a trial is ~60 rows (curve, attrs),
    # and the ORM's unit of work cost ~3 ms a trial on SQLite for rows nobody reads back here.
    if rows:
        session.execute(sqlalchemy.insert(model.__table__), rows)


def _attr_rows(trial_id: int, attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()]


def _curve_rows(trial_id: int, curve: dict[int, float]) -> list[dict[str, Any]]:
    rows = []
    for step, value in curve.items():
        stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
        rows.append({"trial_id": trial_id, "step": step, "intermediate_value": stored, "intermediate_value_type": kind})
    return rows


def _tags_present(trials: list[FrozenTrial], tag: str) -> set:
    return {t.user_attrs.get(tag) for t in trials if t.state != TrialState.FAIL} - {None}


def _unwrap_rdb(study: optuna.Study) -> RDBStorage | None:
    storage = study._storage
    backend = getattr(storage, "_backend", storage)  # _CachedStorage wraps RDBStorage.
    if not isinstance(backend, RDBStorage):
        return None
    try:
        if backend.get_current_version() != _head_version(backend):
            return None  # An older schema: let Optuna write it.
    except Exception:
        return None
    return backend


_head_versions: dict[str, str] = {}  # Optuna's version -> the head revision of its schema


def _head_version(backend: RDBStorage) -> str:
    # Reading Optuna's alembic scripts costs ~15 ms a call, and a run builds several writers (the
    # trial loop, end-of-run publishing); the head revision is the installed Optuna's own.
    if optuna.__version__ not in _head_versions:
        _head_versions[optuna.__version__] = backend.get_head_version()
    return _head_versions[optuna.__version__]
