"""Commands as the user pays for them: a bad-input exit and a report, this tree against an older one.

Each figure is a whole ``python -m search.X`` process, start-up and imports included, timed side by
side with the same command of another revision of the project (by default commit f4927a2, whose commands
imported torch at start-up), alternating, in one run.
The older revision is unpacked with ``git archive`` into a temporary directory and run from there
with its own ``search`` package first on ``PYTHONPATH``; both read the same finished study.
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
# A revision whose commands all imported torch before parsing their flags.
OLDER_REVISION = "f4927a2"
BAD_INPUT = ("search.optimize", "--trials", "-3")


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
        raise RuntimeError(f"{' '.join(args)} in {tree} exited {proc.returncode}: {proc.stderr.strip()[:300]}")
    return seconds


def side_by_side(
    trees: dict[str, pathlib.Path], args: tuple[str, ...], cwd: pathlib.Path, expect: int, rounds: int
) -> dict[str, float]:
    """Median wall seconds of ``python -m ARGS`` per tree, the trees alternating in every round."""
    times: dict[str, list[float]] = {label: [] for label in trees}
    for _ in range(rounds):
        for label, tree in trees.items():
            times[label].append(_timed(tree, args, cwd, expect))
    return {label: statistics.median(values) for label, values in times.items()}


def command_costs(directory: str, revision: str = OLDER_REVISION, rounds: int = 5) -> dict[str, dict[str, float]]:
    """{"bad input": {"now": s, "before": s}, "report": {...}}: whole-process seconds, medians of ``rounds``.

    The report reads a finished 100-trial seed-mlp study that this tree's ``search.optimize`` writes first.
    """
    work = pathlib.Path(directory)
    trees = {"now": ROOT, "before": unpack(revision, work)}
    study_dir = work / "finished-study"
    study_dir.mkdir(exist_ok=True)
    _timed(ROOT, ("search.optimize", "--trials", "100", "--quiet"), study_dir, 0)
    return {
        "bad input": side_by_side(trees, BAD_INPUT, study_dir, 2, rounds),
        "report": side_by_side(
            trees, ("search.report", "--study-name", "seed-mlp", "--out", "report.html"), study_dir, 0, rounds
        ),
    }
