"""A task whose trials mostly sleep: seed-mlp, 4 steps, each waiting 0.1 s in its loss (as a trial waits on
a GPU or a data loader), so that many workers on 2 cores measure the bookkeeping and the database, not
the training. ``--task bench.sleepy:build``."""

from __future__ import annotations

import time
from dataclasses import replace

import torch
from torch import nn

from search.tasks.base import Problem
from search.tasks.seed_mlp import build as build_seed

STEP_SECONDS = 0.1
STEPS = 4


def _sleepy_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled():  # Training steps only, not the evaluation.
        time.sleep(STEP_SECONDS)
    return nn.functional.cross_entropy(outputs, targets)


def build(seed: int) -> Problem:
    """seed-mlp with :data:`STEPS` full-batch steps of :data:`STEP_SECONDS` asleep each."""
    return replace(build_seed(seed), loss_fn=_sleepy_loss, epochs=STEPS)
