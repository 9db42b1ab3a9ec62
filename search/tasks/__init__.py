"""Training tasks: the built-in ones by name, and user tasks as ``package.module:callable``.

A task is a callable ``build(seed: int) -> Problem``. It must be deterministic in ``seed``:
the same seed gives the same data and initial weights in every process.

* ``base``: the :class:`Problem` interface (two tensors);
* ``_loader``: the :class:`LoaderProblem` one (batches drawn from a DataLoader);
* ``_resolve``: a task's name turned into the task, without importing torch;
* ``_build``: building and checking the Problem;
* ``_start``: the state of the user's run that trials continue from (:class:`StartState`);
* ``_checkpoints``: reading it from a Hugging Face Trainer, a Lightning or a plain checkpoint;
* ``seed_mlp``, ``deep_mlp``, ``sum_outliers``, ``late_mlp``: the built-in tasks (named in ``_resolve``'s
  ``BUILTIN_TASKS``).
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.tasks._resolve import BUILTIN_TASKS, Task, TaskError, resolve_task, task_target

if TYPE_CHECKING:  # Loaded on first use: base, _loader, _build, _start and _checkpoints import torch.
    from search.tasks._build import StepCost, build_problem, probe_step, step_cost
    from search.tasks._checkpoints import read_checkpoint
    from search.tasks._loader import BatchError, LoaderProblem
    from search.tasks._start import CheckpointError, StartState, start_from
    from search.tasks.base import Problem, SchedulerFactory

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "BUILTIN_TASKS",
    "BatchError",
    "CheckpointError",
    "LoaderProblem",
    "Problem",
    "SchedulerFactory",
    "StartState",
    "StepCost",
    "Task",
    "TaskError",
    "build_problem",
    "probe_step",
    "read_checkpoint",
    "resolve_task",
    "start_from",
    "step_cost",
    "task_target",
]
