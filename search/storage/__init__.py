"""Where studies live: storage URLs, opening and closing them, writing trials, riding out outages.

* ``_urls``: storage URLs as text: masking secrets in every message, the SQLite file a URL names;
* ``_open``: opening a storage safely and fast (SQLite pragmas, damaged and read-only files), closing
  it, picking the study to read;
* ``_retry``: riding out a database that is briefly unreachable;
* ``_trial_writer``: a whole finished trial in one transaction; exactly-once enqueue; claiming;
* ``_recorder``: each write stored once: write ids, a peer's FAIL respected, baselines re-queued;
* ``_heartbeat``: heartbeats of RUNNING trials (the thread, the first beat).
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_urls": ("first_line", "is_read_only", "mask_url", "redact", "sqlite_path"),
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
        "_trial_writer": ("Finish", "TrialWriter"),
        "_recorder": ("WRITE_ID_ATTR", "NewTrial", "TrialRecorder"),
        "_heartbeat": ("first_beat", "heartbeat", "heartbeat_interval"),
    },
)
