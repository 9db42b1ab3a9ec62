"""A Ctrl-C while a command starts up: one line and exit 130, not a traceback out of an import.

Importing torch, optuna, sqlalchemy and plotly takes seconds, and ``python -m search.X`` (or its
console script) imports the ``search`` package, which imports them, before the command's ``main``
runs. A SIGINT then raises ``KeyboardInterrupt`` inside whichever module is importing, where no
command can catch it, and Python prints a 20-line traceback. So the package calls :func:`guard`
before its first heavy import: in one of the five commands' processes (and only there: a script
that imports ``search`` as a library keeps its own handlers), SIGINT and SIGTERM print
``search.X: interrupted while starting (SIGINT); nothing was written`` and exit with 128 + signum
(130, 143), like every other interrupt. The command's ``main`` calls :func:`started` first thing:
from then on a signal is recorded (:func:`search.core._interrupts.record_interrupts`) and the command
raises it where it can stop cleanly, until its own handlers take over. A ``--workers`` process
(:mod:`search.study._workers` marks the environment of the fork server it starts them from) is guarded too,
and ends quietly.

Nothing is written before ``main`` runs, so the handler ends the process with :func:`os._exit`:
there is nothing to save, and unwinding a half-finished ``import torch`` could only add noise.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from search.core._interrupts import WORKER_ENV  # Light: signal and contextlib only.

# The commands, by module and by console script (pyproject.toml's [project.scripts]).
COMMANDS = {
    "search.optimize": "search-optimize",
    "search.confirm": "search-confirm",
    "search.transfer": "search-transfer",
    "search.dashboard": "search-dashboard",
    "search.report": "search-report",
    "search.diagnose": "search-diagnose",
}
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}
_previous: dict[int, Any] = {}


def command_being_started(orig_argv: list[str] | None = None, argv0: str | None = None) -> str | None:
    """The command this process is starting (``search.optimize``, ...), or None when it is not one.

    ``python [options] -m search.X`` is read from the interpreter's own command line
    (``sys.orig_argv``); a console script from its name (``sys.argv[0]``).
    """
    orig = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)
    argv0 = (sys.argv[0] if sys.argv else "") if argv0 is None else argv0
    args = iter(orig[1:])
    for arg in args:
        if arg == "-m":
            module = next(args, "")
            return module if module in COMMANDS else None
        if arg.startswith("-m"):
            return arg[2:] if arg[2:] in COMMANDS else None
        if arg in _OPTIONS_WITH_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            break  # A script path: python runs a file, not a module.
    script = os.path.basename(argv0)
    return next((module for module, name in COMMANDS.items() if name == script), None)


# Set by search.study._workers in the environment its fork server starts with: the server, and each
# --workers process forked from it, inherits this guard's quiet handlers (search.study._fork_server).


def _is_worker_process() -> bool:
    """Whether this is the fork server of ``--workers`` processes; its children inherit the guard, not this
    mark."""
    return os.environ.pop(WORKER_ENV, None) == "1"


def guard() -> None:
    """Until :func:`started`: SIGINT/SIGTERM end a starting command with one line (nothing in a library).

    A ``--workers`` process still importing ends quietly with 128 + signum: its parent, which
    forwarded the signal or got it from the terminal too, says what happened, once.
    """
    worker = _is_worker_process()
    command = command_being_started()
    if (command is None and not worker) or _previous:
        return

    def handler(signum: int, _frame: Any) -> None:
        if not worker:
            name = signal.Signals(signum).name
            os.write(2, f"{command}: interrupted while starting ({name}); nothing was written\n".encode())
        os._exit(128 + signum)

    for s in _INTERRUPTS:
        _previous[s] = signal.signal(s, handler)


def started() -> None:
    """The command's ``main`` is running: signals are recorded until its own handling takes over.

    A no-op when unguarded (``search`` used as a library, or a command's ``main`` called in-process).
    From here a signal is only recorded (:func:`search.core._interrupts.record_interrupts`), never raised
    or fatal, so it can neither be lost nor leave a half-made file without a word; the command
    raises it where it can stop cleanly (``interrupts_as_exceptions``) or checks it before it
    reports success (``take_pending``).
    """
    if not _previous:
        return
    from search.core._interrupts import record_interrupts  # Light: signal and contextlib only.

    record_interrupts()
    _previous.clear()
