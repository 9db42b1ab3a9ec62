"""Training tasks: the built-in ones by name, and user tasks as ``package.module:callable``.

A task is a callable ``build(seed: int) -> Problem``. It must be deterministic in ``seed``:
the same seed gives the same data and initial weights in every process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from search.tasks.base import Problem

__all__ = ["BUILTIN_TASKS", "Problem", "TaskError", "build_problem", "resolve_task"]

Task = Callable[[int], Problem]

BUILTIN_TASKS: dict[str, str] = {
    "seed-mlp": "search.tasks.seed_mlp:build",
    "deep-mlp": "search.tasks.deep_mlp:build",
    "deep-mlp-large": "search.tasks.deep_mlp:build_large",
}


class TaskError(ValueError):
    """A task name that cannot be resolved, or a task that returns the wrong thing."""


def resolve_task(name: str) -> Task:
    """Returns the task callable for a built-in name or a ``package.module:callable`` path."""
    target = BUILTIN_TASKS.get(name, name)
    if ":" not in target:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise TaskError(f"unknown task {name!r}: use one of {known} or package.module:callable")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # An import error in user code is bad input, not a crash.
        raise TaskError(f"cannot import task module {module_name!r}: {type(e).__name__}: {e}")
    task = getattr(module, attr, None)
    if not callable(task):
        raise TaskError(f"task {target!r}: {module_name} has no callable {attr!r}")
    return task


def build_problem(task: Task, name: str, seed: int) -> Problem:
    """Calls ``task(seed)`` and checks that it returned a :class:`Problem`."""
    try:
        problem = task(seed)
    except SystemExit as e:  # Not a success: a task that exits is an error, never exit 0.
        raise TaskError(f"task {name!r} called sys.exit({e.code!r}) while building")
    except Exception as e:
        raise TaskError(f"task {name!r} failed to build: {type(e).__name__}: {e}")
    if not isinstance(problem, Problem):
        raise TaskError(f"task {name!r} returned {type(problem).__name__}, expected search.tasks.Problem")
    return problem
