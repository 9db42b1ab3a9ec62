"""What the training loop feeds on: each step's micro-batches and the loss of one of them.

The loop (:func:`search.training._trainer.train`) is the same for both kinds of task; only this
differs:

* a :class:`~search.tasks.base.Problem` (two tensors in memory): a step's micro-batches are index
  tensors into ``inputs``/``targets`` (:func:`search.training._trainer.batch_plan`, or None for the
  full batch), indexed when the step runs, and the loss is ``loss_fn(model(x), y)``;
* a :class:`~search.tasks.LoaderProblem`: a step's micro-batches are the batches drawn once per
  process (:meth:`~search.tasks.LoaderProblem.planned`), and the loss is
  :meth:`~search.tasks.LoaderProblem.loss_of` (``model(**batch).loss`` for a dict batch).

``seed`` seeds the randomness inside each step (dropout), the same in every trial: the loop calls
``torch.manual_seed(step_seed(feed.seed, step))`` before each step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from search.tasks import LoaderProblem, Problem


@dataclass(frozen=True)
class Feed:
    """One run's batches and loss.

    Attributes:
        plan: Per optimizer step, its micro-batches (what ``loss`` takes).
        loss: ``loss(model, micro_batch)``: the training loss, under the caller's autocast.
        final_loss_fp32: The final weights' training loss in fp32 without autocast, in eval mode (a
            forward in train mode would move BatchNorm's running statistics before the evaluation):
            on the whole training data (Problem), or the mean over the last step's batches (LoaderProblem).
        device_type: ``cpu`` or ``cuda``, for autocast and GradScaler.
        seed: Seeds each step's randomness (:func:`step_seed`).
    """

    plan: list[list[Any]]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    final_loss_fp32: Callable[[nn.Module], torch.Tensor]
    device_type: str
    seed: int


def step_seed(seed: int, step: int) -> int:
    """The global RNG's seed before optimizer step ``step``: the same in every trial, new at every step."""
    return (seed * 1_000_003 + step) % (2**63)


def seed_step(feed: Feed, step: int) -> None:
    """Seeds the global RNGs of the feed's device before ``step`` with :func:`step_seed`.

    Not ``torch.manual_seed``: it seeds every backend it knows (60 us a call here, a tenth of a
    seed-mlp step); the CPU generator alone takes 1 us, and a CUDA run seeds CUDA's too.
    """
    seed = step_seed(feed.seed, step)
    torch.default_generator.manual_seed(seed)
    if feed.device_type == "cuda":
        torch.cuda.manual_seed_all(seed)


def feed_of(problem: Problem | LoaderProblem, plan: list[list[Any]] | None, steps: int) -> Feed:
    """The feed of one run of ``steps`` steps (``plan``: a tensor problem's :func:`batch_plan`)."""
    if isinstance(problem, LoaderProblem):
        planned = problem.planned(steps)

        def loader_fp32(model: nn.Module) -> torch.Tensor:
            last = planned[-1] if planned else []
            with _eval_mode(model):
                return torch.stack([problem.eval_loss_of(model, b) for b in last]).mean()

        device = next(problem.model.parameters()).device.type
        return Feed(planned, problem.loss_of, loader_fp32, device, problem.seed)
    assert plan is not None
    inputs, targets = problem.inputs, problem.targets

    def tensor_loss(model: nn.Module, index: torch.Tensor | None) -> torch.Tensor:
        x, y = (inputs, targets) if index is None else (inputs[index], targets[index])
        return problem.loss_fn(model(x), y)

    def tensor_fp32(model: nn.Module) -> torch.Tensor:
        with _eval_mode(model):
            return problem.loss_fn(model(inputs).float(), targets)

    return Feed(plan, tensor_loss, tensor_fp32, inputs.device.type, problem.shuffle_seed)


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """No gradients, eval mode (BatchNorm's running statistics untouched, no dropout), train mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)
