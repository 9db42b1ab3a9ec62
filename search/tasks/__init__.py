"""Training tasks: the built-in ones by name, and user tasks as ``package.module:callable``.

A task is a callable ``build(seed: int) -> Problem``. It must be deterministic in ``seed``:
the same seed gives the same data and initial weights in every process.

* ``base``: the :class:`Problem` interface (two tensors);
* ``_loader``: the :class:`LoaderProblem` one (batches drawn from a DataLoader);
* ``_resolve``: a task's name turned into the task, without importing torch;
* ``_build``: building and checking the Problem;
* ``seed_mlp``, ``deep_mlp``, ``sum_outliers``: the built-in tasks (named in ``_resolve``'s
  ``BUILTIN_TASKS``).
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.tasks._resolve import BUILTIN_TASKS, Task, TaskError, resolve_task, task_target

if TYPE_CHECKING:  # Loaded on first use: base, _loader and _build import torch.
    from search.tasks._build import StepCost, build_problem, probe_step, step_cost
    from search.tasks._loader import BatchError, LoaderProblem
    from search.tasks.base import Problem

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "BUILTIN_TASKS",
    "BatchError",
    "LoaderProblem",
    "Problem",
    "StepCost",
    "Task",
    "TaskError",
    "build_problem",
    "probe_step",
    "resolve_task",
    "step_cost",
    "task_target",
]
