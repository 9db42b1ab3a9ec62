"""Tasks used only by the tests: each forces one behaviour of the search service."""

from __future__ import annotations

import time

import torch
from torch import nn

from search.tasks import Problem
from search.tasks.seed_mlp import build as build_seed


def exploding(seed: int) -> Problem:
    """The seed task with a huge learning rate: the weights really diverge to NaN/Inf.

    GradScaler skips steps with inf gradients, so a real NaN loss needs finite but huge
    updates: lr=1e6 blows the weights up within a few steps.
    """
    problem = build_seed(seed)
    return Problem(
        model=problem.model,
        inputs=problem.inputs,
        targets=problem.targets,
        loss_fn=problem.loss_fn,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=1e6),
        epochs=problem.epochs,
    )


def _slow_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    time.sleep(0.05)
    return nn.functional.cross_entropy(outputs, targets)


def slow(seed: int) -> Problem:
    """The seed task at about 50 ms per step, so that a trial is still running when signalled."""
    problem = build_seed(seed)
    return Problem(
        model=problem.model,
        inputs=problem.inputs,
        targets=problem.targets,
        loss_fn=_slow_loss,
        make_optimizer=problem.make_optimizer,
        epochs=problem.epochs,
    )


def _no_optimizer(params):
    raise RuntimeError("optimizer factory is broken on purpose")


def broken_optimizer(seed: int) -> Problem:
    """Builds fine, but every trial raises inside training."""
    problem = build_seed(seed)
    return Problem(
        model=problem.model,
        inputs=problem.inputs,
        targets=problem.targets,
        loss_fn=problem.loss_fn,
        make_optimizer=_no_optimizer,
        epochs=problem.epochs,
    )


def wrong_type(seed: int) -> dict:
    """Returns the wrong type: a user-task mistake that must be a one-line error."""
    return {"model": None}
