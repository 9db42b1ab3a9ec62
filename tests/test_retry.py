"""Retrying storage calls: which errors are transient, backoff, budget, the check before a retry.

The end-to-end case (a PostgreSQL database that really drops every connection mid-run) is in
tests/test_workers.py; here the errors are SQLAlchemy's own exception classes, raised by a real
engine pointed at a closed port.
"""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy

from search.retry import StorageUnreachable, is_transient, with_retry


def connection_error() -> sqlalchemy.exc.OperationalError:
    """The error a real driver raises for a database that is down (port 1 is closed)."""
    engine = sqlalchemy.create_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.OperationalError as e:
        return e
    finally:
        engine.dispose()
    raise AssertionError("port 1 accepted a connection")


def integrity_error() -> sqlalchemy.exc.IntegrityError:
    return sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))


def wrapped(error: Exception) -> optuna.exceptions.StorageInternalError:
    """As Optuna's RDBStorage raises it."""
    try:
        raise optuna.exceptions.StorageInternalError("commit failed") from error
    except optuna.exceptions.StorageInternalError as e:
        return e


def test_which_errors_are_transient():
    down = connection_error()
    assert is_transient(down) and is_transient(wrapped(down))
    assert not is_transient(integrity_error()) and not is_transient(wrapped(integrity_error()))
    assert not is_transient(ValueError("bug"))


def test_on_sqlite_only_a_lock_is_transient():
    def sqlite_error(message: str) -> sqlalchemy.exc.OperationalError:
        import sqlite3

        return sqlalchemy.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(message))

    assert is_transient(sqlite_error("database is locked"))
    assert not is_transient(sqlite_error("disk I/O error"))
    assert not is_transient(wrapped(sqlite_error("no such table: trials")))


def test_retries_with_backoff_then_succeeds_and_checks_before_each_retry():
    errors = [connection_error(), wrapped(connection_error())]
    sleeps: list[float] = []
    checks: list[int] = []

    def call() -> str:
        if errors:
            raise errors.pop(0)
        return "stored"

    result = with_retry(call, what="test", budget=60, retrying=lambda: checks.append(1), sleep=sleeps.append)
    assert result == "stored" and sleeps == [0.25, 0.5] and len(checks) == 2


def test_non_transient_errors_are_raised_at_once():
    calls = []

    def call() -> None:
        calls.append(1)
        raise wrapped(integrity_error())

    with pytest.raises(optuna.exceptions.StorageInternalError):
        with_retry(call, what="test", sleep=lambda s: None)
    assert len(calls) == 1


def test_an_outage_longer_than_the_budget_is_raised():
    error = connection_error()
    sleeps: list[float] = []

    def call() -> None:
        raise error

    with pytest.raises(StorageUnreachable) as raised:
        with_retry(call, what="writing a trial", budget=0.0, sleep=sleeps.append)
    assert sleeps == [] and raised.value.__cause__ is error
    # One line that says what happened and what to do, not the driver's or Optuna's generic words.
    assert str(raised.value) == (
        "the storage stayed unreachable for 0 s (--storage-retry) while writing a trial; "
        "run the same command again to resume"
    )
    assert isinstance(raised.value, optuna.exceptions.StorageInternalError)  # handled where storage errors are
