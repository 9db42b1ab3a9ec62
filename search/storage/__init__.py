"""Where studies live: storage URLs, opening and closing them, writing trials, riding out outages.

* ``_urls``: storage URLs as text: masking secrets in every message, the SQLite file a URL names;
* ``_open``: opening a storage safely and fast (SQLite pragmas, damaged and read-only files), closing
  it, picking the study to read;
* ``_retry``: riding out a database that is briefly unreachable;
* ``_optuna_internals``: every use of Optuna's private names, each behind a small named function;
* ``_study_reads``: a study read back: the settings it was created with, its finished count and best value;
* ``_study_tables``: one study's rows in Optuna's tables, through its ORM models, one transaction;
* ``_trial_queue``: claiming a WAITING trial, exactly-once enqueue, finding a write, race-free;
* ``_study_attrs``: many study system attrs in one transaction;
* ``_trial_writer``: a whole trial in one transaction (added, finished, beating, many at once);
* ``_recorder``: each write stored once: write ids, a peer's FAIL respected, baselines re-queued;
* ``_heartbeat``: heartbeats of RUNNING trials (the thread, the first beat);
* ``_copy``: a study copied to another storage and verified, all or nothing (``search.transfer``);
* ``_copy_snapshot``: the one read of the study to copy: RUNNING as FAIL, keys holding trial ids set apart;
* ``_copy_check``: the copy read back and compared with that snapshot.
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face

if TYPE_CHECKING:  # Loaded on first use: _urls imports SQLAlchemy, the others optuna.
    from search.storage._copy import TransferError, TransferFailed, TransferReport, transfer_study
    from search.storage._copy_check import verify_copy
    from search.storage._copy_snapshot import (
        RUNNING_FAIL_REASON,
        SAMPLER_ID_LIST_KEY,
        CopySnapshot,
        count_artifacts,
        read_snapshot,
        remap_id_keys,
    )
    from search.storage._heartbeat import beating_trials, first_beat, heartbeat, heartbeat_interval
    from search.storage._open import (
        StorageError,
        check_storage,
        choose_study,
        close_storage,
        enable_wal,
        open_existing_storage,
        open_storage,
    )
    from search.storage._optuna_internals import (
        RDB_STORAGE_LOGGER,
        as_stored,
        check_trial,
        fixed_params_of,
        orm_models,
        pop_waiting_trial_id,
        rdb_backend,
        rdb_session,
        storage_of,
        study_id_of,
        trial_id_of,
    )
    from search.storage._recorder import WRITE_ID_ATTR, NewTrial, TrialRecorder
    from search.storage._retry import (
        DEFAULT_BUDGET_S,
        StorageUnreachable,
        is_transient,
        share_outage_warning,
        with_retry,
    )
    from search.storage._study_attrs import set_study_system_attrs
    from search.storage._study_reads import finished_and_best, resolve_study_name, settings_of
    from search.storage._study_tables import StudyTables, study_tables
    from search.storage._trial_queue import claim_waiting, enqueue_once, find_by_system_attr
    from search.storage._trial_writer import Finish, TrialWriter
    from search.storage._urls import PASSWORD_MASKED, first_line, is_read_only, mask_url, redact, sqlite_path

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "CopySnapshot",
    "DEFAULT_BUDGET_S",
    "Finish",
    "NewTrial",
    "PASSWORD_MASKED",
    "RDB_STORAGE_LOGGER",
    "RUNNING_FAIL_REASON",
    "SAMPLER_ID_LIST_KEY",
    "StorageError",
    "StorageUnreachable",
    "StudyTables",
    "TransferError",
    "TransferFailed",
    "TransferReport",
    "TrialRecorder",
    "TrialWriter",
    "WRITE_ID_ATTR",
    "as_stored",
    "beating_trials",
    "check_storage",
    "check_trial",
    "choose_study",
    "claim_waiting",
    "close_storage",
    "count_artifacts",
    "enable_wal",
    "enqueue_once",
    "find_by_system_attr",
    "finished_and_best",
    "first_beat",
    "first_line",
    "heartbeat",
    "heartbeat_interval",
    "is_read_only",
    "is_transient",
    "mask_url",
    "open_existing_storage",
    "open_storage",
    "orm_models",
    "pop_waiting_trial_id",
    "rdb_backend",
    "rdb_session",
    "read_snapshot",
    "redact",
    "remap_id_keys",
    "resolve_study_name",
    "set_study_system_attrs",
    "settings_of",
    "share_outage_warning",
    "sqlite_path",
    "storage_of",
    "study_id_of",
    "study_tables",
    "transfer_study",
    "fixed_params_of",
    "trial_id_of",
    "verify_copy",
    "with_retry",
]
