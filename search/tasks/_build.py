"""Building a task's :class:`~search.tasks.base.Problem`, and checking it before any trial runs."""

from __future__ import annotations

import copy

import torch

from search.tasks._resolve import Task, TaskError
from search.tasks.base import Problem


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
