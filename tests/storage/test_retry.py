"""Retrying storage calls: which errors are transient, backoff, budget, the check before a retry.

The end-to-end case (a PostgreSQL database that really drops every connection mid-run) is in
tests/study/test_workers.py; here the errors are SQLAlchemy's own exception classes, raised by a real
engine pointed at a closed port.
"""

from __future__ import annotations

import logging
import multiprocessing
import time

import optuna
import pytest
import sqlalchemy

from search.storage import StorageUnreachable, is_transient, share_outage_warning, with_retry
from search.storage import _retry as retry


@pytest.fixture
def warnings_logged():
    """The messages the "search" logger emits during the test."""
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("search")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture(autouse=True)
def _no_outage_announced_yet():
    """Each test starts with no outage announced in this process, whatever ran before it."""
    retry._announced.clear()
    yield
    retry._announced.clear()


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
    assert (
        str(raised.value)
        == "the storage stayed unreachable for 0 s (--storage-retry) while writing a trial; "
        "run the same command again to resume"
    )
    assert isinstance(
        raised.value, optuna.exceptions.StorageInternalError
    )  # handled where storage errors are


def test_processes_that_share_the_flag_announce_an_outage_once_between_them():
    """``--workers``: every worker meets the same outage; one "retrying" warning for all of them,
    and the next outage (after the storage answered again) is announced anew."""
    context = multiprocessing.get_context("fork")  # Forked: the local functions need no pickling.
    flag, warned = context.Value("b", 0), context.Value("i", 0)
    down, ready = context.Event(), context.Barrier(3)
    failed = context.Array("i", 2)  # Per worker: its calls that met the outage.
    error = connection_error()

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "retrying" in record.getMessage():
                with warned.get_lock():
                    warned.value += 1

    def worker(index: int) -> None:
        share_outage_warning(flag)
        logging.getLogger("search").addHandler(Count())

        def call() -> None:
            if down.is_set():
                failed[index] += 1
                raise error

        for _ in range(2):  # Two outages.
            ready.wait()  # The storage goes down.
            ready.wait()  # Both workers are about to hit it.
            with_retry(call, what="test", budget=60, sleep=lambda s: time.sleep(0.05))
            ready.wait()  # Both rode it out.

    workers = [context.Process(target=worker, args=(i,)) for i in range(2)]
    for p in workers:
        p.start()
    try:
        for outage in (1, 2):
            before = failed[:]
            down.set()
            ready.wait()
            ready.wait()
            # Both workers are retrying: each met this outage twice (its warning, if any, came after the
            # first).
            deadline = time.monotonic() + 30
            while (
                not all(now >= then + 2 for now, then in zip(failed[:], before))
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            assert all(now >= then + 2 for now, then in zip(failed[:], before)), (outage, before, failed[:])
            down.clear()
            ready.wait()
            assert warned.value == outage, f"outage {outage}: {warned.value} warnings in all"
    finally:
        for p in workers:
            p.join(timeout=10)
            if p.exitcode is None:
                p.kill()
    assert [p.exitcode for p in workers] == [0, 0]


def test_one_process_announces_each_outage(warnings_logged):
    for _ in range(2):
        errors = [connection_error(), connection_error()]

        def call() -> None:
            if errors:
                raise errors.pop()

        with_retry(call, what="test", budget=60, sleep=lambda s: None)
    assert sum("retrying" in r for r in warnings_logged) == 2, warnings_logged


def test_an_outage_that_ends_in_another_error_is_over_too(warnings_logged):
    """The storage answered with a non-transient error: the next outage is announced again."""
    errors = [wrapped(integrity_error()), connection_error()]

    def call() -> None:
        raise errors.pop()

    with pytest.raises(optuna.exceptions.StorageInternalError):
        with_retry(call, what="test", budget=60, sleep=lambda s: None)
    outage = [connection_error()]

    def recovering() -> None:
        if outage:
            raise outage.pop()

    with_retry(recovering, what="test", budget=60, sleep=lambda s: None)
    assert sum("retrying" in r for r in warnings_logged) == 2, warnings_logged


def raised_while_handling_a_dropped_connection(error: Exception) -> Exception:
    """``error`` as raised inside an ``except`` of a dropped connection (its ``__context__``)."""
    try:
        try:
            raise connection_error()
        except sqlalchemy.exc.OperationalError:
            raise error
    except Exception as e:
        return e


def test_an_error_raised_while_handling_a_dropped_connection_is_transient():
    """A chaos run: Optuna's trial read caught a dropped connection (taking it for a too-long IN list),
    retried on the dead session and raised PendingRollbackError, wrapped as "An exception is raised
    during the commit". That is the outage, not bad data."""
    follow_up = raised_while_handling_a_dropped_connection(
        sqlalchemy.exc.PendingRollbackError("Can't reconnect until invalid transaction is rolled back")
    )
    assert is_transient(follow_up) and is_transient(wrapped(follow_up))
    # The database's own verdict stays final, whatever it was raised while handling.
    verdict = raised_while_handling_a_dropped_connection(integrity_error())
    assert not is_transient(verdict) and not is_transient(wrapped(verdict))


def test_the_warning_gives_the_drivers_words_not_a_follow_ups(warnings_logged):
    errors = [
        wrapped(
            raised_while_handling_a_dropped_connection(
                sqlalchemy.exc.PendingRollbackError(
                    "Can't reconnect until invalid transaction is rolled back"
                )
            )
        )
    ]

    def call() -> None:
        if errors:
            raise errors.pop()

    with_retry(call, what="reading trials", budget=60, sleep=lambda s: None)
    records = warnings_logged
    assert (
        len(records) == 1 and "Connection refused" in records[0] and "rolled back" not in records[0]
    ), records


def test_a_recorded_interrupt_ends_the_wait_for_the_storage():
    """Before its trial loop a command only records SIGINT/SIGTERM (search.cli._startup): a wait of up to
    --storage-retry for a database that is down must still end at once, not after minutes."""
    import os
    import signal
    import threading

    from search.core import Interrupted, record_interrupts, take_pending

    error = connection_error()
    timers: list[threading.Timer] = []

    def down_and_then_a_signal():
        # The first failed call sends the signal 0.1 s later: it lands while with_retry waits (0.25 s).
        if not timers:
            timers.append(threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)))
            timers[0].start()
        raise error

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        record_interrupts()
        begin = time.monotonic()
        with pytest.raises(Interrupted) as raised:
            with_retry(down_and_then_a_signal, what="reading trials", budget=60)
        assert raised.value.signum == signal.SIGTERM and time.monotonic() - begin < 2.0
        assert take_pending() is None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
