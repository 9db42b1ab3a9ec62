"""P1: the service's overhead per trial vs plain Optuna, both on a default SQLite file.

Overhead = wall time per trial minus training time. Plain Optuna stores 3 params + 9 user attrs
one call at a time with a trivial objective; plain Optuna on in-memory storage is the floor.
"""

from __future__ import annotations

import statistics
import time

import optuna
import torch

from search.config import DEFAULTS
from search.config import with_run
from search.optimize import make_sampler
from search.runner import Runner
from search.storage import enable_wal
from search.storage import open_storage
from search.study import prepare_study
from search.tasks.seed_mlp import build


def plain_optuna_per_trial(storage: str | None, n_trials: int) -> float:
    """Seconds per trial of plain Optuna: 3 suggests, 9 set_user_attr, trivial objective."""
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        a = trial.suggest_float("init_scale", 2.0**-20, 2.0**32, log=True)
        b = trial.suggest_float("growth_factor", 1.01, 8.0, log=True)
        c = trial.suggest_float("backoff_factor", 0.05, 0.95)
        for i in range(9):
            trial.set_user_attr(f"attr_{i}", [float(i)] * 30 if i < 2 else float(i))
        return a * 0 + b + c

    start = time.perf_counter()
    study.optimize(objective, n_trials=n_trials)
    return (time.perf_counter() - start) / n_trials


def service_overhead_per_trial(path: str, n_trials: int) -> tuple[float, float, float]:
    """(overhead per trial, overhead per sampled trial, train seconds per trial) of our runner."""
    settings = with_run(DEFAULTS, trials=n_trials, storage=f"sqlite:///{path}")
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    stamps: list[float] = []
    runner = Runner(
        handle.study,
        settings,
        problem,
        "cpu",
        torch.float16,
        sampler,
        None,
        on_trial=lambda state, value: stamps.append(time.perf_counter()),
    )
    start = time.perf_counter()
    stats = runner.run()
    wall = time.perf_counter() - start
    trials = handle.study.get_trials()
    train_s = [t.user_attrs["train_seconds"] for t in trials]
    overhead = (wall - sum(train_s)) / len(trials)
    # Sampled trials only (the 5 baselines go through ask/tell): per-trial wall minus training.
    sampled = [b - a for a, b in zip(stamps[5:], stamps[6:])]
    sampled_overhead = statistics.median(w - t for w, t in zip(sampled, train_s[6:]))
    assert stats.completed == n_trials
    storage.engine.dispose()
    return overhead, sampled_overhead, statistics.fmean(train_s)
