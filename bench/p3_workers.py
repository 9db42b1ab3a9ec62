"""P3: throughput of ``--workers 2`` vs ``--workers 1``, the real command on a SQLite study.

Trials per second from the first trial's start to the last trial's end (process start-up
excluded), and wall time including start-up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import optuna


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


# Runs a command as a child subreaper and prints the CPU seconds of every process it started: the fork
# server is orphaned to this process when the command ends, and its CPU, its workers' included, counts here.
_ALL_PROCESSES_CPU = """
import ctypes, os, resource, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_utime + usage.ru_stime)
sys.exit(code)
"""

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
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _ALL_PROCESSES_CPU, *command],
        check=True,
        capture_output=True,
        text=True,
        cwd=directory,
    )
    return float(out.stdout.split()[-1]), time.perf_counter() - start
