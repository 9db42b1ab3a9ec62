"""What the training loop feeds on: each step's micro-batches and the loss of one of them.

The loop (:func:`search.training._trainer.train`) is the same for both kinds of task; only this
differs:

* a :class:`~search.tasks.base.Problem` (two tensors in memory): a step's micro-batches are index
  tensors into ``inputs``/``targets`` (:func:`batch_plan`, or None for the
  full batch), indexed when the step runs, and the loss is ``loss_fn(model(x), y)``;
* a :class:`~search.tasks.LoaderProblem`: a step's micro-batches are the batches drawn once per
  process (:meth:`~search.tasks.LoaderProblem.planned`), and the loss is
  :meth:`~search.tasks.LoaderProblem.loss_of` (``model(**batch).loss`` for a dict batch).

``seed`` seeds the randomness inside each step (dropout), the same in every trial: the loop calls
``torch.manual_seed(step_seed(feed.seed, step))`` before each step.
"""

from __future__ import annotations

import contextlib
import math
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
        first_step: The global step of ``plan[0]``: the checkpoint's step when the problem starts from one,
            else 0. The batches and each step's seed are those of the run's global step.
    """

    plan: list[list[Any]]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    final_loss_fp32: Callable[[nn.Module], torch.Tensor]
    device_type: str
    seed: int
    first_step: int = 0


def step_seed(seed: int, step: int) -> int:
    """The global RNG's seed before optimizer step ``step``: the same in every trial, new at every step."""
    return (seed * 1_000_003 + step) % (2**63)


def batch_plan(
    problem: Problem, epochs: int = 0, steps: int | None = None
) -> list[list[torch.Tensor | None]]:
    """The micro-batches of every optimizer step: index tensors, or None for the full batch.

    The order comes from ``problem.shuffle_seed`` alone, so every trial sees the same batches in
    the same order (common random numbers). One optimizer step takes
    ``problem.accumulation_steps`` micro-batches of ``problem.batch_size`` samples.

    Args:
        problem: The problem.
        epochs: Passes over the data (when ``steps`` is None).
        steps: Optimizer steps instead of ``epochs`` (as many passes as they need), or None.
    """
    if steps is None and epochs < 1:
        raise ValueError(f"a run needs epochs >= 1 or steps, got epochs={epochs}, steps=None")
    n = problem.inputs.shape[0]
    if problem.batch_size is None or problem.batch_size >= n:
        per_epoch: int | None = None
    else:
        per_epoch = math.ceil(math.ceil(n / problem.batch_size) / problem.accumulation_steps)
    if steps is not None and per_epoch is not None:
        epochs = math.ceil(steps / per_epoch)
    elif steps is not None:
        epochs = steps
    if per_epoch is None:  # Full batch: one micro-batch per step (or accumulation of the same).
        plan: list[list[torch.Tensor | None]] = [[None] * problem.accumulation_steps for _ in range(epochs)]
    else:
        generator = torch.Generator().manual_seed(problem.shuffle_seed)
        plan = []
        for _ in range(epochs):
            order = torch.randperm(n, generator=generator).to(problem.inputs.device)
            micro = list(order.split(problem.batch_size))
            for i in range(0, len(micro), problem.accumulation_steps):
                plan.append(micro[i : i + problem.accumulation_steps])
    return plan[:steps] if steps is not None else plan


def seed_step(feed: Feed, step: int) -> None:
    """Seeds the global RNGs of the feed's device before ``step`` with :func:`step_seed`.

    Not ``torch.manual_seed``: it seeds every backend it knows (60 us a call here, a tenth of a
    seed-mlp step); the CPU generator alone takes 1 us, and a CUDA run seeds CUDA's too.
    """
    seed = step_seed(feed.seed, feed.first_step + step)
    torch.default_generator.manual_seed(seed)
    if feed.device_type == "cuda":
        torch.cuda.manual_seed_all(seed)


def feed_of(problem: Problem | LoaderProblem, epochs: int, steps: int | None) -> Feed:
    """The feed of one run: ``steps`` optimizer steps, or what ``epochs`` passes make (a tensor problem),
    from the problem's start (its checkpoint's global step, else 0)."""
    first = problem.start.global_step if problem.start is not None else 0
    if isinstance(problem, LoaderProblem):
        planned = problem.planned(steps or problem.steps, first)

        def loader_fp32(model: nn.Module) -> torch.Tensor:
            last = planned[-1] if planned else []
            with _eval_mode(model):
                return torch.stack([problem.eval_loss_of(model, b) for b in last]).mean()

        device = next(problem.model.parameters()).device.type
        return Feed(planned, problem.loss_of, loader_fp32, device, problem.seed, first)
    plan = batch_plan(problem, epochs, steps)
    if first:  # The run's own order of batches, from its global step on.
        plan = batch_plan(problem, steps=first + len(plan))[first:]
    inputs, targets = problem.inputs, problem.targets

    def tensor_loss(model: nn.Module, index: torch.Tensor | None) -> torch.Tensor:
        x, y = (inputs, targets) if index is None else (inputs[index], targets[index])
        return problem.loss_fn(model(x), y)

    def tensor_fp32(model: nn.Module) -> torch.Tensor:
        with _eval_mode(model):
            return problem.loss_fn(model(inputs).float(), targets)

    return Feed(plan, tensor_loss, tensor_fp32, inputs.device.type, problem.shuffle_seed, first)


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
