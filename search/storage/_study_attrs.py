"""Many study attrs set in one transaction (``set_study_system_attr`` and ``set_user_attr`` make one each).

optuna-dashboard keeps a figure or a note as chunks of ~2 kB, one system attr each: a study page's
figures are a hundred attrs, and one transaction per attr made publishing cost seconds on SQLite.
A new study's recorded settings are a dozen user attrs, likewise.
:class:`search.storage._trial_writer.TrialWriter` offers these as ``set_study_system_attrs`` and
``set_study_user_attrs``.
"""

from __future__ import annotations

import json
from typing import Any

import optuna

from search.storage._optuna_internals import orm_models, storage_of, study_id_of
from search.storage._study_tables import StudyTables


def set_study_system_attrs(study: optuna.Study, tables: StudyTables | None, attrs: dict[str, Any]) -> None:
    """Sets ``attrs`` on ``study``: one transaction on its tables, else one storage call each."""
    if tables is None:
        for key, value in attrs.items():
            storage_of(study).set_study_system_attr(study_id_of(study), key, value)
        return
    _set_attrs(tables, orm_models().StudySystemAttributeModel, attrs)


def set_study_user_attrs(study: optuna.Study, tables: StudyTables | None, attrs: dict[str, Any]) -> None:
    """Sets user attrs on ``study`` (a new study's recorded settings): one transaction on its tables, else one
    ``set_user_attr`` each."""
    if tables is None:
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        return
    _set_attrs(tables, orm_models().StudyUserAttributeModel, attrs)


def _set_attrs(tables: StudyTables, model: Any, attrs: dict[str, Any]) -> None:
    """Upserts ``attrs`` into ``model``'s table for the study, under its lock: processes that open a new
    study at the same moment record its settings one after the other, never both inserting a key."""
    if not attrs:
        return
    with tables.transaction() as session:
        tables.lock_study(session)
        query = session.query(model).filter(model.study_id == tables.study_id, model.key.in_(list(attrs)))
        existing = {row.key: row for row in query}
        for key, value in attrs.items():
            if key in existing:
                existing[key].value_json = json.dumps(value)
            else:
                session.add(model(study_id=tables.study_id, key=key, value_json=json.dumps(value)))
