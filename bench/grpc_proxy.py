"""Optuna's gRPC storage proxy against direct RDB access: K plain-Optuna processes on one PostgreSQL database.

Each process runs ``study.optimize`` on one shared study with trials of the service's shape (its four
distributions, 20 user attrs) that sleep 0.4 s, as a trial that waits on a GPU does, either straight on
the database (``RDBStorage``) or through one ``optuna.storages.run_grpc_proxy_server`` process
(``GrpcStorageProxy``). Trials per second, and the CPU of the client processes, the proxy and the
server's backends. Needs grpcio and protobuf (``pip install grpcio protobuf``), which the service does
not: the proxy is measured here, not adopted (docs/benchmarks.md says why).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import optuna

from bench.commands import ALL_PROCESSES_CPU
from bench.many_workers import BenchPostgres

_CLIENT = """
import sys, time, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
target, trials = sys.argv[1], int(sys.argv[2])
if target.startswith("grpc:"):
    storage = optuna.storages.GrpcStorageProxy(host="127.0.0.1", port=int(target[5:]))
else:
    storage = optuna.storages.RDBStorage(target)
study = optuna.load_study(storage=storage, study_name="proxy")
def objective(trial):
    trial.suggest_float("init_scale", 2.0**-20, 2.0**32, log=True)
    trial.suggest_float("growth_factor", 1.01, 8.0, log=True)
    trial.suggest_float("backoff_factor", 0.05, 0.95)
    trial.suggest_int("growth_interval", 1, 2000, log=True)
    for i in range(20):
        trial.set_user_attr(f"attr_{i}", float(i))
    time.sleep(0.4)
    return 1.0
study.optimize(objective, n_trials=trials)
"""

_PROXY = """
import sys, optuna
storage = optuna.storages.RDBStorage(sys.argv[1])
optuna.storages.run_grpc_proxy_server(storage, host="127.0.0.1", port=int(sys.argv[2]))
"""


@dataclass(frozen=True)
class ProxyRun:
    processes: int
    through_proxy: bool
    trials_per_second: float
    client_cpu_seconds: float
    proxy_cpu_seconds: float
    server_cpu_seconds: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proxy_run(server: BenchPostgres, processes: int, trials_each: int, through_proxy: bool) -> ProxyRun:
    """``processes`` plain-Optuna processes of ``trials_each`` trials on a new database of ``server``."""
    name = f"proxy{processes}{'g' if through_proxy else 'd'}"
    server.execute(f"CREATE DATABASE {name}")
    url = server.admin.rsplit("/", 1)[0] + f"/{name}"
    optuna.create_study(storage=url, study_name="proxy")
    proxy = None
    target = url
    if through_proxy:
        port = _free_port()
        proxy = subprocess.Popen([sys.executable, "-c", _PROXY, url, str(port)])
        time.sleep(3)  # The proxy imports Optuna and binds its port.
        target = f"grpc:{port}"
    server_cpu = server.backends_cpu()
    clients = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                ALL_PROCESSES_CPU,
                sys.executable,
                "-c",
                _CLIENT,
                target,
                str(trials_each),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    client_cpu = sum(float(c.communicate()[0].split()[-1]) for c in clients)
    proxy_cpu = 0.0
    if proxy is not None:
        with open(f"/proc/{proxy.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        proxy_cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        proxy.terminate()
        proxy.wait()
    time.sleep(0.5)  # Backends end once their connections close.
    trials = optuna.load_study(storage=url, study_name="proxy").get_trials(deepcopy=False)
    done = [t for t in trials if t.state.is_finished()]
    span = (max(t.datetime_complete for t in done) - min(t.datetime_start for t in done)).total_seconds()
    return ProxyRun(
        processes,
        through_proxy,
        len(done) / span,
        client_cpu,
        proxy_cpu,
        server.backends_cpu() - server_cpu,
    )


def proxy_against_direct(counts: tuple[int, ...], trials_each: int) -> list[tuple[str, str, str]]:
    """Prints direct and proxied runs of ``counts`` processes side by side; returns bench rows."""
    print(
        f"\nP3 Optuna's gRPC storage proxy against direct RDB access (plain Optuna, {trials_each} trials a"
        " process of the service's shape, 0.4 s asleep each, one PostgreSQL database):"
    )
    print("  processes  access   trials/s  client CPU ms/trial  proxy CPU ms/trial  server CPU ms/trial")
    rows = []
    with BenchPostgres() as server:
        for processes in counts:
            runs = [
                proxy_run(server, processes, trials_each, through_proxy) for through_proxy in (False, True)
            ]
            for run in runs:
                n, access = processes * trials_each, "proxy" if run.through_proxy else "direct"
                print(
                    f"  {processes:9}  {access:6}  {run.trials_per_second:9.2f}"
                    f"  {run.client_cpu_seconds / n * 1e3:19.0f}  {run.proxy_cpu_seconds / n * 1e3:18.0f}"
                    f"  {run.server_cpu_seconds / n * 1e3:19.1f}"
                )
            direct, proxied = runs
            rows.append(
                (
                    f"P3 gRPC proxy / direct RDB, {processes} plain-Optuna processes: trials/s",
                    f"{proxied.trials_per_second / direct.trials_per_second:.2f}x",
                    "adopt where > 1",
                )
            )
    return rows
