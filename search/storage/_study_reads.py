"""Reading a study back: which study a run works on, the settings it was created with, its cheap counts.

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


def resolve_study_name(storage: optuna.storages.BaseStorage, settings: Settings) -> str:
    """The study this run works on: ``settings.study_name``, or a user task's study under its import path.

    Without ``--study-name`` a user task's study is named :func:`search.core._settings.default_study_name`
    (``noisy_regression``); studies made by older versions of the service are named after the task's
    import path (``examples.noisy_regression:build``). Rerunning the command that made such a study must
    resume it, not start a new one beside it, so the import path is used when only a study of that name
    exists.
    """
    name = settings.study_name
    legacy = settings.run.task
    if settings.run.study_name or legacy == name:
        return name
    return legacy if _exists(storage, legacy) and not _exists(storage, name) else name


def _exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def settings_of(study: optuna.Study) -> Settings:
    """The settings a study was created with (its recorded user attrs), for reading it back."""
    attrs = study.user_attrs
    run = {
        key: attrs[key]
        for key in ("task", "epochs", "steps", "seed", "amp_dtype", "scaler", "checkpoint")
        if key in attrs
    }
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
