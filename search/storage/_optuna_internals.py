"""Every use of Optuna's private names, in one place, each behind a small named function.

Checked against Optuna 5.1.0 (SQLAlchemy 2.1). ``tests/test_layering.py`` checks that no other
module of ``search`` touches a private Optuna name, so that an Optuna upgrade is checked here.
Why each private route is taken:

* :func:`orm_models`, :func:`rdb_backend`, :func:`rdb_session`: the trial writer
  (:mod:`search.storage._trial_writer`) and the study's cheap counts (``_study_reads.finished_and_best``)
  write and read Optuna's tables through its own ORM models, in one transaction per trial, instead of
  the ~25 storage calls (a SELECT and an upsert per param and per attr) of ``study.add_trial``.
  ``RDBStorage`` is wrapped in ``_CachedStorage`` by ``optuna.create_study``/``load_study``.
* :func:`storage_of`, :func:`study_id_of`, :func:`trial_id_of`: a study's storage and the
  storage ids of a study and a trial, which the storage API takes but ``Study``, ``Trial`` and
  ``FrozenTrial`` keep private (``_storage``, ``_study_id``, ``_trial_id``).
* :func:`check_trial`, :func:`pop_waiting_trial_id`, :func:`as_stored`: what ``study.add_trial``
  and ``study.ask`` do inside, for the writer's own one-transaction versions (and its fallback
  on other storages), and a written trial as reading it back would give it.
* :data:`RDB_STORAGE_LOGGER`: the logger of ``RDBStorage``, whose messages the run quiets.
"""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

import optuna
import sqlalchemy.orm
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.storages._rdb import models as _models
from optuna.trial import FrozenTrial

RDB_STORAGE_LOGGER = "optuna.storages._rdb.storage"


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage ``study`` reads and writes (``_CachedStorage`` around an ``RDBStorage`` for a URL)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The study's id in its storage, as the storage API takes it."""
    return study._study_id


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The trial's id in its storage (not its number), as the storage API takes it."""
    return trial._trial_id


def fixed_params_of(trial: optuna.Trial) -> dict[str, Any]:
    """The params a queued trial was enqueued with (``study.enqueue_trial``), which its suggestions return."""
    return dict(trial._fixed_params)


def rdb_backend(storage: BaseStorage) -> RDBStorage | None:
    """The ``RDBStorage`` behind ``storage`` (unwrapping ``_CachedStorage``), or None for another storage."""
    backend = storage._backend if isinstance(storage, _CachedStorage) else storage
    return backend if isinstance(backend, RDBStorage) else None


def orm_models() -> ModuleType:
    """Optuna's SQLAlchemy models of its tables (``TrialModel``, ``TrialValueModel``, ...)."""
    return _models


def rdb_session(backend: RDBStorage) -> sqlalchemy.orm.Session:
    """A session of ``backend``'s own scoped session factory (its engine, its SQLite pragmas)."""
    return backend.scoped_session()


def check_trial(trial: FrozenTrial) -> None:
    """``study.add_trial``'s check of a trial before it is stored (raises ValueError)."""
    trial._validate()


def pop_waiting_trial_id(study: optuna.Study) -> int | None:
    """``study.ask``'s atomic claim of a WAITING trial: its id, RUNNING now, or None."""
    return study._pop_waiting_trial_id()


def as_stored(trial: FrozenTrial, trial_id: int, number: int) -> FrozenTrial:
    """``trial`` as reading it back from storage would give it: its id and number, attrs through JSON."""
    stored = copy.copy(trial)
    stored._trial_id, stored.number = trial_id, number
    stored._user_attrs = json.loads(json.dumps(trial.user_attrs))
    stored._system_attrs = json.loads(json.dumps(trial.system_attrs))
    return stored
