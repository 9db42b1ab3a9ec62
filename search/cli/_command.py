"""The life of one command call, shared by the five commands: start-up, errors, signals, closing.

Each command's ``main(argv)`` is ``run_command(PROG, body, argv)``: the body parses its arguments
and does the work, and returns the exit code; everything every command must do the same way is
here, once:

* start-up: the imports are done, so a signal is recorded from here on (:func:`search.cli._startup.started`);
* ``--help``: argparse's ``SystemExit`` becomes a return value, so ``main`` never exits the process;
* bad input: a :class:`~search.core.UsageError` the body lets through prints ``PROG: error: LINE``
  (URLs' passwords masked) and exits 2;
* signals: an :class:`~search.core.Interrupted` (or ``KeyboardInterrupt``) the body lets through prints
  one line and exits 128 + signum (130, 143);
* any other failure: one line, exit 1, never a traceback;
* storages: those the body opened (:meth:`Session.keep`) are closed on every path, so SQLite
  removes its ``-wal``/``-shm``;
* a closed standard output: when the reader of a pipe goes away (``search.optimize | head -1``),
  the command ends as a Unix tool ends on SIGPIPE, quietly with exit 141 (128 + SIGPIPE), without a
  word on stderr. Python ignores SIGPIPE, so the write raises ``BrokenPipeError`` instead; nothing
  the command stores is cut short by it, since the commands print after their work is stored, and
  the skeleton flushes standard output before it returns, so a write that fails surfaces here and
  not at interpreter exit ("Exception ignored ... BrokenPipeError", exit 120).

Nothing here imports torch or Optuna: ``search.storage`` is imported only to close what was opened.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from search.cli import _startup as startup
from search.cli._parsing import fail, prog_name
from search.core import Interrupted, Settings, UsageError

# The exit code of a command whose standard output was closed by its reader: 128 + SIGPIPE, what a
# shell reports for a tool that SIGPIPE killed (`yes | head -1; echo ${PIPESTATUS[0]}` prints 141).
READER_GONE = 128 + signal.SIGPIPE


class Session:
    """One call of a command: its name in messages, the storages it opened, the URLs its messages mask."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.urls: list[str] = []  # Masked in every line the skeleton prints.
        self._storages: list[Any] = []
        self._closers: list[Callable[[], None]] = []

    def keep(self, storage: Any) -> Any:
        """Registers an opened storage to be closed when the command ends; returns it."""
        self._storages.append(storage)
        return storage

    def on_close(self, close: Callable[[], None]) -> None:
        """Calls ``close`` when the command ends, on every path (for storages a command keeps itself)."""
        self._closers.append(close)

    def note(self, message: str) -> None:
        """Prints ``PROG: MESSAGE`` on stderr."""
        print(f"{self.prog}: {message}", file=sys.stderr)

    def fail(self, message: str, code: int = 2) -> int:
        """Prints ``PROG: error: LINE`` (the first line, URLs masked) on stderr; returns ``code``."""
        return fail(self.prog, self.mask(message), code)

    def mask(self, text: str) -> str:
        """``text`` with the passwords of this call's URLs masked."""
        # A secret sits in a URL's user part (user:password@) or its query (?password=): a URL with neither is
        # left alone without importing the parser (SQLAlchemy's, a fifth of a second of a bad-input exit).
        urls = [url for url in self.urls if "@" in url or "?" in url]
        if not urls:
            return text
        from search.storage import redact  # Light: sqlalchemy's URL parser only.

        for url in urls:
            text = redact(text, url)
        return text

    def close(self) -> None:
        """Closes what the command opened; every connection closed lets SQLite remove its -wal/-shm."""
        storages, self._storages = self._storages, []
        closers, self._closers = self._closers, []
        if storages:
            from search.storage import close_storage

            for storage in storages:
                close_storage(storage)
        for close in closers:
            close()


def _interrupted_line(signum: int) -> str:
    return f"error: interrupted ({signal.Signals(signum).name})"


def run_command(
    prog: str,
    body: Callable[[Session, list[str]], int],
    argv: Sequence[str] | None = None,
    interrupted: Callable[[int], str] = _interrupted_line,
) -> int:
    """Runs ``body(session, argv)`` as command ``prog`` and returns its exit code (never exits).

    Args:
        prog: The name in the command's messages, e.g. ``"search.optimize"``.
        body: Parses ``argv`` and does the work; returns the exit code.
        argv: The arguments; ``sys.argv[1:]`` when None.
        interrupted: The line (after ``PROG: ``) for a signal the body did not handle itself.
    """
    startup.started()  # Imports are done: this command's own interrupt handling from here.
    args = list(sys.argv[1:] if argv is None else argv)
    session = Session(prog)
    try:
        try:
            code = body(session, args)
        finally:
            session.close()
        sys.stdout.flush()  # A reader that went away is found here, not at interpreter exit.
        return code
    except BrokenPipeError as e:
        if not stdout_reader_gone():  # Another pipe (a socket to a database): a failure like any other.
            return session.fail(f"{type(e).__name__}: {e}", 1)
        return _reader_gone()
    except SystemExit as e:  # --help (argparse exits after printing it)
        return e.code if isinstance(e.code, int) else 0
    except UsageError as e:  # argparse's errors, and bad input found by the library under the command.
        return session.fail(str(e))
    except (KeyboardInterrupt, Interrupted) as e:
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"{prog}: {interrupted(signum)}", file=sys.stderr)
        return 128 + signum
    except Exception as e:  # A failure nobody foresaw: one line, not a traceback.
        line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return session.fail(f"{type(e).__name__}: {line}" if line else type(e).__name__, 1)


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll reports POLLERR then)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # Captured in-process: not a pipe of ours.
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever the mask.
    return any(event & select.POLLERR for _fd, event in poller.poll(0))


def _reader_gone() -> int:
    """Standard output's reader went away: nothing more can be said there; exit as SIGPIPE would."""
    try:
        # What Python still holds for stdout is flushed at exit: into /dev/null, not a second error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # Not a real file (captured in-process): nothing to redirect.
        pass
    return READER_GONE


def unreachable_line(prog: str, settings: Settings, argv: list[str]) -> str:
    """The one line a command prints on giving up on the storage: what happened and the command to resume."""
    from search.storage import PASSWORD_MASKED, mask_url, redact

    url = settings.run.storage
    command = redact(f"{prog_name(prog)} {shlex.join(argv)}".strip(), url)
    if mask_url(url) != url:  # The command as printed cannot log in: say what to put back.
        command += f" {PASSWORD_MASKED}"
    return (
        f"the storage {mask_url(url)} stayed unreachable for {settings.run.storage_retry:g} s "
        f"(--storage-retry); the trials it holds are kept; to resume, run: {command}"
    )
