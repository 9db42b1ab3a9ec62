"""S, study size: the cost of one more trial in a study of 0, 1,000, 2,500 and 4,900 trials.

Each arm builds one study on a SQLite file and measures 100 one-step trials sampled by TPE at each
size. Between the windows the study grows with random-sampled trials (same code path, no TPE), so
the run takes minutes rather than the hour that 5,000 TPE trials would: TPE's cost grows with every
trial in the history, whichever sampler wrote it. TPE's own sampling (its calls on the sampler,
timed where Optuna calls them) is reported on its own line, so that what is Optuna's and what is
the service's can be told apart:

* the service: the trial loop (``search.study.Runner``) on seed-mlp, one epoch (one full-batch
  step) a trial; its overhead is wall time minus training minus TPE's sampling;
* plain Optuna: ``study.optimize`` on the same kind of file with the same four distributions, the
  same user attrs and the same one-point curve as the service stores for a trial, and no training
  (``bench.p1_overhead.plain_same_values_per_trial``'s objective): its whole trial, and the same
  less TPE's sampling.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import optuna
import torch
from optuna.trial import FrozenTrial, TrialState

from search.core import DEFAULTS, suggest, with_run
from search.storage import enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.tasks.base import Problem
from search.tasks.seed_mlp import build
from search.training import run_steps

WINDOW = 100
SIZES = (0, 1000, 2500, 4900)  # Trials in the study before each window of 100 TPE trials.
_SAMPLING = ("infer_relative_search_space", "sample_relative", "sample_independent")


@dataclass(frozen=True)
class Window:
    """Medians over one window of TPE trials, in seconds a trial."""

    size: int  # Trials in the study when the window starts.
    wall: float  # Whole trial (the service: the loop's time from one trial to the next).
    sampling: float  # TPE's own calls.
    train: float  # Training (0 for plain Optuna).

    @property
    def overhead(self) -> float:
        """Wall less training less TPE's sampling: the bookkeeping around a trial."""
        return self.wall - self.train - self.sampling


def _timed(sampler: optuna.samplers.BaseSampler, spent: list[float]) -> optuna.samplers.BaseSampler:
    """``sampler``, its sampling calls adding their seconds to ``spent[-1]`` (the trial in flight)."""
    for name in _SAMPLING:
        method = getattr(sampler, name)

        def timed(*args, _method: Callable = method, **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[-1] += time.perf_counter() - start

        setattr(sampler, name, timed)
    return sampler


def service_windows(path: str, sizes: tuple[int, ...] = SIZES) -> tuple[list[Window], FrozenTrial]:
    """The service's windows, and its last trial (the template of plain Optuna's values)."""
    problem = build(DEFAULTS.run.seed)
    storage = open_storage(f"sqlite:///{path}")
    enable_wal(storage)
    windows = []
    for size in sizes:
        stamps: list[float] = []
        spent = [0.0]
        sampler = _timed(make_sampler("tpe", size), spent)

        def stamp(state: TrialState, value: float | None) -> None:
            stamps.append(time.perf_counter())
            spent.append(0.0)

        filled = _service_run(storage, path, problem, size, make_sampler("random", size), None)
        before = len(filled.get_trials(deepcopy=False))
        stamps.append(time.perf_counter())
        study = _service_run(storage, path, problem, before + WINDOW, sampler, stamp)
        train = [t.user_attrs["train_seconds"] for t in study.get_trials(deepcopy=False)[before:]]
        walls = [b - a for a, b in zip(stamps, stamps[1:])]
        # The first trial of a run also syncs the whole study into the sampler's replica: left out.
        windows.append(
            Window(
                before,
                statistics.median(walls[1:]),
                statistics.median(spent[1:-1]),
                statistics.median(train[1:]),
            )
        )
    last = study.get_trials(deepcopy=False)[-1]
    storage.engine.dispose()
    return windows, last


def _service_run(
    storage: optuna.storages.BaseStorage,
    path: str,
    problem: Problem,
    trials: int,
    sampler: optuna.samplers.BaseSampler,
    on_trial: Callable[[TrialState, float | None], None] | None,
) -> optuna.Study:
    """The trial loop resumed on the study at ``path`` until it holds ``trials`` finished trials."""
    settings = with_run(DEFAULTS, trials=trials, epochs=1, storage=f"sqlite:///{path}")
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    steps = run_steps(problem, settings.run.epochs, settings.run.steps)
    Runner(handle.study, settings, problem, "cpu", torch.float16, sampler, None, on_trial, steps=steps).run()
    return handle.study


def plain_windows(path: str, template: FrozenTrial, sizes: tuple[int, ...] = SIZES) -> list[Window]:
    """Plain Optuna's windows: ``study.optimize`` storing ``template``'s values, TPE timed apart."""
    study = optuna.create_study(storage=f"sqlite:///{path}", study_name="plain")
    space = DEFAULTS.space
    spent = [0.0]
    stamps: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        suggest(trial, space)
        for key, value in template.user_attrs.items():
            trial.set_user_attr(key, value)
        for step, value in sorted(template.intermediate_values.items()):
            trial.report(value, step)
        assert template.value is not None
        return template.value

    def stamp(study: optuna.Study, trial: FrozenTrial) -> None:
        stamps.append(time.perf_counter())
        spent.append(0.0)

    windows = []
    for size in sizes:
        study.sampler = optuna.samplers.RandomSampler(seed=size)
        study.optimize(objective, n_trials=max(0, size - len(study.get_trials(deepcopy=False))))
        study.sampler = _timed(optuna.samplers.TPESampler(seed=size), spent)
        stamps[:], spent[:] = [time.perf_counter()], [0.0]
        study.optimize(objective, n_trials=WINDOW, callbacks=[stamp])
        walls = [b - a for a, b in zip(stamps, stamps[1:])]
        windows.append(Window(size, statistics.median(walls[1:]), statistics.median(spent[1:-1]), 0.0))
    return windows


def study_size(directory: str, sizes: tuple[int, ...] = SIZES) -> tuple[list[Window], list[Window]]:
    """Both arms, the service's first (its last trial is plain Optuna's template)."""
    ours, template = service_windows(os.path.join(directory, "size.db"), sizes)
    return ours, plain_windows(os.path.join(directory, "plain-size.db"), template, sizes)
