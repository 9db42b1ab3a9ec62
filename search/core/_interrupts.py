"""SIGINT and SIGTERM as an exception, so that whatever is in flight is recorded before exiting.

Python's default turns SIGINT into ``KeyboardInterrupt`` and lets SIGTERM kill the process on the
spot. The commands that train instead install a handler that raises :class:`Interrupted`: a
``BaseException``, so that neither an ``except Exception`` in a task nor the trial loop's handling
of a failed trial (record it, go on) swallows it. The trial loop stores the trial in flight as FAIL
and re-raises, and the command exits with ``128 + signum`` (130, 143). Storage writes that must not be cut in
half hold the signal back and deliver it once they are done (:func:`held_interrupts`,
:func:`deferred_interrupts`).

Every handler is installed with :func:`signal.signal`, so only the main thread can use this
module, and each context manager restores the handlers it replaced. ``search.study._workers`` does not
use it: a parent of worker processes does not stop itself, it forwards the signal to them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

# Set in the environment of the --workers fork server (search.study._workers): a signal before a worker
# installs its handlers ends it quietly (search.cli._startup), the parent says so in one line.
WORKER_ENV = "SEARCH_WORKER_PROCESS"

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_interrupted(signum: int, _frame: Any) -> NoReturn:
    """A signal handler that raises :class:`Interrupted` on every SIGINT/SIGTERM."""
    raise Interrupted(signum)


# Signals recorded by record_interrupts' handler, not yet turned into an Interrupted.
_pending: list[int] = []


def _record(signum: int, _frame: Any) -> None:
    _pending.append(signum)


def record_interrupts() -> None:
    """From now on, until a block of this module takes over, SIGINT/SIGTERM are only recorded.

    For a command between its start and its own handling (``search.cli._startup.started``): a handler
    that raised there could land in a weakref callback or a ``__del__``, where Python prints
    "Exception ignored" and carries on (a Ctrl-C lost, the run finished, exit 0), and SIGTERM's
    default would kill the process with no word. A recorded signal is raised as :class:`Interrupted`
    when :func:`interrupts_as_exceptions` is entered, or taken with :func:`take_pending`.
    """
    for s in INTERRUPTS:
        signal.signal(s, _record)


def raise_pending() -> None:
    """Raises :class:`Interrupted` for a recorded signal (see :func:`take_pending`); nothing otherwise."""
    signum = take_pending()
    if signum is not None:
        raise Interrupted(signum)


def take_pending() -> int | None:
    """The first signal recorded since :func:`record_interrupts` and not yet raised, or None; clears them."""
    signum = _pending[0] if _pending else None
    _pending.clear()
    return signum


@contextlib.contextmanager
def _handling(handler: Callable[[int, Any], object]) -> Iterator[None]:
    previous = {s: signal.signal(s, handler) for s in INTERRUPTS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def _lost_raises_kept() -> Iterator[None]:
    """A raise of :class:`Interrupted` that lands in a weakref callback or a ``__del__`` (an import's
    module lock, a tensor freed) is not printed as "Exception ignored": its signal is recorded for
    :func:`raise_pending`, which the commands call at their next step and after their block."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Interrupted):
            _pending.append(unraisable.exc_value.signum)
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextlib.contextmanager
def interrupts_as_exceptions(first_only: bool = True) -> Iterator[None]:
    """Turns SIGINT and SIGTERM into :class:`Interrupted` while the block runs.

    By default only the first signal raises: a second Ctrl-C (or a parent forwarding one) must not
    cut short the write of the trial that the first one interrupted. ``first_only=False`` raises
    on every signal, for a block that leaves nothing half-written when it is cut short
    (``search.confirm`` writes each run finished, in one transaction, after it has trained).
    A raise that lands in a ``__del__`` or a weakref callback, where Python would print it and go
    on, is recorded instead, for :func:`raise_pending` (``search.diagnose``'s observer asks at every
    step; the commands ask again after the block).
    """
    raise_pending()  # A signal recorded while the command was starting: now is the time to stop.
    if not first_only:
        with _lost_raises_kept(), _handling(raise_interrupted):
            yield
        return
    raised: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if not raised:
            raised.append(signum)
            raise Interrupted(signum)

    with _lost_raises_kept(), _handling(handler):
        yield


@contextlib.contextmanager
def held_interrupts() -> Iterator[list[int]]:
    """Holds SIGINT/SIGTERM back while the block runs; yields the list of those that came."""
    pending: list[int] = []
    with _handling(lambda n, _f: pending.append(n)):
        yield pending


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Holds SIGINT/SIGTERM back while a storage write runs, then delivers it."""
    with held_interrupts() as pending:
        yield
    if pending:
        raise Interrupted(pending[0])
