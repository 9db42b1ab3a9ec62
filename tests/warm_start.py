"""Command processes started from a warm interpreter: ``python -m MODULE ARGS``, less the seconds of imports.

A new interpreter spends about 5 s of CPU importing torch, ``torch._dynamo`` (which the first
``torch.optim`` optimizer loads), Optuna, SQLAlchemy and Alembic before a command does anything; the
suite starts dozens of command processes, and on two cores those imports were a fifth of its time. Here
one server process per test process imports them once and forks a child for each command, as
``search.study._workers`` does for its workers: the child is a real process of its own (its pid, its
pipes, its signals, its exit code, its session when asked), that runs ``MODULE`` as ``__main__`` from a
fresh copy of a process that has never run a command, and exits the way ``python -m`` exits (atexit
handlers, non-daemon threads joined, an uncaught KeyboardInterrupt ends it by SIGINT).

What differs from a new interpreter is only what was imported before ``main`` starts: tests about a
command's start-up (its imports, a signal while it imports, ``--help``) start a real interpreter
(conftest.start_cli's ``fresh``).

Run as a script (``python warm_start.py SOCKET``), this module is the server; imported, it is the client
(:class:`WarmProcess`, which has the part of :class:`subprocess.Popen` the tests use).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

# What every command imports before it trains or opens a storage (measured with python -X importtime).
PRELOAD = (
    "torch",
    "torch._dynamo",
    "optuna",
    "optuna.storages._rdb.storage",
    "alembic.context",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "search.optimize",
    "search.confirm",
    "search.diagnose",
    "search.report",
)


class WarmProcess:
    """A command forked by the server: ``pid``, ``returncode``, ``stdout`` and ``stderr`` (text pipes),
    ``poll``, ``wait``, ``communicate``, ``send_signal``, ``terminate`` and ``kill``, as Popen's."""

    def __init__(
        self, server: str, module: str, args: Sequence[str], cwd: str, env: dict[str, str], new_session: bool
    ) -> None:
        self.args = [sys.executable, "-m", module, *args]
        self.returncode: int | None = None
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        request = {
            "module": module,
            "args": list(args),
            "cwd": str(cwd),
            "env": env,
            "new_session": new_session,
        }
        self._status = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._status.connect(server)
            socket.send_fds(self._status, [json.dumps(request).encode()], [devnull, out_write, err_write])
            self.pid = int(self._status.recv(64))
        finally:
            for fd in (devnull, out_write, err_write):
                os.close(fd)
        self.stdout = io.open(out_read, "r")
        self.stderr = io.open(err_read, "r")
        self._output: dict[int, list[bytes]] = {out_read: [], err_read: []}
        self._open = [out_read, err_read]

    def _collect(self, timeout: float | None) -> bool:
        """Waits up to ``timeout`` (None: for ever) for the exit status; whether it came."""
        if self.returncode is None:
            ready, _, _ = select.select([self._status], [], [], timeout)
            if not ready:
                return False
            self.returncode = int(self._status.recv(64))
            self._status.close()
        return True

    def poll(self) -> int | None:
        self._collect(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._collect(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Reads both pipes to their end, then waits, as Popen's (what a timeout interrupts is kept)."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        self._open = [fd for fd, stream in zip(self._open, (self.stdout, self.stderr)) if not stream.closed]
        while self._open:
            ready, _, _ = select.select(self._open, [], [], left())
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    self._output[fd].append(chunk)
                else:
                    self._open.remove(fd)
        self.stdout.close()
        self.stderr.close()
        if not self._collect(left()):
            raise subprocess.TimeoutExpired(self.args, timeout)
        # Popen's text mode: universal newlines (a progress bar's "\r" reads as a line end).
        out, err = (
            b"".join(chunks).decode().replace("\r\n", "\n").replace("\r", "\n")
            for chunks in self._output.values()
        )
        return out, err

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _serve(path: str) -> dict:
    """Imports PRELOAD, then forks a child for each request on the socket at ``path`` and reports its exit
    status on the request's connection; returns (in the child only) the request to run. Ends when the
    test process that started it closes its stdin."""
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # Only to wake the select below.
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # A Ctrl-C meant for the tests' process group.
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener, wake_read, sys.stdin], [], [])
        if sys.stdin in ready and not sys.stdin.buffer.read1(1):
            for pid in children:  # The test process ended: so do the commands it left running.
                os.kill(pid, signal.SIGKILL)
            os._exit(0)
        if wake_read in ready:
            os.read(wake_read, 4096)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            connection = children.pop(pid)
            with contextlib.suppress(OSError):  # A test that failed may have dropped its handle.
                connection.send(str(os.waitstatus_to_exitcode(status)).encode())
            connection.close()
        if listener in ready:
            connection, _ = listener.accept()
            try:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                request = json.loads(message)
            except (OSError, ValueError):
                connection.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for other in (listener, connection, *children.values()):
                    other.close()
                signal.set_wakeup_fd(-1)
                os.close(wake_read)
                os.close(wake_write)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                connection.send(str(pid).encode())
            children[pid] = connection


def _run(request: dict) -> None:
    """In the forked child: the process ``python -m MODULE ARGS`` would be, then MODULE as ``__main__``."""
    import runpy

    # As a new interpreter starts: default signal dispositions, Python's own SIGINT handler.
    defaults = (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
    for signum in defaults:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # python -m puts the working directory first.
    import numpy

    numpy.random.seed()  # A new interpreter's global numpy state is its own (random reseeds itself at fork).
    sys.argv = [request["module"], *request["args"]]
    # python -m runs the module as __main__ only: the preloaded copy goes, from sys.modules and its package.
    package, _, name = request["module"].rpartition(".")
    sys.modules.pop(request["module"], None)
    if package and hasattr(sys.modules.get(package), name):
        delattr(sys.modules[package], name)
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _run(_serve(sys.argv[1]))
