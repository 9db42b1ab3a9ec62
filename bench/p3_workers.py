"""P3: throughput of ``--workers 2`` vs ``--workers 1``, the real command on a SQLite study.

Trials per second from the first trial's start to the last trial's end (process start-up
excluded), and wall time including start-up.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time

import optuna

from bench.commands import all_processes_cpu
from bench.grpc_proxy import proxy_against_direct
from bench.many_workers import many_workers


def workers_throughput(workers: int, n_trials: int, directory: str) -> tuple[float, float]:
    """(trials/s between the first start and the last end, wall seconds) of the real command."""
    path = os.path.join(directory, f"w{workers}.db")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "search.optimize", "--trials", str(n_trials), "--workers", str(workers)]
        + ["--storage", f"sqlite:///{path}", "--quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=directory,
    )
    wall = time.perf_counter() - start
    trials = optuna.load_study(storage=f"sqlite:///{path}", study_name="seed-mlp").get_trials()
    first = min(t.datetime_start for t in trials)
    last = max(t.datetime_complete for t in trials)
    return len(trials) / (last - first).total_seconds(), wall


# search.optimize with each worker started as a fresh interpreter (multiprocessing's spawn), as
# --workers started them before the fork server (search/study/_fork_server.py).
_FRESH_INTERPRETERS = """
import multiprocessing, sys
import search.study._run_with_workers as pool, search.study._workers as workers
pool.worker_context = workers.worker_context = lambda target: multiprocessing.get_context("spawn")
from search.optimize import main
sys.exit(main(sys.argv[1:]))
"""


def workers_start_cost(workers: int, n_trials: int, directory: str, fresh: bool) -> tuple[float, float]:
    """(CPU seconds of every process, wall seconds) of a whole ``--workers`` run, start-up included.

    ``fresh``: each worker a fresh interpreter that imports torch and the trial loop itself, instead
    of a fork of the fork server that imported them once.
    """
    path = os.path.join(directory, f"start-{workers}-{int(fresh)}.db")
    command = (
        [sys.executable, "-c", _FRESH_INTERPRETERS] if fresh else [sys.executable, "-m", "search.optimize"]
    )
    command += [
        "--trials",
        str(n_trials),
        "--workers",
        str(workers),
        "--storage",
        f"sqlite:///{path}",
        "--quiet",
    ]
    return all_processes_cpu(command, directory)


def p3(args: argparse.Namespace, tmp: str) -> list[tuple[str, str, str]]:
    runs: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for r in range(args.p3_rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            directory = os.path.join(tmp, f"p3-{r}")
            os.makedirs(directory, exist_ok=True)
            runs[workers].append(workers_throughput(workers, args.p3_trials, directory))
    (one, one_wall), (two, two_wall) = (tuple(statistics.median(c) for c in zip(*runs[k])) for k in (1, 2))
    print(
        f"\nP3 throughput, seed-mlp, {args.p3_trials} trials on SQLite (median of {args.p3_rounds} rounds):"
    )
    print(f"  --workers 1                            {one:8.2f} trials/s   1.00x   (wall {one_wall:.1f} s)")
    print(
        f"  --workers 2                            {two:8.2f} trials/s   {two / one:.2f}x   (wall"
        f" {two_wall:.1f} s)"
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    ceiling = min(2, cores)  # each worker trains on one thread (--threads), so 2 workers can use 2 cores
    print(
        f"  ceiling on this machine: {ceiling:.2f}x ({cores} cores, 1 torch thread per worker); "
        f"reached {two / one / ceiling:.0%} of it"
    )
    start = p3_start(args, tmp)
    counts = tuple(int(n) for n in args.p3_many.split(",") if n.strip())
    many = many_workers(counts, args.p3_many_trials, tmp) if counts else []
    proxied = tuple(int(n) for n in args.p3_proxy.split(",") if n.strip())
    if proxied and importlib.util.find_spec("grpc") is None:
        print("\nP3 gRPC proxy: not measured, grpcio is missing (set-up: pip install grpcio protobuf)")
        many.append(("P3 gRPC proxy / direct RDB", "not measured", "pip install grpcio protobuf"))
    elif proxied:
        many += proxy_against_direct(proxied, args.p3_many_trials)
    return [
        (
            "P3 throughput, --workers 2 / --workers 1",
            f"{two / one:.2f}x",
            f"target >= 95% of the ceiling {ceiling:.2f}x ({0.95 * ceiling:.2f}x)",
        ),
        start,
        *many,
    ]


def p3_start(args: argparse.Namespace, tmp: str) -> tuple[str, str, str]:
    """CPU of a whole --workers run: workers forked from the fork server against fresh interpreters."""
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(args.p3_rounds):
        for fresh in (False, True) if r % 2 == 0 else (True, False):
            directory = os.path.join(tmp, f"p3-start-{r}")
            os.makedirs(directory, exist_ok=True)
            runs[fresh].append(workers_start_cost(args.p3_start_workers, 20, directory, fresh))
    (forked, forked_wall), (fresh, fresh_wall) = (
        tuple(statistics.median(c) for c in zip(*runs[k])) for k in (False, True)
    )
    k = args.p3_start_workers
    print(
        f"\nP3 start-up, --workers {k}, 20 seed-mlp trials on SQLite, CPU of every process (median of"
        f" {args.p3_rounds} rounds):"
    )
    print(
        f"  workers forked from the fork server    {forked:6.1f} s CPU   1.00x   (wall {forked_wall:.1f} s)"
    )
    print(
        f"  each worker a fresh interpreter        {fresh:6.1f} s CPU   {fresh / forked:.2f}x   (wall"
        f" {fresh_wall:.1f} s)"
    )
    return (
        f"P3 start-up CPU, --workers {k}: fresh interpreters / fork server",
        f"{fresh / forked:.2f}x",
        "higher is better",
    )
