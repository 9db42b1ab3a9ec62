"""Many study system attrs set in one transaction (``set_study_system_attr`` makes one each).

optuna-dashboard keeps a figure or a note as chunks of ~2 kB, one system attr each: a study page's
figures are a hundred attrs, and one transaction per attr made publishing cost seconds on SQLite.
:class:`search.storage._trial_writer.TrialWriter` offers this as ``set_study_system_attrs``.
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
    if not attrs:
        return
    model = orm_models().StudySystemAttributeModel
    with tables.transaction() as session:
        existing = {
            row.key: row
            for row in session.query(model).filter(
                model.study_id == tables.study_id, model.key.in_(list(attrs))
            )
        }
        for key, value in attrs.items():
            if key in existing:
                existing[key].value_json = json.dumps(value)
            else:
                session.add(model(study_id=tables.study_id, key=key, value_json=json.dumps(value)))
