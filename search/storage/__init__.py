"""Where studies live: storage URLs, opening and closing them, writing trials, riding out outages.

* ``_urls``: storage URLs as text: masking secrets in every message, the SQLite file a URL names;
* ``_open``: opening a storage safely and fast (SQLite pragmas, damaged and read-only files), closing
  it, picking the study to read;
* ``_retry``: riding out a database that is briefly unreachable;
* ``_optuna_internals``: every use of Optuna's private names, each behind a small named function;
* ``_study_tables``: one study's rows in Optuna's tables, through its ORM models, one transaction;
* ``_trial_queue``: claiming a WAITING trial, exactly-once enqueue, finding a write, race-free;
* ``_study_attrs``: many study system attrs in one transaction;
* ``_trial_writer``: a whole trial in one transaction (added, finished, beating, many at once);
* ``_recorder``: each write stored once: write ids, a peer's FAIL respected, baselines re-queued;
* ``_heartbeat``: heartbeats of RUNNING trials (the thread, the first beat);
* ``_copy``: a study copied to another storage and verified, all or nothing (``search.transfer``);
* ``_snapshot``: the one read of the study to copy: RUNNING as FAIL, keys holding trial ids set apart;
* ``_copy_check``: the copy read back and compared with that snapshot.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_urls": ("PASSWORD_MASKED", "first_line", "is_read_only", "mask_url", "redact", "sqlite_path"),
        "_open": (
            "StorageError",
            "check_storage",
            "choose_study",
            "close_storage",
            "enable_wal",
            "open_existing_storage",
            "open_storage",
        ),
        "_retry": (
            "DEFAULT_BUDGET_S",
            "StorageUnreachable",
            "is_transient",
            "share_outage_warning",
            "with_retry",
        ),
        "_optuna_internals": (
            "RDB_STORAGE_LOGGER",
            "as_stored",
            "check_trial",
            "orm_models",
            "pop_waiting_trial_id",
            "rdb_backend",
            "rdb_session",
            "storage_of",
            "study_id_of",
            "trial_id_of",
        ),
        "_study_tables": ("StudyTables", "study_tables"),
        "_trial_queue": ("claim_waiting", "enqueue_once", "find_by_system_attr"),
        "_study_attrs": ("set_study_system_attrs",),
        "_trial_writer": ("Finish", "TrialWriter"),
        "_recorder": ("WRITE_ID_ATTR", "NewTrial", "TrialRecorder"),
        "_heartbeat": ("beating_trials", "first_beat", "heartbeat", "heartbeat_interval"),
        "_copy": ("TransferError", "TransferFailed", "TransferReport", "transfer_study"),
        "_snapshot": (
            "RUNNING_FAIL_REASON",
            "SAMPLER_ID_LIST_KEY",
            "StudySnapshot",
            "count_artifacts",
            "read_snapshot",
            "remap_id_keys",
        ),
        "_copy_check": ("verify_copy",),
    },
)
