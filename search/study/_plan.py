"""A search run checked before a byte is written: settings, task, devices, storage, the study.

The checks run cheapest first, and those that need no torch before any that do: a typo in a flag,
a config, a task name or a SQLite path is refused in a fraction of a second (``import torch``
alone takes about 2 s), and ``--trials 0`` on a SQLite file that does not exist ends once the devices are
checked, before the task is built. Only then is the task built (its Problem is torch tensors) and the storage
opened, so that bad input leaves nothing behind. The per-trial step count
is resolved here, once, from ``--epochs``/``--steps`` and the task's own default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from search.core import Settings, UsageError, resolve_device, with_run
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
    study_attrs: dict[str, Any] = field(
        default_factory=dict
    )  # Recorded when the study is created (a diagnosis).


def plan_run(
    settings: Settings,
    allow_changed_settings: bool = False,
    worker: WorkerSpec | None = None,
    keep: Callable[[optuna.storages.RDBStorage], object] = lambda storage: storage,
    diagnosed_steps: int | None = None,
    from_diagnosis: bool = False,
    diagnosed_from: int | None = None,
) -> RunPlan:
    """Checks a run of ``settings`` and opens its storage; ``keep`` is handed the opened storage.

    Args:
        settings: The loaded settings (:func:`search.core.load_settings`).
        allow_changed_settings: Resume a study even if its recorded settings differ.
        worker: In a ``--workers`` process: its device, and no workers of its own.
        keep: Called with the storage once opened, so that the caller closes it on every path.
        diagnosed_steps: The steps a ``--from-diagnosis`` file trained: a run of other steps per trial is
            refused before anything is written (the diagnosis's growth window is about that length).
        from_diagnosis: The space was narrowed by ``--from-diagnosis``.
        diagnosed_from: The global step that diagnosis started from (its checkpoint's, else 0): a run from
            another step is refused (its gradients are another run's).

    Raises:
        NothingToRun: ``--trials 0`` and the SQLite file does not exist (said once the flags are checked,
            before the task is built).
        ConfigError, UsageError, DevicePlanError, TaskError, StorageError, IncompatibleStudyError:
            Bad input; nothing was written (a task that cannot be trained as a population: UsageError).
    """
    run = settings.run
    if worker is not None:  # A worker process: one device, no workers of its own.
        settings = with_run(settings, device=worker.device, workers=1, devices="")
        run = settings.run
    # Without Optuna or torch: the task's name, the storage URL, whether there is anything to do.
    task_target(run.task)
    from search.storage import is_read_only, sqlite_path  # SQLAlchemy's URL parser: a fifth of a second.

    path = sqlite_path(run.storage)
    from search.storage import (  # Optuna and its database layer.
        check_storage,
        open_storage,
        resolve_study_name,
    )
    from search.study._prepare import inspect_study

    read_only = is_read_only(run.storage)  # A study on read-only media is opened read-only.
    check_storage(run.storage, read_only)

    # The task is torch tensors: from here on torch is imported.
    import torch

    from search.study._workers import plan_workers
    from search.tasks import build_problem, resolve_task
    from search.training import run_steps

    resolve_device(run.device)  # Validates --device.
    specs = plan_workers(run.workers, run.device, run.devices, run.threads)
    if run.trials == 0 and path is not None and not os.path.exists(path):
        # Opening a SQLite URL creates the file and Optuna's tables: with nothing to run, nothing is made
        # (after
        # the flags are checked: a bad --device is bad input whatever the trials).
        raise NothingToRun(f"{path} does not exist and --trials is 0: nothing to do")
    # Building probes one step, whose time the cost warning multiplies by the steps of a trial: it must run on
    # the trials' threads (torch's default, one a core, is many times slower where processes share the cores).
    torch.set_num_threads(specs[0].threads)
    problem = build_problem(resolve_task(run.task), run.task, run.seed, run.checkpoint)
    if not run.epochs:  # The task's own default, recorded as such in the study.
        settings = with_run(settings, epochs=problem.epochs)
        run = settings.run
    try:
        steps_per_trial = run_steps(problem, run.epochs, run.steps)
    except ValueError as e:  # --epochs for a task that runs steps.
        raise UsageError(f"--epochs {run.epochs}: {e}") from e
    if diagnosed_steps is not None and diagnosed_steps != steps_per_trial:
        raise UsageError(
            f"--from-diagnosis: it diagnosed {diagnosed_steps} steps and this run trains {steps_per_trial} "
            "a trial (its growth window is about the run's length): diagnose with --steps "
            f"{steps_per_trial}, or search with --steps {diagnosed_steps}"
        )
    first = 0 if problem.start is None else problem.start.global_step
    if diagnosed_from is not None and diagnosed_from != first:
        raise UsageError(
            f"--from-diagnosis: it diagnosed the run from step {diagnosed_from} and this run starts at step"
            f" {first}: diagnose with this run's --checkpoint"
        )
    if run.population > 1:  # Before storage is opened: a task that cannot be stacked writes nothing.
        _check_population(settings, problem)
    _check_batch_memory(problem, steps_per_trial, run.batch_memory, run.task)
    fingerprint = problem.fingerprint(steps_per_trial)
    storage = open_storage(run.storage, run.heartbeat_interval, read_only=read_only)
    keep(storage)
    settings = with_run(settings, study_name=resolve_study_name(storage, settings))
    warnings = inspect_study(
        storage, settings, fingerprint, allow_changed_settings, steps_per_trial, from_diagnosis
    ) + _cost_warnings(problem, specs, steps_per_trial)
    return RunPlan(settings, storage, problem, fingerprint, warnings, specs, steps_per_trial, read_only)


def _check_population(settings: Settings, problem: Problem) -> None:
    import torch

    from search.training import PopulationError, check_population

    try:
        check_population(problem, getattr(torch, settings.run.amp_dtype))
    except PopulationError as e:
        raise UsageError(
            f"--population {settings.run.population}: task {settings.run.task} cannot be trained as a"
            f" population: {e}"
        ) from e


SLOW_FP16 = 3.0  # Say so when an fp16 step costs this many fp32 steps on the CPU,
SLOW_TRIAL = 10.0  # and a trial would take this many seconds.


def _cost_warnings(problem: Problem, specs: list[WorkerSpec], steps: int) -> list[str]:
    """What the probe's step says of the cost on the CPU: fp16 much slower than fp32 (no fast kernels)."""
    from search.tasks import step_cost

    cost = step_cost(problem)
    if (
        cost is None
        or any(spec.device != "cpu" for spec in specs)
        or not cost.fp16_seconds >= SLOW_FP16 * cost.fp32_seconds
    ):
        return []  # (nan fp32: the fp16 step was fast; the comparison is False.)
    per_trial = cost.fp16_seconds * steps
    if per_trial < SLOW_TRIAL:
        return []
    return [
        f"one step of this task took {cost.fp16_seconds:.2g} s under fp16 autocast against"
        f" {cost.fp32_seconds:.2g} s in fp32 on this CPU ({cost.fp16_seconds / cost.fp32_seconds:.0f}x: CPUs"
        f" lack fast fp16 kernels, e.g. for convolutions); a trial of {steps} steps will take about"
        f" {_duration(per_trial)}: a GPU (--device cuda) or fewer --steps makes the search practical"
    ]


def _check_batch_memory(problem: Problem, steps: int, limit_mib: float, task: str) -> None:
    """A loader task's batches are drawn once and held for every trial: refuses more than ``limit_mib``."""
    from search.tasks import BatchError, LoaderProblem

    if not isinstance(problem, LoaderProblem):
        return
    try:
        size = problem.planned_bytes(steps) / 2**20
    except BatchError as e:
        raise UsageError(f"task {task!r}: {e}") from e
    if size > limit_mib:
        raise UsageError(
            f"the batches of {steps} steps (and the evaluation's) take {size:,.0f} MiB, held once per"
            f" process, over --batch-memory {limit_mib:g}: raise it, or run fewer --steps"
        )


def _duration(seconds: float) -> str:
    """``45 s``, ``10 min``, ``3.2 h``: as a person reads a wait."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
