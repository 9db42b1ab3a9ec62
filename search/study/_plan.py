"""A search run checked before a byte is written: settings, task, devices, storage, the study.

The checks run cheapest first, and those that need no torch before any that do: a typo in a flag,
a config, a task name or a SQLite path is refused in a fraction of a second (``import torch``
alone takes about 2 s). Only then is the task built (its Problem is torch tensors), the devices
resolved and the storage opened, so that bad input leaves nothing behind. The per-trial step count
is resolved here, once, from ``--epochs``/``--steps`` and the task's own default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.core import Settings, UsageError, resolve_device, with_run
from search.storage import check_storage, is_read_only, open_storage, sqlite_path
from search.study._prepare import inspect_study, resolve_study_name
from search.tasks import task_target

if TYPE_CHECKING:
    import optuna

    from search.study._workers import WorkerSpec
    from search.tasks import Problem


class NothingToRun(Exception):
    """--trials 0 on a study that does not exist: a success that writes nothing."""


@dataclass(frozen=True)
class RunPlan:
    """Everything validated before a single byte is written."""

    settings: Settings  # The study name resolved, and ``epochs`` the task's default when 0 was given.
    storage: optuna.storages.RDBStorage
    problem: Problem
    fingerprint: str
    warnings: list[str]  # About resuming the study (changed settings), for the user.
    specs: list[WorkerSpec]
    steps_per_trial: int  # Optimizer steps of every trial: --steps, or what the epochs make.
    read_only: bool = False  # A SQLite file on read-only media: only a finished study can be shown.


def plan_run(
    settings: Settings,
    allow_changed_settings: bool = False,
    worker: WorkerSpec | None = None,
    keep: Callable[[optuna.storages.RDBStorage], object] = lambda storage: storage,
) -> RunPlan:
    """Checks a run of ``settings`` and opens its storage; ``keep`` is handed the opened storage.

    Args:
        settings: The loaded settings (:func:`search.core.load_settings`).
        allow_changed_settings: Resume a study even if its recorded settings differ.
        worker: In a ``--workers`` process: its device, and no workers of its own.
        keep: Called with the storage once opened, so that the caller closes it on every path.

    Raises:
        NothingToRun: ``--trials 0`` and the SQLite file does not exist.
        ConfigError, UsageError, DevicePlanError, TaskError, StorageError, IncompatibleStudyError:
            Bad input; nothing was written (a task that cannot be trained as a population: UsageError).
    """
    run = settings.run
    if worker is not None:  # A worker process: one device, no workers of its own.
        settings = with_run(settings, device=worker.device, workers=1, devices="")
        run = settings.run
    # Without torch: the task's name, the storage URL and its SQLite file.
    task_target(run.task)
    read_only = is_read_only(run.storage)  # A study on read-only media is opened read-only.
    check_storage(run.storage, read_only)

    # The task is torch tensors: from here on torch is imported.
    from search.study._workers import plan_workers
    from search.tasks import build_problem, resolve_task
    from search.training import run_steps

    resolve_device(run.device)  # Validates --device.
    specs = plan_workers(run.workers, run.device, run.devices, run.threads)
    problem = build_problem(resolve_task(run.task), run.task, run.seed)
    if not run.epochs:  # The task's own default, recorded as such in the study.
        settings = with_run(settings, epochs=problem.epochs)
        run = settings.run
    steps_per_trial = run_steps(problem, run.epochs, run.steps)
    if run.population > 1:  # Before storage is opened: a task that cannot be stacked writes nothing.
        _check_population(settings, problem)
    fingerprint = problem.fingerprint()
    path = sqlite_path(run.storage)
    if run.trials == 0 and path is not None and not os.path.exists(path):
        # Opening a SQLite URL creates the file and Optuna's tables: with nothing to run, nothing is made.
        raise NothingToRun(f"{path} does not exist and --trials is 0: nothing to do")
    storage = open_storage(run.storage, run.heartbeat_interval, read_only=read_only)
    keep(storage)
    settings = with_run(settings, study_name=resolve_study_name(storage, settings))
    warnings = inspect_study(storage, settings, fingerprint, allow_changed_settings)
    return RunPlan(settings, storage, problem, fingerprint, warnings, specs, steps_per_trial, read_only)


def _check_population(settings: Settings, problem: Problem) -> None:
    import torch

    from search.training import PopulationError, check_population

    try:
        check_population(problem, getattr(torch, settings.run.amp_dtype))
    except PopulationError as e:
        raise UsageError(
            f"--population {settings.run.population}: task {settings.run.task} cannot be trained as a population: {e}"
        ) from e
