"""Tasks used only by the tests: each is the seed task with one part changed to force a behaviour."""

from __future__ import annotations

from dataclasses import replace
import os
import pathlib
import time

import torch
from torch import nn

from search.tasks import Problem
from search.tasks.seed_mlp import build as build_seed


def exploding(seed: int) -> Problem:
    """A huge learning rate: the weights really diverge and the loss becomes NaN/Inf.

    GradScaler skips steps with inf gradients, so a real NaN loss needs finite but huge
    updates: lr=1e6 blows the fp16 forward pass up after one step.
    """
    return replace(build_seed(seed), make_optimizer=lambda params: torch.optim.SGD(params, lr=1e6))


MID_TRIAL_FLAG = "mid_trial.flag"
_calls = [0]


def _slow_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    time.sleep(0.05)
    _calls[0] += torch.is_grad_enabled()  # Training steps only, not the final fp32 evaluation.
    if (
        torch.is_grad_enabled() and _calls[0] % 30 == 10
    ):  # A third into each 30-epoch trial: tell the test a trial is in flight.
        pathlib.Path(MID_TRIAL_FLAG).write_text(str(os.getpid()))  # Which process is mid-trial.
    return nn.functional.cross_entropy(outputs, targets)


def slow(seed: int) -> Problem:
    """About 50 ms per step, so that a trial is still running when the test signals."""
    return replace(build_seed(seed), loss_fn=_slow_loss)


def _no_optimizer(params):
    raise RuntimeError("optimizer factory is broken on purpose")


def broken_optimizer(seed: int) -> Problem:
    """Builds fine, but every trial raises inside training."""
    return replace(build_seed(seed), make_optimizer=_no_optimizer)


def wrong_type(seed: int) -> dict:
    """Returns the wrong type: a user-task mistake that must be a one-line error."""
    return {"model": None}
