"""A diagnosis kept in a study: ``search.diagnose --storage`` records it, ``search.optimize --from-diagnosis``
without a file starts from it.

A study holds at most one recorded diagnosis, the last (study user attr ``recorded_diagnosis``,
:data:`search.core.RECORDED_DIAGNOSIS`): the diagnosis's ``--json`` less its per-step runs and its list of
skips (tens of kB on a long run, where MySQL's TEXT column holds 64 kB), with the problem's fingerprint and
the time it was recorded. That keeps the verdict, the scales and the growth window a search starts from.

A diagnosis is recorded only in a study it describes: the same task, seed, loss-scale rule, steps per trial
and data and initial weights (the fingerprint), in fp16. A study of ``search.optimize`` with other settings is
refused before anything is written, and so is a search on a study whose recorded diagnosis is of another run:
one study never holds two stories. A study that does not exist yet is created empty (no settings, no trials),
and ``search.optimize`` sets it up as its own when it first runs there.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from search.core import RECORDED_DIAGNOSIS, IncompatibleStudyError, Settings, UsageError
from search.diagnosis._narrowing import DiagnosisStart, read_diagnosis, recorded_start
from search.storage import (
    StorageError,
    check_storage,
    close_storage,
    is_read_only,
    mask_url,
    open_existing_storage,
    open_storage,
    resolve_study_name,
    sqlite_path,
)

# What a recorded diagnosis leaves out of the --json: the per-step traces of the three runs and each skip.
LEFT_OUT = ("runs", "skips")


@dataclass(frozen=True)
class DiagnosedRun:
    """The run a diagnosis or a study is about: what must match for one to be recorded in the other."""

    task: str
    seed: int
    scaler: str
    steps: int
    fingerprint: str
    amp_dtype: str = "float16"

    def differences(self, other: DiagnosedRun, other_is: str = "the study") -> list[str]:
        """``task: the diagnosis has deep-mlp, the study seed-mlp``, for each field that differs (self: the
        diagnosis; ``other_is``: what ``other`` is called)."""
        fields = ("task", "seed", "scaler", "steps", "amp_dtype")
        diffs = [
            f"{name}: the diagnosis has {getattr(self, name)}, {other_is} {getattr(other, name)}"
            for name in fields
            if getattr(self, name) != getattr(other, name)
        ]
        if not diffs and self.fingerprint != other.fingerprint:
            diffs.append("the task's data/initial weights differ (another torch build?)")
        return diffs


def diagnosis_record(diagnosis: Mapping[str, Any], fingerprint: str) -> dict[str, Any]:
    """What the study keeps of a diagnosis's ``--json`` (:data:`LEFT_OUT` dropped), with the fingerprint and
    the time (UTC, ISO 8601, to the second)."""
    record = {key: value for key, value in diagnosis.items() if key not in LEFT_OUT}
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {**record, "fingerprint": fingerprint, "recorded_at": now.isoformat()}


def run_of_record(record: Mapping[str, Any]) -> DiagnosedRun:
    """The run a recorded diagnosis is about."""
    return DiagnosedRun(
        str(record["task"]),
        int(record["seed"]),
        str(record["scaler"]),
        int(record["steps"]),
        str(record["fingerprint"]),
    )


def read_recorded_diagnosis(settings: Settings) -> tuple[dict[str, Any], str]:
    """The diagnosis recorded in the study ``settings`` search (named as ``search.optimize`` resolves it) and
    that name; creates nothing.

    Raises:
        UsageError: The storage cannot be opened, the study does not exist or holds no recorded diagnosis.
    """
    url = settings.run.storage
    try:
        storage = open_existing_storage(url)
    except StorageError as e:
        raise UsageError(f"--from-diagnosis: {e}") from None
    try:
        name = resolve_study_name(storage, settings)  # A user task's study under its old default name, too.
        exists = _study_id(storage, name) is not None
        record = recorded_diagnosis(storage, name)
    finally:
        close_storage(storage)
    if record is None:
        where = (
            f"study {name!r} in {mask_url(url)} holds no diagnosis"
            if exists
            else (f"{mask_url(url)} has no study {name!r}")
        )
        raise UsageError(
            f"--from-diagnosis: {where}: record a diagnosis with search.diagnose --storage ... "
            f"--study-name {name}, or give its --json file"
        )
    return record, name


def _study_id(storage: optuna.storages.BaseStorage, study_name: str) -> int | None:
    """The study's id, or None when the storage has no study of that name."""
    try:
        return storage.get_study_id_from_name(study_name)
    except KeyError:
        return None


