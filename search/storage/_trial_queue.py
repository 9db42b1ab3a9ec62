"""The study's queue, race-free across processes: claiming a WAITING trial, enqueuing once, finding a write.

It also finds the trials that hold a baseline (:func:`numbers_with_user_attr`), for the check that a claimed
baseline has not been run by another worker meanwhile.

Each runs in one transaction holding the study's lock (:meth:`StudyTables.lock_study`) on an
``RDBStorage``, so that workers on several hosts claim each trial once and enqueue each baseline
once between them; on any other storage (one process, no race) through Optuna's own calls.
:class:`search.storage._trial_writer.TrialWriter` offers these as its methods.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.storage._optuna_internals import check_trial, orm_models, pop_waiting_trial_id, trial_id_of
from search.storage._study_tables import StudyTables

models = orm_models()


def claim_waiting(study: optuna.Study, tables: StudyTables | None, first: str | None = None) -> int | None:
    """Claims a WAITING trial: RUNNING, with its first heartbeat, in one transaction (``TrialWriter.claim``).
    """
    if tables is None:
        return pop_waiting_trial_id(study)
    trial = models.TrialModel
    attr = models.TrialUserAttributeModel
    with tables.transaction() as session:
        tables.lock_study(session)
        waiting = (
            session.query(trial)
            .filter(trial.study_id == tables.study_id, trial.state == TrialState.WAITING)
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


def find_by_system_attr(study: optuna.Study, tables: StudyTables | None, key: str, value: str) -> int | None:
    """The id of a trial of the study whose system attr ``key`` equals ``value``, if any."""
    if tables is None:
        trials = study.get_trials(deepcopy=False)
        return next((trial_id_of(t) for t in trials if t.system_attrs.get(key) == value), None)
    attr = models.TrialSystemAttributeModel
    with tables.transaction() as session:
        query = (
            session.query(attr.trial_id)
            .join(models.TrialModel, models.TrialModel.trial_id == attr.trial_id)
            .filter(models.TrialModel.study_id == tables.study_id)
            .filter(attr.key == key, attr.value_json == json.dumps(value))
        )
        row = query.first()
        return None if row is None else row[0]


def numbers_with_user_attr(
    study: optuna.Study, tables: StudyTables | None, key: str, value: Any, states: tuple[TrialState, ...]
) -> list[int]:
    """The numbers of the study's trials in ``states`` whose user attr ``key`` equals ``value``, in order."""
    if tables is None:
        trials = study.get_trials(deepcopy=False, states=states)
        return [t.number for t in trials if key in t.user_attrs and t.user_attrs[key] == value]
    attr, trial = models.TrialUserAttributeModel, models.TrialModel
    with tables.transaction() as session:
        rows = (
            session.query(trial.number)
            .join(attr, attr.trial_id == trial.trial_id)
            .filter(trial.study_id == tables.study_id, trial.state.in_(states))
            .filter(attr.key == key, attr.value_json == json.dumps(value))
            .order_by(trial.number)
            .all()
        )
        return [number for (number,) in rows]


def enqueue_once(
    study: optuna.Study, tables: StudyTables | None, trials: list[FrozenTrial], tag: str
) -> list[FrozenTrial]:
    """Adds the WAITING ``trials`` whose user attr ``tag`` no unfailed trial has yet; returns those added."""
    if tables is None:  # In-memory storage: one process, no race.
        present = _tags_present(study.get_trials(deepcopy=False), tag)
        added = [t for t in trials if t.user_attrs.get(tag) not in present]
        for t in added:
            study.add_trial(t)
        return added
    attr = models.TrialUserAttributeModel
    with tables.transaction() as session:
        tables.lock_study(session)
        rows = (
            session.query(attr.value_json)
            .join(models.TrialModel, models.TrialModel.trial_id == attr.trial_id)
            .filter(models.TrialModel.study_id == tables.study_id)
            .filter(models.TrialModel.state != TrialState.FAIL)
            .filter(attr.key == tag)
            .all()
        )
        present = {json.loads(value) for (value,) in rows}
        added = [t for t in trials if t.user_attrs.get(tag) not in present]
        first = tables.count_trials(session) if added else 0
        for i, t in enumerate(added):
            check_trial(t)
            tables.insert_trial(session, t, first + i)
    return added


def _tags_present(trials: list[FrozenTrial], tag: str) -> set:
    return {t.user_attrs.get(tag) for t in trials if t.state != TrialState.FAIL} - {None}
