"""Opening storage URLs safely and fast, closing them, and picking the study to read.

SQLite gets a busy timeout, ``synchronous=NORMAL`` and ``BEGIN IMMEDIATE`` transactions on every
connection, and WAL journaling once the run is known to be valid (:func:`enable_wal`), so that bad
input never touches the file. ``BEGIN IMMEDIATE`` takes the write lock when a transaction starts,
waiting up to the busy timeout: with SQLite's default deferred transactions, two workers that both
read and then write fail at once with "database is locked" (a read snapshot cannot be upgraded
after another process wrote), and waiting would not help. Any other URL is handed to Optuna's
``RDBStorage`` verbatim, with ``pool_pre_ping`` so that a restarted server costs no failed call.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
import warnings
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.pool

from search.core import CONFIRM_SUFFIX, UsageError
from search.storage._optuna_internals import rdb_backend
from search.storage._urls import first_line, is_read_only, mask_url, redact, sqlite_path

SQLITE_BUSY_TIMEOUT_S = 60


class StorageError(RuntimeError):
    """A storage URL that cannot be parsed, reached or opened."""


def _read_only_uri(path: str) -> str:
    # immutable: SQLite takes no lock and creates no -wal/-shm (it could not, and must not, on
    # read-only media); it assumes that nobody writes the file meanwhile, as read-only media ensure.
    return f"file:{os.path.abspath(path)}?mode=ro&immutable=1"


def _check_sqlite_file(path: str, read_only: bool = False, immutable_probe: bool = False) -> None:
    if os.path.exists(path):
        if not os.path.isfile(path):
            raise StorageError(f"SQLite storage {path} is not a file")
        if not os.access(path, os.R_OK):
            raise StorageError(f"cannot read SQLite storage {path}: permission denied")
        if not read_only and not os.access(path, os.W_OK):  # Before the probe, which would need to write.
            raise StorageError(f"SQLite storage {path} is not writable")
        _probe_sqlite_file(path, read_only or immutable_probe)
    else:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise StorageError(f"cannot create SQLite storage {path}: {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise StorageError(f"cannot create SQLite storage {path}: {parent} is not writable")


SIDECARS = ("-wal", "-shm")  # SQLite's WAL files beside the database.


def _probe_sqlite_file(path: str, read_only: bool = False) -> None:
    """Reads the whole file through SQLite, read-only: a damaged (e.g. truncated) file is refused.

    Through SQLite itself, never with open()/close(): closing any descriptor of a file drops every
    POSIX lock this process holds on it, which corrupts the view of a SQLite connection already
    open here (SQLite's own VFS keeps such descriptors open). A read-only connection to a WAL
    database creates ``-wal``/``-shm`` beside it and cannot remove them on close; when the file
    is refused, nothing else will, so the probe removes those it created (bad input leaves the
    storage as it found it).
    """
    existed = {suffix for suffix in SIDECARS if os.path.exists(path + suffix)}
    try:
        problem = _quick_check(_read_only_uri(path) if read_only else f"file:{path}?mode=ro")
    except sqlite3.DatabaseError as e:
        problem = "not a database" if "not a database" in str(e) else first_line(e)
    if problem is None:
        return
    for suffix in set(SIDECARS) - existed:
        with contextlib.suppress(OSError):  # Best effort: gone already, or read-only media.
            os.remove(path + suffix)
    if problem == "not a database":
        raise StorageError(f"{path} is not a SQLite database")
    raise StorageError(f"SQLite storage {path} is damaged ({problem})")


def _quick_check(uri: str) -> str | None:
    """SQLite's ``quick_check`` of the whole file (about 0.1 s per 100 MB): None when sound."""
    probe = sqlite3.connect(uri, uri=True)
    try:
        rows = probe.execute("PRAGMA quick_check").fetchall()
    finally:
        probe.close()
    if rows == [("ok",)]:
        return None
    return first_line(RuntimeError(str(rows[0][0]).replace("*** in database main ***", "").strip()))


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite's own BEGIN handling is switched off; SQLAlchemy's "begin" event emits BEGIN (and
    # _on_sqlite_begin, BEGIN IMMEDIATE): SQLAlchemy's documented recipe for SQLite transactions.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
    cursor.execute("PRAGMA synchronous = NORMAL")  # Safe with WAL; no fsync per commit.
    cursor.close()


def _on_sqlite_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _on_sqlite_begin_deferred(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def check_storage(url: str, read_only: bool = False) -> None:
    """The checks of :func:`open_storage` that create nothing: the URL parses, a SQLite file is one
    (or can be created where it is named). For the commands, before anything heavy is imported;
    a database server is only reached when the storage is opened.

    Raises:
        StorageError: With a one-line, password-free reason.
    """
    try:
        path = sqlite_path(url)
    except Exception as e:
        raise StorageError(f"invalid storage URL {mask_url(url)}: {e}")
    if path is not None:
        # Probed immutable: a WAL database gets no -wal/-shm that nothing would remove if the run
        # stops at bad input found next (open_storage probes it again, as it opens it).
        _check_sqlite_file(path, read_only, immutable_probe=True)


def open_storage(
    url: str, heartbeat_interval: int | None = None, immediate: bool = True, read_only: bool = False
) -> optuna.storages.RDBStorage:
    """Opens an Optuna RDB storage, checking SQLite files before SQLite creates them.

    With ``heartbeat_interval``, a RUNNING trial whose heartbeat is older than twice the interval
    is failed by ``optuna.storages.fail_stale_trials`` and re-queued (same params and attrs) by
    Optuna's ``RetryHeartbeatStaleTrialCallback``, at most 3 times.

    ``immediate=False`` leaves SQLite's transactions deferred: for a process that mostly reads a
    live study (report, dashboard), so that its reads never hold the write lock the workers need.

    ``read_only`` (an existing SQLite file, see :func:`is_read_only`) opens it read-only and
    immutable: reading works, any write fails ("attempt to write a readonly database").

    Raises:
        StorageError: With a one-line, password-free reason.
    """
    try:
        path = sqlite_path(url)
    except Exception as e:
        raise StorageError(f"invalid storage URL {mask_url(url)}: {e}")
    if path is not None:
        _check_sqlite_file(path, read_only)
    is_sqlite = url.startswith("sqlite")
    opened_url = url
    if read_only and path is not None:
        opened_url, immediate = f"sqlite:///{_read_only_uri(path)}&uri=true", False
    engine_kwargs: dict[str, Any] = {}
    if is_sqlite:
        engine_kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
    else:
        engine_kwargs["pool_pre_ping"] = True  # Survive a database restart between trials.
    try:
        with warnings.catch_warnings():
            # Heartbeats are "experimental" in Optuna since 2.8; the interface we use is stable.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            heartbeat: dict[str, Any] = {}
            if heartbeat_interval is not None:
                heartbeat = {
                    "heartbeat_interval": heartbeat_interval,
                    "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=3
                    ),
                }
            storage = _create_rdb_storage(opened_url, engine_kwargs, heartbeat)
    except Exception as e:
        raise StorageError(f"cannot open storage {mask_url(url)}: {redact(first_line(e), url)}")
    if is_sqlite:
        sqlalchemy.event.listen(storage.engine, "connect", _on_sqlite_connect)
        begin = _on_sqlite_begin if immediate else _on_sqlite_begin_deferred
        sqlalchemy.event.listen(storage.engine, "begin", begin)
        storage.engine.dispose()  # Later connections get the pragmas.
    return storage


def open_existing_storage(url: str, immediate: bool = False) -> optuna.storages.RDBStorage:
    """Opens a storage that must already hold Optuna's tables; creates nothing (no file, no schema).

    For the commands that read a study (report, confirm, transfer's source, dashboard); their
    SQLite transactions stay deferred unless ``immediate`` (see :func:`open_storage`).

    Raises:
        StorageError: The SQLite file does not exist, the database cannot be reached, or it holds
            no Optuna studies; one password-free line.
    """
    try:
        path = sqlite_path(url)
    except Exception as e:
        raise StorageError(f"invalid storage URL {mask_url(url)}: {redact(first_line(e), url)}")
    if path is not None and not os.path.isfile(path):
        raise StorageError(f"SQLite file {path} does not exist")
    read_only = not immediate and is_read_only(url)  # A reader can read a study on read-only media.
    if path is not None:
        _check_sqlite_file(path, read_only)
    probe_url = f"sqlite:///{_read_only_uri(path)}&uri=true" if read_only else url
    try:
        engine = sqlalchemy.create_engine(probe_url, poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as connection:
                has_studies = sqlalchemy.inspect(connection).has_table("studies")
        finally:
            engine.dispose()
    except Exception as e:
        raise StorageError(f"cannot open storage {mask_url(url)}: {redact(first_line(e), url)}")
    if not has_studies:
        raise StorageError(f"{mask_url(url)} holds no Optuna studies")
    return open_storage(url, immediate=immediate, read_only=read_only)


def close_storage(storage: optuna.storages.BaseStorage) -> None:
    """Closes every connection of an RDB storage (SQLite then checkpoints and removes -wal/-shm)."""
    backend = rdb_backend(storage)
    if backend is not None:
        backend.remove_session()
        backend.engine.dispose()


def _create_rdb_storage(url: str, engine_kwargs: dict[str, Any], heartbeat: dict[str, Any]) -> Any:
    # Two processes opening a new database at once both try to create Optuna's schema and one
    # of them hits a unique-constraint error, "table already exists" or a lock; by the next try
    # the schema exists and opening it is read-only.
    for attempt in range(1, 6):
        try:
            # Optuna's own schema check is skipped for ours, which closes the engine when it fails
            # (a failed constructor would leave it open, with SQLite's -wal/-shm beside the file).
            storage = optuna.storages.RDBStorage(
                url, engine_kwargs=engine_kwargs, skip_compatibility_check=True, **heartbeat
            )
            try:
                _check_schema(storage)
            except BaseException:
                storage.engine.dispose()
                raise
            return storage
        except (
            sqlalchemy.exc.IntegrityError,
            sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.ProgrammingError,
        ) as e:
            # PostgreSQL says DuplicateTable (a ProgrammingError): "relation ... already exists".
            transient = isinstance(e, sqlalchemy.exc.IntegrityError) or any(
                words in str(e) for words in ("locked", "already exists")
            )
            if not transient or attempt == 5:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


# A schema revision as Optuna's migrations name them ("v3.2.0.a").
_OPTUNA_REVISION = re.compile(r"v\d+\.\d+\.\d+(\.[a-z])?")


class SchemaError(RuntimeError):
    """The storage's Optuna schema is not the one this Optuna uses."""


def _check_schema(storage: optuna.storages.RDBStorage) -> None:
    """Optuna's schema check, except that a revision no Optuna writes is said as what it is.

    Optuna says "please try updating optuna" for every revision it does not know; that is right for
    one written by a newer Optuna, and wrong for a damaged ``alembic_version`` table.
    """
    current = storage.get_current_version()
    if current == storage.get_head_version():
        return
    if current in storage.get_all_versions():
        raise SchemaError(
            f"its schema (revision {current}) is an older Optuna's: "
            "upgrade it with `optuna storage upgrade --storage $STORAGE_URL`"
        )
    with storage.engine.connect() as connection:
        written_by = connection.exec_driver_sql("SELECT library_version FROM version_info").scalar()
    if _OPTUNA_REVISION.fullmatch(current) and str(written_by) != optuna.__version__:
        raise SchemaError(
            f"its schema (revision {current}) was written by optuna {written_by}, "
            f"which this optuna {optuna.__version__} does not know: update optuna"
        )
    raise SchemaError(
        f"the schema revision {current[:40]!r} in its alembic_version table is not one Optuna writes "
        "(damaged or edited by hand; updating optuna will not help)"
    )


def enable_wal(storage: optuna.storages.RDBStorage) -> None:
    """Switches a SQLite storage to WAL journaling (persistent; no-op for other databases)."""
    if storage.engine.dialect.name != "sqlite":
        return
    # Outside any transaction (SQLite refuses to switch journal modes inside one).
    connection = storage.engine.raw_connection()
    try:
        connection.cursor().execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()


def choose_study(storage: optuna.storages.BaseStorage, url: str, name: str | None) -> str:
    """``name`` if the storage has it; with no name, the storage's only study.

    ``search.confirm``'s ``<study>.confirm`` siblings are not counted when choosing.

    Raises:
        UsageError: No such study, no study at all, or several and no name.
    """
    names = sorted(s.study_name for s in storage.get_all_studies())
    if name is not None:
        if name not in names:
            found = ", ".join(repr(n) for n in names) or "none"
            raise UsageError(f"no study {name!r} in {mask_url(url)} (studies there: {found})")
        return name
    searches = [n for n in names if not (n.endswith(CONFIRM_SUFFIX) and n[: -len(CONFIRM_SUFFIX)] in names)]
    if not searches:
        raise UsageError(f"{mask_url(url)} holds no studies")
    if len(searches) > 1:
        raise UsageError(
            f"{mask_url(url)} holds {len(searches)} studies; choose one with --study-name: "
            + ", ".join(repr(n) for n in searches)
        )
    return searches[0]
