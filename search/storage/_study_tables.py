"""One study's rows in Optuna's tables, written through its ORM models in one transaction.

``study.add_trial`` writes a whole trial in one transaction, but issues a SELECT and an upsert per
param and per attr: about 1-2 ms each here, so a trial with 4 params and 13 attrs costs ~20-40 ms,
more than plain Optuna's per-trial work we are benchmarked against. :class:`StudyTables` inserts
the same rows batched (one multi-row INSERT a table) and numbers a trial as ``RDBStorage`` does
(under the study row's lock, by the trials stored before it). It exists only for an
``RDBStorage`` whose schema is the one this Optuna release creates (:func:`study_tables`); anything
else is left to Optuna's own calls. ``tests/test_trial_writer.py`` checks that both paths store
identical trials on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import weakref
from collections.abc import Iterator
from typing import Any

import optuna
import sqlalchemy.orm
from optuna.distributions import distribution_to_json
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from search.storage._optuna_internals import orm_models, rdb_backend, rdb_session, storage_of, study_id_of

models = orm_models()


class StudyTables:
    """The rows of one study in an ``RDBStorage``: transactions, the study's lock, trial rows.

    Args:
        backend: The storage, with this Optuna's schema.
        study_id: The study's id there.
    """

    def __init__(self, backend: RDBStorage, study_id: int) -> None:
        self.backend = backend
        self.study_id = study_id

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlalchemy.orm.Session]:
        """A session committed when the block ends, rolled back if it raises."""
        session = rdb_session(self.backend)
        try:
            yield session
            session.commit()
        except Exception:
            session.rollback()
            raise
        finally:
            session.close()

    def lock_study(self, session: sqlalchemy.orm.Session) -> None:
        """Takes the study's lock (its row; the database on SQLite), as ``RDBStorage`` does to number trials.

        The same ``SELECT ... FOR UPDATE`` as ``StudyModel.find_or_raise_by_id(for_update=True)``, as a Core
        statement: no ORM object is built for a row nobody reads (a write per trial).
        """
        study = models.StudyModel
        query = sqlalchemy.select(study.study_id).where(study.study_id == self.study_id).with_for_update()
        if session.execute(query).first() is None:
            raise KeyError(f"study {self.study_id} does not exist")

    def count_trials(self, session: sqlalchemy.orm.Session) -> int:
        """How many trials the study holds: the number of the next trial, while the caller holds its lock."""
        trial = models.TrialModel
        count = sqlalchemy.func.count(trial.trial_id)
        return session.execute(sqlalchemy.select(count).where(trial.study_id == self.study_id)).scalar_one()

    def insert_trial(self, session: sqlalchemy.orm.Session, trial: FrozenTrial, number: int) -> int:
        """Inserts ``trial`` as trial ``number`` with its params, value, curve and attrs; returns its id.

        The caller holds the study's lock and numbers the trial with :meth:`count_trials`, as
        ``RDBStorage`` numbers one by the trials stored before it (``count_past_trials``, which it
        sets with an UPDATE after the insert); several trials inserted under one lock take the
        following numbers.
        """
        row = {
            "study_id": self.study_id,
            "number": number,
            "state": trial.state,
            "datetime_start": trial.datetime_start,
            "datetime_complete": trial.datetime_complete,
        }
        tid = session.execute(sqlalchemy.insert(models.TrialModel.__table__), row).inserted_primary_key[0]
        params = [
            {
                "trial_id": tid,
                "param_name": name,
                "param_value": trial.distributions[name].to_internal_repr(value),
                "distribution_json": distribution_to_json(trial.distributions[name]),
            }
            for name, value in trial.params.items()
        ]
        insert_rows(session, models.TrialParamModel, params)
        values = []
        if trial.value is not None:
            stored, kind = models.TrialValueModel.value_to_stored_repr(trial.value)
            values.append({"trial_id": tid, "objective": 0, "value": stored, "value_type": kind})
        insert_rows(session, models.TrialValueModel, values)
        insert_rows(session, models.TrialIntermediateValueModel, _curve_rows(tid, trial.intermediate_values))
        insert_rows(session, models.TrialUserAttributeModel, attr_rows(tid, trial.user_attrs))
        insert_rows(session, models.TrialSystemAttributeModel, attr_rows(tid, trial.system_attrs))
        return tid

    def finish_row(
        self,
        session: sqlalchemy.orm.Session,
        row: Any,
        state: TrialState,
        value: float | None,
        user_attrs: dict,
        intermediate_values: dict[int, float],
        held: FrozenTrial | None = None,
    ) -> None:
        """Finishes a RUNNING trial's row (a ``TrialModel``): its attrs, value, curve and state.

        An attr or a step stored already is replaced. ``held``: what storage holds of the trial's user
        attrs and curve, when the caller knows it (it wrote the trial); else any may be stored.
        """
        attrs = models.TrialUserAttributeModel
        keys = [key for key in user_attrs if held is None or key in held.user_attrs]
        if keys:
            session.query(attrs).filter(attrs.trial_id == row.trial_id, attrs.key.in_(keys)).delete()
        insert_rows(session, attrs, attr_rows(row.trial_id, user_attrs))
        if value is not None:
            stored, kind = models.TrialValueModel.value_to_stored_repr(value)
            insert_rows(
                session,
                models.TrialValueModel,
                [{"trial_id": row.trial_id, "objective": 0, "value": stored, "value_type": kind}],
            )
        curve = models.TrialIntermediateValueModel
        steps = [step for step in intermediate_values if held is None or step in held.intermediate_values]
        if steps:  # Steps the pruner already reported are written again, with the same value.
            session.query(curve).filter(curve.trial_id == row.trial_id, curve.step.in_(steps)).delete()
        insert_rows(session, curve, _curve_rows(row.trial_id, intermediate_values))
        row.state = state
        row.datetime_complete = datetime.datetime.now()


def study_tables(study: optuna.Study) -> StudyTables | None:
    """``study``'s tables, when its storage is an ``RDBStorage`` with this Optuna's schema; else None."""
    backend = rdb_backend(storage_of(study))
    if backend is None:
        return None
    # The schema is read once a storage: a run builds several writers (the trial loop, the baselines'
    # enqueue, each population's heartbeat, end-of-run publishing) and polls the heartbeats of its peers.
    if backend not in _current_schema:
        try:
            _current_schema[backend] = backend.get_current_version() == _head_version(backend)
        except Exception:
            return None
    if not _current_schema[backend]:
        return None  # An older schema: let Optuna write it.
    return StudyTables(backend, study_id_of(study))  # The study's own id: no lookup of its name.


# Bound parameters of one multi-row INSERT: SQLite before 3.32 allows 999 in a statement.
_MAX_PARAMETERS = 999


def insert_rows(session: sqlalchemy.orm.Session, model: type, rows: list[dict[str, Any]]) -> None:
    """Inserts ``rows`` into ``model``'s table: one executemany, or on PostgreSQL one multi-row INSERT (more
    for a long curve)."""
    # Not an ORM object per row: a trial is ~60 rows (curve, attrs), and the ORM's unit of work
    # cost ~3 ms a trial on SQLite for rows nobody reads back here. psycopg sends an executemany as one
    # statement per row (a trial's 21 user attrs were 21 statements on PostgreSQL), so there the rows go as
    # one INSERT ... VALUES (...), (...); elsewhere an executemany is one driver call (pymysql rewrites it
    # as a multi-row INSERT itself), and compiling a multi-row statement anew for every trial costs more
    # (~1.7 ms a trial's rows on SQLite).
    if not rows:
        return
    if session.get_bind().dialect.name != "postgresql":
        session.execute(sqlalchemy.insert(model.__table__), rows)
        return
    per_statement = max(1, _MAX_PARAMETERS // len(rows[0]))
    for start in range(0, len(rows), per_statement):
        session.execute(sqlalchemy.insert(model.__table__).values(rows[start : start + per_statement]))


def attr_rows(trial_id: int, attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a trial's user or system attrs."""
    return [
        {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)} for key, value in attrs.items()
    ]


def _curve_rows(trial_id: int, curve: dict[int, float]) -> list[dict[str, Any]]:
    rows = []
    for step, value in curve.items():
        stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
        rows.append(
            {
                "trial_id": trial_id,
                "step": step,
                "intermediate_value": stored,
                "intermediate_value_type": kind,
            }
        )
    return rows


_head_versions: dict[str, str] = {}  # Optuna's version -> the head revision of its schema
# Each storage -> whether its schema is the head revision (an upgrade is a command of its own, run alone).
_current_schema: weakref.WeakKeyDictionary[RDBStorage, bool] = weakref.WeakKeyDictionary()


def _head_version(backend: RDBStorage) -> str:
    # Reading Optuna's alembic scripts costs ~15 ms a call, and a run builds several writers (the
    # trial loop, end-of-run publishing); the head revision is the installed Optuna's own.
    if optuna.__version__ not in _head_versions:
        _head_versions[optuna.__version__] = backend.get_head_version()
    return _head_versions[optuna.__version__]
