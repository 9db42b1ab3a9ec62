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
