"""Scaling: time per trial as the steps per trial grow (the study's size: bench/study_size.py)."""

from __future__ import annotations

import os
import statistics
import time

import optuna
import torch

from search.core import DEFAULTS, with_run
from search.storage import enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.tasks.seed_mlp import build
from search.training import run_steps


def _run(path: str, trials: int, epochs: int) -> tuple[list[float], list[float]]:
    """(wall seconds per trial, train seconds per trial) of the trial loop on a new SQLite study."""
    settings = with_run(DEFAULTS, trials=trials, epochs=epochs, storage=f"sqlite:///{path}")
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    stamps = [time.perf_counter()]
    Runner(
        handle.study,
        settings,
        problem,
        "cpu",
        torch.float16,
        sampler,
        None,
        on_trial=lambda state, value: stamps.append(time.perf_counter()),
        steps=run_steps(problem, settings.run.epochs, settings.run.steps),
    ).run()
    trials = handle.study.get_trials()
    storage.engine.dispose()
    walls = [b - a for a, b in zip(stamps, stamps[1:])]
    return walls, [t.user_attrs["train_seconds"] for t in trials]


def per_trial_vs_steps(
    directory: str, epochs: tuple[int, ...], trials: int
) -> list[tuple[int, float, float]]:
    """(epochs, median wall s/trial, median train s/trial) on seed-mlp (full batch: steps = epochs)."""
    rows = []
    for e in epochs:
        walls, train = _run(os.path.join(directory, f"steps{e}.db"), trials, e)
        rows.append((e, statistics.median(walls[5:]), statistics.median(train[5:])))  # Sampled trials.
    return rows
