"""Reading a study back: the settings it was created with, and its cheap counts for polling.

Every layer that reads a finished or running study (the run loop, confirmation, the dashboard notes,
trial pictures, the report) reads it through here, so none of them has to import the layer that wrote it.
"""

from __future__ import annotations

import optuna
import sqlalchemy
import sqlalchemy.orm
from optuna.trial import TrialState

from search.core import FINISHED, Settings, settings_from_dict, space_layout
from search.scalers import TORCH
from search.storage._optuna_internals import orm_models


def settings_of(study: optuna.Study) -> Settings:
    """The settings a study was created with (its recorded user attrs), for reading it back."""
    attrs = study.user_attrs
    run = {key: attrs[key] for key in ("task", "epochs", "steps", "seed", "amp_dtype", "scaler") if key in attrs}
    scaler = attrs.get("scaler", TORCH)
    space = space_layout(attrs.get("space", {}), scaler)
    return settings_from_dict({"run": run, "space": space, "penalty": attrs.get("penalty", {})})


def finished_and_best(storage: optuna.storages.RDBStorage, study_name: str) -> tuple[int, float | None]:
    """The study's COMPLETE + PRUNED count and best value, in two cheap aggregate queries.

    ``get_all_trials`` would load every trial's attrs (curves included), too heavy to poll.
    """
    models = orm_models()
    trial, value = models.TrialModel, models.TrialValueModel
    with sqlalchemy.orm.Session(storage.engine) as session:
        study = models.StudyModel.find_by_name(study_name, session)
        if study is None:
            return 0, None
        count = (
            session.query(sqlalchemy.func.count(trial.trial_id))
            .filter(trial.study_id == study.study_id, trial.state.in_(FINISHED))
            .scalar()
        )
        best = (
            session.query(sqlalchemy.func.min(value.value))
            .join(trial, trial.trial_id == value.trial_id)
            .filter(trial.study_id == study.study_id, trial.state == TrialState.COMPLETE)
            .filter(value.value_type == models.TrialValueModel.TrialValueType.FINITE)
            .scalar()
        )
    return int(count or 0), best