def recorded_diagnosis(storage: optuna.storages.BaseStorage, study_name: str) -> dict[str, Any] | None:
    """The study's recorded diagnosis, or None (no such study, or none recorded)."""
    study_id = _study_id(storage, study_name)
    if study_id is None:
        return None
    record = storage.get_study_user_attrs(study_id).get(RECORDED_DIAGNOSIS)
    return dict(record) if isinstance(record, dict) else None


def record_diagnosis(
    storage: optuna.storages.BaseStorage, study_name: str, record: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Records ``record`` in the study, creating it empty if it does not exist.

    Returns:
        The recorded diagnosis it replaced, or None.
    """
    study_id = _study_id(storage, study_name)
    if study_id is None:
        try:
            study_id = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], study_name)
        except optuna.exceptions.DuplicatedStudyError:  # Created meanwhile by another process.
            study_id = storage.get_study_id_from_name(study_name)
    earlier = storage.get_study_user_attrs(study_id).get(RECORDED_DIAGNOSIS)
    storage.set_study_user_attr(study_id, RECORDED_DIAGNOSIS, dict(record))
    return dict(earlier) if isinstance(earlier, dict) else None


def study_run(attrs: Mapping[str, Any], steps: int) -> DiagnosedRun | None:
    """The run a study of ``search.optimize`` trains, from its recorded settings (None: no settings recorded
    yet).

    ``steps``: the study's steps per trial, as this process resolves them from the recorded epochs and steps.
    """
    if "task" not in attrs:
        return None
    return DiagnosedRun(
        str(attrs["task"]),
        int(attrs["seed"]),
        str(attrs.get("scaler", "torch")),
        steps,
        str(attrs.get("fingerprint", "")),
        str(attrs.get("amp_dtype", "float16")),
    )


def diagnosis_conflict(study_name: str, attrs: Mapping[str, Any], run: DiagnosedRun) -> str | None:
    """Why the study's recorded diagnosis cannot stand beside ``run`` (the run a search is about to train
    there), in one line; None when it can (or there is none)."""
    record = attrs.get(RECORDED_DIAGNOSIS)
    if not isinstance(record, dict):
        return None
    diffs = run_of_record(record).differences(run, "this run")
    if not diffs:
        return None
    return (
        f"study {study_name!r} holds a diagnosis of another run ({'; '.join(diffs)}): search it as diagnosed,"
        " or use another --study-name"
    )


# The steps per trial of the diagnosed task for the recorded ``epochs`` and ``steps``
# (search.training.run_steps
# on its problem, given by the caller: this module imports no torch).
StepsOf = Callable[[int, int], int]


def recording_conflict(
    study_name: str, attrs: Mapping[str, Any], diagnosed: DiagnosedRun, steps_of: StepsOf
) -> str | None:
    """Why a diagnosis of ``diagnosed`` cannot be recorded in the study whose user attrs are ``attrs``, in one
    line; None when it can."""
    if "task" not in attrs:
        return None  # No settings recorded yet: a study search.diagnose made, or nothing but a name.
    steps = diagnosed.steps
    if (attrs["task"], attrs["seed"]) == (diagnosed.task, diagnosed.seed):
        # As search.optimize resolved them when it created the study (search.study._plan.plan_run).
        steps = steps_of(int(attrs.get("epochs") or 0), int(attrs.get("steps") or 0))
    study = study_run(attrs, steps)
    diffs = diagnosed.differences(study) if study is not None else []
    if not diffs:
        return None
    return (
        f"study {study_name!r} searches another run ({'; '.join(diffs)}): diagnose it as it is searched, or "
        "record the diagnosis under another --study-name"
    )


@dataclass(frozen=True)
class RecordingTarget:
    """Where a diagnosis will be recorded, checked before it trains.

    Attributes:
        storage: The opened storage; None for a SQLite file that does not exist yet (made when it is
            recorded).
        study_name: The study, named as ``search.optimize`` resolves it.
        searched: The study already holds a search (its settings and space are recorded).
    """

    storage: optuna.storages.RDBStorage | None
    study_name: str
    searched: bool = False


def open_for_recording(
    settings: Settings, diagnosed: DiagnosedRun, steps_of: StepsOf, keep: Callable[[Any], Any]
) -> RecordingTarget:
    """Checks, before the diagnosis trains, that it can be recorded in the study of ``settings``; the storage
    opened is handed to ``keep``.

    Raises:
        StorageError: The URL cannot be parsed or opened, or the SQLite file cannot be written.
        IncompatibleStudyError: The study searches another run (:func:`recording_conflict`), or the settings
            search another precision than the diagnosis's fp16.
    """
    url = settings.run.storage
    if (
        settings.run.amp_dtype != "float16"
    ):  # The study's search would be of another precision than the diagnosis.
        raise IncompatibleStudyError(
            f"a diagnosis trains fp16 and the config's amp_dtype is {settings.run.amp_dtype}: "
            "its study would search another run; record it with amp_dtype float16"
        )
    if is_read_only(url):  # Its directory or the file: SQLite could not write the record.
        raise StorageError(
            f"cannot record the diagnosis in {sqlite_path(url)}: it is read-only (or its directory is)"
        )
    check_storage(url)  # Creates nothing.
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        return RecordingTarget(None, settings.study_name)
    storage = keep(open_storage(url))
    name = resolve_study_name(storage, settings)
    study_id = _study_id(storage, name)
    if study_id is None:
        return RecordingTarget(storage, name)
    attrs = storage.get_study_user_attrs(study_id)
    conflict = recording_conflict(name, attrs, diagnosed, steps_of)
    if conflict:
        raise IncompatibleStudyError(conflict)
    return RecordingTarget(storage, name, searched="task" in attrs)


def diagnosis_start(path: str | None, settings: Settings) -> DiagnosisStart:
    """The start of a search from a diagnosis: ``path``'s JSON (``--from-diagnosis PATH``), or with None the
    diagnosis the run's study records, checked against the run: the same task, seed and scaler.

    Raises:
        DiagnosisFileError: The file or the record cannot be read as a diagnosis.
        UsageError: It diagnosed another task, seed or scaler.
    """
    start = read_diagnosis(path) if path is not None else recorded_start(*read_recorded_diagnosis(settings))
    run = settings.run
    for what, theirs, ours in (
        ("task", start.task, run.task),
        ("seed", start.seed, run.seed),
        ("scaler", start.scaler, run.scaler),
    ):
        if theirs != ours:
            raise UsageError(
                f"--from-diagnosis {start.source}: it diagnosed {what} {theirs}, this run has {what} {ours}"
            )
    return start


def recorded_line(url: str, storage: Any, study_name: str, record: dict, keep: Callable[[Any], Any]) -> str:
    """Records the diagnosis (:func:`diagnosis_record`'s ``record``) in the study; returns the line that says
    where. ``storage``: an RDBStorage, or None for a SQLite file that did not exist (made now, handed to
    ``keep`` to close)."""
    if storage is None:
        storage = keep(open_storage(url))
    earlier = record_diagnosis(storage, study_name, record)
    line = f"  recorded in study {study_name!r} of {mask_url(url)}"
    if earlier is None:
        return line
    return (
        line + f", in place of the diagnosis recorded there at {earlier.get('recorded_at')} (task "
        f"{earlier.get('task')}, seed {earlier.get('seed')}: {earlier.get('verdict')})"
    )
