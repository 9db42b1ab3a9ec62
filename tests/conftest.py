"""Shared fixtures: CLI runners, throwaway PostgreSQL/MariaDB databases, test tasks."""

from __future__ import annotations

import atexit
import compileall
import contextlib
import importlib
import io
import logging
import multiprocessing
import os
import pathlib
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator

import filelock
import optuna
import pytest
import sqlalchemy
import torch
from optuna.trial import FrozenTrial, TrialState
from warm_start import WarmProcess

from search.storage import open_storage

from frameworks import fresh_accelerate  # noqa: F401 (a fixture for every test module)

# One torch thread in each test process, as the service trains (search.study._workers.threads_per_process):
# pytest-xdist runs two test processes on two cores, and intra-op threads that share cores with
# another busy process stall at every barrier (docs/benchmarks.md measured 47x on deep-mlp).
torch.set_num_threads(1)

TESTS = pathlib.Path(__file__).parent
# A population member against the ordinary trial of the same settings, cross-entropy tasks: the
# stacked matmuls round differently (measured: at most 2.5e-7, tests/training/test_population.py).
CE_LOSS_REL = 1e-6

# A few test modules reuse another's builders by its basename (basenames are unique: test_layering
# checks): every folder of tests/ is importable, whichever files a run collects.
for _folder in sorted(TESTS.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith(("_", ".")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))
ROOT = TESTS.parent
POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compiles the package's bytecode once, before any test process starts: where the environment sets
    PYTHONDONTWRITEBYTECODE (a fresh clone on a machine that sets it), each of the suite's command processes
    would otherwise compile search/ from source again (about 0.6 s of CPU each). Only the first process of a
    run does it (xdist's controller, or a plain run); the bytecode lands in search/'s own __pycache__."""
    if not hasattr(session.config, "workerinput"):
        for folder in ("search", "examples", "tests"):
            compileall.compile_dir(ROOT / folder, quiet=1)


MYSQL_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/test"


def cli_env() -> dict[str, str]:
    """Environment for CLI subprocesses: test tasks importable, one torch thread (fast start)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_process(
    args: list[str],
    cwd: pathlib.Path,
    timeout: float = 240,
    module: str = "search.optimize",
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """Runs ``python -m MODULE ARGS`` in ``cwd`` as a real process and captures its output.

    For tests where the process is the point: signals, ``--workers``, pipes, determinism across processes.
    Everything else calls :func:`run_cli`, in this process. ``fresh``: a new interpreter rather than one
    forked warm (tests/warm_start.py), for tests of what happens before ``main`` or across interpreters.
    """
    proc = start_cli(args, cwd, fresh=fresh, module=module)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_cli(
    args: list[str], cwd: pathlib.Path, module: str = "search.optimize"
) -> subprocess.CompletedProcess:
    """Runs command ``MODULE``'s ``main(ARGS)`` in this process, in ``cwd``; its exit code and output.

    What ``python -m MODULE ARGS`` does, less the seconds of a new interpreter importing torch and
    Optuna: ``main`` never exits, and returns the code the process would exit with. What a command
    sets for its process is put back afterwards (the working directory, torch's thread count, the
    ``search`` logger's handler), so the next test finds this process as it was.
    """
    command = importlib.import_module(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    search_logger = logging.getLogger("search")
    handlers, propagate, level = list(search_logger.handlers), search_logger.propagate, search_logger.level
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = command.main([str(a) for a in args])
    finally:
        torch.set_num_threads(threads)
        search_logger.handlers[:] = handlers
        search_logger.propagate, search_logger.level = propagate, level
    return subprocess.CompletedProcess([module, *args], code, stdout.getvalue(), stderr.getvalue())


def real_study(factory: pytest.TempPathFactory, name: str, trials: int, *args: str) -> pathlib.Path:
    """A directory holding ``study.db``: a real seed-mlp search of ``trials`` trials (5 baselines first), run
    with the command's further ``args``."""
    directory = factory.mktemp(name)
    proc = run_cli(["--trials", str(trials), *args, "--quiet"], directory)
    assert proc.returncode == 0, proc.stderr
    return directory


def built_once(
    factory: pytest.TempPathFactory, name: str, build: Callable[[pathlib.Path], None]
) -> pathlib.Path:
    """A directory that ``build(directory)`` fills once per test session, whichever pytest-xdist worker asks
    first: the others wait for it and share it, rather than train the same study again each. Shared means
    read-only: a test that writes works on a copy.

    Its SQLite files are checkpointed once built (their whole content in the main file, the WAL empty):
    readers in other processes write nothing to them, and a copy of ``study.db`` alone holds everything.
    """
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's folder
    directory = root / f"built-{name}"
    with filelock.FileLock(f"{directory}.lock"):
        if not (directory / ".built").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            for db in directory.glob("*.db"):
                with contextlib.closing(sqlite3.connect(db)) as connection:
                    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (directory / ".built").touch()
    return directory


def start_cli(
    args: list[str],
    cwd: pathlib.Path,
    new_session: bool = False,
    fresh: bool = False,
    module: str = "search.optimize",
) -> subprocess.Popen | WarmProcess:
    """Starts ``python -m MODULE ARGS`` in ``cwd`` in the background, output piped.

    ``new_session``: in a process group of its own, as a terminal's foreground job, for a signal to the group.
    ``fresh``: a new interpreter; otherwise a process forked from one that has imported torch and Optuna
    already (tests/warm_start.py), which saves each command about 5 s of CPU.
    """
    if not fresh:
        return WarmProcess(_warm_server(), module, [str(a) for a in args], str(cwd), cli_env(), new_session)
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
    )


_WARM: dict[str, object] = {}


def _stop_warm_server(server: subprocess.Popen) -> None:
    """Ends the server and waits for it, so that its CPU time counts in this process's children's."""
    server.stdin.close()
    server.wait(timeout=60)
    shutil.rmtree(os.path.dirname(str(_WARM["socket"])), ignore_errors=True)


def _warm_server() -> str:
    """The socket of this test process's warm-start server (tests/warm_start.py), started on first use; it
    ends when this process does (it reads its stdin to the end)."""
    if "socket" not in _WARM:
        folder = tempfile.mkdtemp(prefix="warm-")
        path = os.path.join(folder, "socket")
        server = subprocess.Popen(
            [sys.executable, str(TESTS / "warm_start.py"), path],
            env=cli_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the warm-start server did not start (exit {server.wait()})")
        _WARM.update(socket=path, server=server)
        atexit.register(_stop_warm_server, server)
    return str(_WARM["socket"])


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started that still run (none once it has ended)."""
    try:
        return [int(p) for p in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def fork_server_of(parent: int) -> int:
    """The fork server a ``--workers`` run started (search.study._workers); its children are the workers."""
    for pid in child_pids(parent):
        try:
            if b"multiprocessing.forkserver" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except FileNotFoundError:
            continue
    raise AssertionError(f"process {parent} runs no fork server")


def load(cwd: pathlib.Path, name: str = "seed-mlp", file: str = "study.db") -> optuna.Study:
    """Loads a study written by the CLI in ``cwd``."""
    return optuna.load_study(storage=f"sqlite:///{cwd / file}", study_name=name)


FORK = multiprocessing.get_context("fork")


def forked_together(target: Callable[..., None], args: list[tuple]) -> list[int | None]:
    """Runs ``target(*a)`` for each ``a`` of ``args``, each in a process forked from this one (a fresh
    interpreter would only add seconds of imports); their exit codes, None for one killed after 120 s.
    Barriers and shared arrays in ``args`` come from :data:`FORK`. A child's traceback is on stderr."""
    procs = [FORK.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        if p.exitcode is None:
            p.kill()
    return [p.exitcode for p in procs]


_POLLED: dict[str, optuna.storages.BaseStorage] = {}


def polled_trials(url: str, name: str, states: tuple[TrialState, ...] | None = None) -> list[FrozenTrial]:
    """The trials of study ``name`` at ``url`` that a command is writing, for a test that polls it.

    One storage per URL for the whole test, opened as the service opens it (a poll while the command
    creates the schema must not race it): opening a storage checks the schema, ~50 ms of CPU, which a
    poll every 0.2 s paid again each time. Raises KeyError while the study does not exist yet.
    """
    if url not in _POLLED:
        _POLLED[url] = open_storage(url, immediate=False)  # A reader: never the write lock.
    return optuna.load_study(storage=_POLLED[url], study_name=name).get_trials(deepcopy=False, states=states)


@pytest.fixture(autouse=True)
def _close_polled_storages():
    yield
    for storage in _POLLED.values():
        storage.engine.dispose()
    _POLLED.clear()


@pytest.fixture(autouse=True)
def _test_tasks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))


def _throwaway_database(admin_url: str, kind: str):
    name = f"search_test_{uuid.uuid4().hex[:10]}"
    try:
        engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as e:
        pytest.fail(f"{kind} at {admin_url} is required for this test and is not reachable: {e}")
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with engine.connect() as c:
        if kind == "PostgreSQL":
            c.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        else:
            c.exec_driver_sql(f"DROP DATABASE {name}")
    engine.dispose()


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database (the machine's server; fails loudly if it is down)."""
    yield from _throwaway_database(POSTGRES_ADMIN, "PostgreSQL")


@pytest.fixture
def mysql_url():
    """A fresh MariaDB/MySQL database (the machine's server; fails loudly if it is down)."""
    yield from _throwaway_database(MYSQL_ADMIN, "MariaDB")


# -- an own PostgreSQL server, for tests that stop it ---------------------------------------------

PG_BIN = pathlib.Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnPostgres:
    """A PostgreSQL server of the test's own, in a temporary directory, on a free port.

    The machine's shared server must never be stopped; this one may be, at will (outages, hard
    restarts). ``initdb`` refuses to run as root ("cannot be run as root"), and the tests run as
    root here, so every server command runs as the ``postgres`` user through ``runuser``; the
    directory is made outside pytest's tmp_path (mode 700, owned by root, where that user cannot
    reach) and handed to it. Trust authentication, loopback only, socket in the directory.
    """

    def __init__(self) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="own-pg-"))
        self.port = _free_port()
        self.data = self.root / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")
        self._pg("initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", str(self.data))

    def _pg(self, tool: str, *args: str) -> None:
        command = [str(PG_BIN / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if proc.returncode:
            raise RuntimeError(
                f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}"
            )

    def start(self) -> None:
        # fsync off: a throwaway server; an immediate stop still replays its WAL on start.
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """``mode="immediate"`` is a hard stop: no checkpoint, every session cut (crash recovery on start)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def own_postgres():
    """An own PostgreSQL server, started; stopped and removed after the test, also on failure."""
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def slowed(function: Callable, seconds: float) -> Callable:
    """``function`` that first sleeps ``seconds``: shows whether a measured time includes its calls."""

    def wrapped(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)

    return wrapped


@contextlib.contextmanager
def read_only_media(*paths: pathlib.Path) -> Iterator[None]:
    """Makes ``paths`` immutable (``chattr +i``) while the block runs: unlike chmod, that holds for root
    too (the tests run as root), so a command really cannot write the file or create one beside it."""
    subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)


def interrupt_at(monkeypatch: pytest.MonkeyPatch, target: object, name: str, call: int, before: bool) -> None:
    """Makes ``target.name``'s ``call``-th call send this process SIGINT, before or after it runs."""
    original = getattr(target, name)
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if before and len(calls) == call:
            signal.raise_signal(signal.SIGINT)
        result = original(*args, **kwargs)
        if not before and len(calls) == call:
            signal.raise_signal(signal.SIGINT)
        return result

    monkeypatch.setattr(target, name, wrapped)


def wait_until_stale(
    storage: optuna.storages.RDBStorage, study: optuna.Study, trial_ids: Collection[int], timeout: float = 60
) -> None:
    """Polls until the storage counts every one of ``trial_ids`` stale (silent for twice the heartbeat
    interval, by the database's clock: whole seconds on SQLite), instead of sleeping a fixed margin."""
    deadline = time.monotonic() + timeout
    while not set(trial_ids) <= set(storage._get_stale_trial_ids(study._study_id)):
        assert time.monotonic() < deadline, f"trials {sorted(trial_ids)} not stale after {timeout} s"
        time.sleep(0.1)


def example_build(module: str, installs: str):
    """``examples.<module>.build``, imported when a test calls it (transformers takes 3 s: not at collection,
    in every runner). A missing dependency fails, naming the install command (``installs``); it never skips.
    """
    try:
        return importlib.import_module(f"examples.{module}").build
    except ImportError as missing:
        raise ImportError(f"{missing}: pip install -e '.[dev]' installs {installs}") from missing
