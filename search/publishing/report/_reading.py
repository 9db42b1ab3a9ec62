"""Reading a study once: the snapshot every part of the report is built from.

The report touches the storage only here, in one pass (trials, recorded settings, confirmation
runs), so a study that is still running can be reported at any time and nothing after this reads
or writes the storage. Bad input surfaces here as :class:`ReportError`, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from search.core import RECORDED_DIAGNOSIS, STUDY_DIAGNOSIS, Settings, UsageError
from search.diagnosis import not_a_search
from search.results import summarize_confirmation
from search.storage import (
    StorageError,
    choose_study,
    close_storage,
    first_line,
    mask_url,
    open_existing_storage,
    settings_of,
)


class ReportError(UsageError):
    """Bad input: nothing was written. The message is one line and password-free."""


@dataclass(frozen=True)
class ReportSnapshot:
    """One read of a study: everything the report needs, no storage access afterwards.

    Attributes:
        study_name: The study.
        storage: Its storage URL, password masked.
        trials: All its trials, by number (any state).
        settings: The settings the study recorded (its space, epochs, penalty, ...).
        confirmation: :func:`search.results._confirmations.summarize_confirmation` of the study, or None.
        confirmation_note: Why there is no confirmation (no sibling study, module missing, ...).
        diagnoses: The study user attrs ``diagnosis`` (what a search took from a diagnosis) and
            ``recorded_diagnosis`` (the last ``search.diagnose --storage``), each None when absent.
    """

    study_name: str
    storage: str
    trials: tuple[FrozenTrial, ...]
    settings: Settings
    confirmation: dict[str, Any] | None = None
    confirmation_note: str = ""
    diagnoses: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)


def _read_confirmation(
    storage: optuna.storages.BaseStorage, study_name: str
) -> tuple[dict[str, Any] | None, str]:
    try:
        data = summarize_confirmation(storage, study_name)
    except Exception as e:  # The report stands without it; say why.
        return None, f"could not read the confirmation runs: {first_line(e)}"
    return data, "" if data is not None else "no sibling study"


def load_snapshot(url: str, study_name: str | None = None) -> ReportSnapshot:
    """Reads a study once (trials, settings, confirmation) from any Optuna RDB storage.

    Raises:
        ReportError: Unreachable storage, no Optuna schema, missing or ambiguous study, or a
            study not made by ``search.optimize``. Nothing is written to the storage.
    """
    try:
        storage = open_existing_storage(url)
    except StorageError as e:
        raise ReportError(str(e))
    try:
        name = choose_study(storage, url, study_name)
        study_id = storage.get_study_id_from_name(name)
        attrs = storage.get_study_user_attrs(study_id)
        if "task" not in attrs or "space" not in attrs:
            raise ReportError(not_a_search(name, attrs.get(RECORDED_DIAGNOSIS)))
        if len(storage.get_study_directions(study_id)) != 1:
            raise ReportError(f"study {name!r} is multi-objective; search.optimize studies are not")
        study = optuna.load_study(storage=storage, study_name=name)
        settings = settings_of(study)
        trials = tuple(sorted(storage.get_all_trials(study_id, deepcopy=False), key=lambda t: t.number))
        confirmation, note = _read_confirmation(storage, name)
    finally:
        close_storage(storage)
    diagnoses = (attrs.get(STUDY_DIAGNOSIS), attrs.get(RECORDED_DIAGNOSIS))
    return ReportSnapshot(name, mask_url(url), trials, settings, confirmation, note, diagnoses)
