"""P3 at scale: 1, 8 and 16 ``--workers`` processes on one PostgreSQL database, trials that mostly sleep.

A PostgreSQL server of the bench's own (initdb in a temporary directory, a free port, fsync on as a
real server has it) with ``pg_stat_statements`` loaded, so that every statement the run sends is
counted at the server: statements per finished trial are the database round trips a trial costs (the
command's start-up included, spread over its trials). Trials per second run from the first trial's
start to the last trial's end; CPU is that of every process of the run (the fork server's workers
included), so that where the machine's cores saturate shows beside where the database does.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import optuna
import sqlalchemy

from bench.commands import all_processes_cpu

PG_BIN = pathlib.Path("/usr/lib/postgresql/15/bin")
TASK = "bench.sleepy:build"
ROOT = pathlib.Path(__file__).resolve().parent.parent  # Where ``bench`` imports from, in the run's cwd too.


@dataclass(frozen=True)
class WorkersRun:
    workers: int
    trials: int
    trials_per_second: float
    statements_per_trial: float
    transactions_per_trial: float
    cpu_seconds: float  # Every process of the command, its workers included.
    server_cpu_seconds: float  # The PostgreSQL server's backends that served it.
    wall_seconds: float


class BenchPostgres:
    """A PostgreSQL server of the bench's own with pg_stat_statements; a context manager."""

    def __init__(self) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="bench-pg-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.admin = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        command = [str(PG_BIN / tool), *args]
        if os.geteuid() == 0:  # initdb refuses root: the server runs as the postgres user.
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def __enter__(self) -> BenchPostgres:
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")
        data = str(self.root / "data")
        self._pg("initdb", "-A", "trust", "-U", "postgres", "-D", data)
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
            " -c shared_preload_libraries=pg_stat_statements"
        )
        self._pg("pg_ctl", "-D", data, "-o", options, "-l", str(self.root / "log"), "-w", "start")
        self.execute("CREATE EXTENSION pg_stat_statements")
        return self

    def __exit__(self, *exc: object) -> None:
        self._pg("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def backends_cpu(self) -> float:
        """CPU seconds of the server's ended backends (a backend ends with its connection)."""
        pid = (self.root / "data" / "postmaster.pid").read_text().split()[0]
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime

    def execute(self, sql: str) -> list[tuple]:
        engine = sqlalchemy.create_engine(self.admin, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                result = connection.exec_driver_sql(sql)
                return list(result) if result.returns_rows else []
        finally:
            engine.dispose()


def workers_on_postgres(server: BenchPostgres, workers: int, trials: int, directory: str) -> WorkersRun:
    """One whole ``--workers`` run of ``trials`` sleepy trials on a new database of ``server``."""
    name = f"workers{workers}"
    server.execute(f"CREATE DATABASE {name}")
    url = server.admin.rsplit("/", 1)[0] + f"/{name}"
    (dbid,) = server.execute(f"SELECT oid FROM pg_database WHERE datname = '{name}'")[0]
    server.execute("SELECT pg_stat_statements_reset()")
    transactions = f"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datid = {dbid}"
    (xacts_before,) = server.execute(transactions)[0]
    server_cpu = server.backends_cpu()
    command = [sys.executable, "-m", "search.optimize", "--task", TASK, "--trials", str(trials)]
    command += ["--workers", str(workers), "--storage", url, "--quiet"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cpu, wall = all_processes_cpu(command, directory, environment)
    (statements,) = server.execute(f"SELECT sum(calls) FROM pg_stat_statements WHERE dbid = {dbid}")[0]
    time.sleep(0.6)  # The server's statistics collector publishes at most twice a second.
    (xacts,) = server.execute(transactions)[0]
    server_cpu = server.backends_cpu() - server_cpu
    storage = optuna.storages.RDBStorage(url)
    try:
        (summary,) = optuna.get_all_study_summaries(storage)
        study = optuna.load_study(storage=storage, study_name=summary.study_name)
        done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    finally:
        storage.engine.dispose()
    first = min(t.datetime_start for t in done)
    last = max(t.datetime_complete for t in done)
    return WorkersRun(
        workers,
        len(done),
        len(done) / (last - first).total_seconds(),
        int(statements) / len(done),
        (int(xacts) - int(xacts_before)) / len(done),
        cpu,
        server_cpu,
        wall,
    )


def many_workers(
    counts: tuple[int, ...], trials_per_worker: int, directory: str
) -> list[tuple[str, str, str]]:
    """Prints the runs of ``counts`` workers (``trials_per_worker`` trials each) and returns bench rows."""
    print(
        f"\nP3 many workers on one PostgreSQL database ({TASK}: 4 steps, 0.4 s asleep a trial;"
        f" {trials_per_worker} trials a worker; statements counted by pg_stat_statements):"
    )
    print(
        "  workers  trials/s  speed-up  statements/trial  transactions/trial  CPU ms/trial"
        "  cores busy  server CPU ms/trial"
    )
    runs = []
    with BenchPostgres() as server:
        for workers in counts:
            run = workers_on_postgres(server, workers, workers * trials_per_worker, directory)
            runs.append(run)
            speedup = run.trials_per_second / runs[0].trials_per_second
            print(
                f"  {workers:7}  {run.trials_per_second:8.2f}  {speedup:7.2f}x"
                f"  {run.statements_per_trial:16.1f}  {run.transactions_per_trial:18.1f}"
                f"  {run.cpu_seconds / run.trials * 1e3:12.0f}  {run.cpu_seconds / run.wall_seconds:10.2f}"
                f"  {run.server_cpu_seconds / run.trials * 1e3:19.1f}"
            )
    return [
        (
            f"P3 {run.workers} workers on PostgreSQL, sleepy trials: trials/s (vs 1 worker)",
            f"{run.trials_per_second:.1f} ({run.trials_per_second / runs[0].trials_per_second:.1f}x);"
            f" {run.statements_per_trial:.0f} statements a trial",
            "",
        )
        for run in runs[1:]
    ]
