"""Task names: the built-in tasks, and a task of your own as ``package.module:callable``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from search.tasks.base import Problem

Task = Callable[[int], "Problem"]

BUILTIN_TASKS: dict[str, str] = {
    "seed-mlp": "search.tasks.seed_mlp:build",
    "deep-mlp": "search.tasks.deep_mlp:build",
    "deep-mlp-large": "search.tasks.deep_mlp:build_large",
    "deep-mlp-spikes": "search.tasks.deep_mlp:build_spikes",
    "deep-mlp-sum": "search.tasks.deep_mlp:build_sum",
    "sum-outliers": "search.tasks.sum_outliers:build",
    "late-mlp": "search.tasks.late_mlp:build",
}


class TaskError(ValueError):
    """A task name that cannot be resolved, or a task that returns the wrong thing."""


def task_target(name: str) -> str:
    """The ``package.module:callable`` a task name stands for, without importing it (nor torch).

    Raises:
        TaskError: Neither a built-in name nor a ``package.module:callable`` path.
    """
    target = BUILTIN_TASKS.get(name, name)
    if ":" not in target:
        known = ", ".join(sorted(BUILTIN_TASKS))
        raise TaskError(f"unknown task {name!r}: use one of {known} or package.module:callable")
    return target


def resolve_task(name: str) -> Task:
    """Returns the task callable for a built-in name or a ``package.module:callable`` path."""
    target = task_target(name)
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # An import error in user code is bad input, not a crash.
        raise TaskError(f"cannot import task module {module_name!r}: {type(e).__name__}: {e}")
    task = getattr(module, attr, None)
    if not callable(task):
        raise TaskError(f"task {target!r}: {module_name} has no callable {attr!r}")
    return task
