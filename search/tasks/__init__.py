"""Training tasks: the built-in ones by name, and user tasks as ``package.module:callable``.

A task is a callable ``build(seed: int) -> Problem``. It must be deterministic in ``seed``:
the same seed gives the same data and initial weights in every process.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable

import torch

from search.tasks.base import Problem

__all__ = ["BUILTIN_TASKS", "Problem", "TaskError", "build_problem", "resolve_task"]

Task = Callable[[int], Problem]

BUILTIN_TASKS: dict[str, str] = {
    "seed-mlp": "search.tasks.seed_mlp:build",
    "deep-mlp": "search.tasks.deep_mlp:build",
    "deep-mlp-large": "search.tasks.deep_mlp:build_large",
    "deep-mlp-spikes": "search.tasks.deep_mlp:build_spikes",
    "deep-mlp-sum": "search.tasks.deep_mlp:build_sum",
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
    _probe_loss(problem, name)
    return problem


def _probe_loss(problem: Problem, name: str) -> None:
    """One forward pass on the first batch, before any trial: the loss must be one number.

    A loss that returns per-sample values (``reduction="none"``) or raises would otherwise fail
    every trial of the run. The probe runs on a copy of the model without gradients, and restores
    the random state, so the trials see exactly what they would have seen without it.
    """
    size = problem.batch_size or len(problem.inputs)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            loss = problem.loss_fn(copy.deepcopy(problem.model)(problem.inputs[:size]), problem.targets[:size])
    except SystemExit as e:
        raise TaskError(f"task {name!r}: its loss_fn called sys.exit({e.code!r}) on the first batch")
    except Exception as e:
        raise TaskError(f"task {name!r}: its loss_fn failed on the first batch: {type(e).__name__}: {e}")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        got = f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise TaskError(
            f"task {name!r}: its loss_fn returned {got}; it must return one floating-point number as a "
            "tensor (reduce it, e.g. with .mean())"
        )
