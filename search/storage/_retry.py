"""Riding out a database that is briefly unreachable (a restart, a dropped connection).

Every storage call of the trial loop goes through :func:`with_retry`. A transient failure
(connection refused or reset, server shutting down, "database is locked") is retried with
exponential backoff for up to ``budget`` seconds; anything else, and an outage that outlasts the
budget, is raised. Finished trials wait in memory while the database is away, so none is lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import optuna
import sqlalchemy.exc

from search.core import raise_pending

T = TypeVar("T")
DEFAULT_BUDGET_S = 300.0
_logger = logging.getLogger("search")

# SQLAlchemy wraps driver errors; these classes are the connection-level ones (PEP 249), as
# opposed to IntegrityError/DataError/ProgrammingError, which retrying cannot fix.
_TRANSIENT = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)


class _OutageFlag:
    """Whether an outage has been announced: per process, or shared by ``--workers``' processes."""

    def __init__(self) -> None:
        self.shared: Any = None  # A multiprocessing Value("b") of the workers' context, or None.
        self.local = False

    def claim(self) -> bool:
        """True for the first caller of an outage (it prints the one warning), False after."""
        if self.shared is None:
            first, self.local = not self.local, True
            return first
        with self.shared.get_lock():
            first, self.shared.value = not self.shared.value, 1
            return bool(first)

    def clear(self) -> None:
        """The storage answered again: the next outage is announced anew."""
        if self.shared is None:
            self.local = False
        else:
            with self.shared.get_lock():
                self.shared.value = 0


_announced = _OutageFlag()


def share_outage_warning(flag: Any) -> None:
    """Makes the processes that share ``flag`` (a ``multiprocessing`` ``Value("b", 0)`` created by
    the parent) print one "retrying" warning per outage between them, not one each: every worker
    of ``--workers`` meets the same outage."""
    _announced.shared = flag


class StorageUnreachable(optuna.exceptions.StorageInternalError):
    """The storage stayed unreachable for the whole retry budget; the message says so in one line."""


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or the SQLAlchemy error Optuna wrapped) is worth retrying.

    An error that is not itself the database's verdict (Optuna's wrapper, SQLAlchemy's "roll back
    first" after a failed statement) is judged by the error it was raised from or while handling:
    Optuna's trial read catches a dropped connection as if it were a too-long IN list and retries
    on the dead session, which fails again with PendingRollbackError.
    """
    return _transient_cause(error) is not None


def _transient_cause(error: BaseException) -> BaseException | None:
    """The connection-level error that makes ``error`` transient (itself or one it came from), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _transient_itself(current):
            return current
        if isinstance(current, sqlalchemy.exc.DBAPIError):
            return None  # The database's own answer (a constraint, bad data): final.
        current = current.__cause__ or current.__context__
    return None


def _transient_itself(error: BaseException) -> bool:
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    if not isinstance(error, _TRANSIENT):
        return False
    orig = getattr(error, "orig", None)
    if type(orig).__module__.startswith("sqlite3"):
        # SQLite has no server to come back: only a lock held by another process passes.
        # "disk I/O error", "no such table", "unable to open database file" do not.
        return any(word in str(orig).lower() for word in ("locked", "busy"))
    return True


def _sleep_unless_interrupted(seconds: float) -> None:
    """Sleeps, but a SIGINT/SIGTERM that was only recorded (a command before its trial loop, see
    :func:`search.core._interrupts.record_interrupts`) ends the wait within 0.1 s instead of after it."""
    end = time.monotonic() + seconds
    main = threading.current_thread() is threading.main_thread()  # Signals are the main thread's.
    while True:
        if main:
            raise_pending()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.1))


def with_retry(
    call: Callable[[], T],
    *,
    what: str,
    budget: float = DEFAULT_BUDGET_S,
    retrying: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = _sleep_unless_interrupted,
) -> T:
    """Runs ``call()``, retrying transient storage errors with backoff (0.25 s doubling to 8 s).

    Args:
        call: The storage operation. It must be safe to repeat after a failure: a transaction
            that failed was rolled back, so only a commit whose acknowledgement was lost can have
            taken effect; ``retrying`` is where a caller checks for that.
        what: Names the operation in the log line.
        budget: Seconds to keep trying before the error is raised.
        retrying: Called before each retry (not before the first try).
        sleep: For tests.
    """
    deadline = time.monotonic() + budget
    delay = 0.25
    attempt = 0
    while True:
        try:
            if attempt and retrying is not None:
                retrying()
            result = call()
            if attempt:
                _announced.clear()
            return result
        except Exception as error:
            if not is_transient(error):
                if attempt:
                    _announced.clear()  # The storage answered (with an error): that outage is over.
                raise
            if time.monotonic() + delay > deadline:
                if _announced.shared is None:
                    # This process's outage is over for it. Shared with --workers it stays announced:
                    # a worker that meets the same outage later must not announce it again.
                    _announced.clear()
                # Not the driver's or Optuna's words ("An exception is raised during the commit..."):
                # what happened and what to do.
                raise StorageUnreachable(
                    f"the storage stayed unreachable for {budget:g} s (--storage-retry) while {what}; "
                    "run the same command again to resume"
                ) from error
            attempt += 1
            if attempt == 1 and _announced.claim():
                cause = _transient_cause(error) or error  # The driver's words, not a follow-up's.
                reason = str(getattr(cause, "orig", None) or cause).strip()
                _logger.warning(
                    "storage unreachable while %s (%s); retrying for up to %.0f s",
                    what,
                    reason.splitlines()[0][:200] if reason else type(error).__name__,
                    budget,
                )
            sleep(delay)
            delay = min(delay * 2, 8.0)
