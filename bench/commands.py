"""Commands as the user pays for them: a bad-input exit, ``search.report --help`` and a report, this tree
against an older one.

Each figure is a whole ``python -m search.X`` process, start-up and imports included, timed side by
side with the same command of another revision of the project (by default commit 39754de, whose
``search.report`` loaded scikit-learn at start-up through ``optuna.importance``), alternating, in one run.
The older revision is unpacked with ``git archive`` into a temporary directory and run from there
with its own ``search`` package first on ``PYTHONPATH``. Each side reports on a study its own
``search.optimize`` wrote (the same 100 trials of seed-mlp), since an older revision need not read
the settings a newer one records.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A revision whose search.report loaded scikit-learn (optuna.importance) before parsing its flags.
OLDER_REVISION = "39754de"
BAD_INPUT = ("search.optimize", "--trials", "-3")
REPORT_HELP = ("search.report", "--help")


def unpack(revision: str, directory: pathlib.Path) -> pathlib.Path:
    """The tree of ``revision`` under ``directory`` (search/ and what it needs to run)."""
    target = directory / f"tree-{revision}"
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "search"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    tar_path = directory / f"{revision}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(target, filter="data")
    return target


def _timed(tree: pathlib.Path, args: tuple[str, ...], cwd: pathlib.Path, expect: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != expect:
        raise RuntimeError(
            f"{' '.join(args)} in {tree} exited {proc.returncode}: {proc.stderr.strip()[:300]}"
        )
    return seconds


def side_by_side(
    trees: dict[str, pathlib.Path],
    args: tuple[str, ...],
    cwds: dict[str, pathlib.Path],
    expect: int,
    rounds: int,
) -> dict[str, float]:
    """Median wall seconds of ``python -m ARGS`` per tree (run in its ``cwds`` folder), the trees alternating
    in every round."""
    times: dict[str, list[float]] = {label: [] for label in trees}
    for _ in range(rounds):
        for label, tree in trees.items():
            times[label].append(_timed(tree, args, cwds[label], expect))
    return {label: statistics.median(values) for label, values in times.items()}


def command_costs(
    directory: str, revision: str = OLDER_REVISION, rounds: int = 5
) -> dict[str, dict[str, float]]:
    """{"bad input": {"now": s, "before": s}, "report --help": {...}, "report": {...}}: whole-process seconds,
    medians of ``rounds``.

    The report reads a finished 100-trial seed-mlp study that each tree's own ``search.optimize`` writes
    first.
    """
    work = pathlib.Path(directory)
    trees = {"now": ROOT, "before": unpack(revision, work)}
    studies = {label: work / f"finished-study-{label}" for label in trees}
    for label, tree in trees.items():
        studies[label].mkdir(exist_ok=True)
        _timed(tree, ("search.optimize", "--trials", "100", "--quiet"), studies[label], 0)
    return {
        "bad input": side_by_side(trees, BAD_INPUT, studies, 2, rounds),
        "report --help": side_by_side(trees, REPORT_HELP, studies, 0, rounds),
        "report": side_by_side(
            trees, ("search.report", "--study-name", "seed-mlp", "--out", "report.html"), studies, 0, rounds
        ),
    }


# Runs a command as a child subreaper and prints the CPU seconds of every process it started: the fork
# server is orphaned to this process when the command ends, and its CPU, its workers' included, counts here.
ALL_PROCESSES_CPU = """
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


def all_processes_cpu(command: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds of every process ``command`` started, wall seconds) of one whole run of it."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", ALL_PROCESSES_CPU, *command],
        check=True,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )
    return float(out.stdout.split()[-1]), time.perf_counter() - start
