"""The evaluation every trial of a study is judged on, computed one way for all of them.

A trial's training loss is a poor judge on a mini-batch task: the last step's loss is one batch's
loss, so which setting looks best depends on which batch came last. Every trial is therefore
judged on the same evaluation of its *final weights*:

* **the evaluation set**: the task's validation data (``Problem.eval_inputs``/``eval_targets``)
  when it has some, else the whole training data; a :class:`~search.tasks.LoaderProblem`'s
  ``eval_batches``, else its training batches of one pass (each batch a chunk, the whole their mean);
* **the evaluation loss**: ``Problem.eval_fn(model, inputs, targets)`` when the task gives one,
  else ``loss_fn`` on the model's fp32 outputs, without autocast, under ``torch.no_grad()``.

The set is also cut into fixed *chunks* (of ``Problem.batch_size`` samples, or one chunk), each
evaluated the same way: ``learned`` compares the **median chunk loss** of the final weights with
that of the initial weights (computed once per problem: every trial starts from them). A mean is
dominated by a few outlier records a model cannot fit (0.3% of records with 100x targets can carry
most of a data set's MSE), so it can stay flat while the model learns everything else; a median
over chunks is decided by the typical chunk, and still compares the same quantity before and after.

**Full-batch tasks without validation data or an eval function** keep the original example's
definition (:data:`LAST_STEP`, docs/fairness.md): every optimizer step's forward pass already evaluates
the whole training data, under autocast, identically in every trial, so the evaluation loss is the last
step's loss and the initial one is the first step's (both from the loss curve, no extra pass).
"""

from __future__ import annotations

import statistics
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from search.tasks import LoaderProblem, Problem

LAST_STEP = "last_step"  # Full batch: the last step's whole-data loss (the original example's final loss).
FINAL_WEIGHTS = "final_weights"  # The final weights' loss on the evaluation set, in fp32.


@dataclass(frozen=True)
class Evaluation:
    """One model's evaluation.

    Attributes:
        loss: The loss on the whole evaluation set (nan/inf kept as they are).
        median_chunk_loss: The median of the chunk losses (see the module docstring).
    """

    loss: float
    median_chunk_loss: float


def _last_step_evaluations(loss_curve: list[float]) -> tuple[Evaluation, Evaluation]:
    """The initial and final :class:`Evaluation` of a :data:`LAST_STEP` run: its first and last step's loss.
    """
    first = loss_curve[0] if loss_curve else float("nan")
    last = loss_curve[-1] if loss_curve else float("nan")
    return Evaluation(first, first), Evaluation(last, last)


def evaluation_mode(problem: Problem | LoaderProblem) -> str:
    """:data:`LAST_STEP` for a full-batch task with no validation data or eval function, else
    :data:`FINAL_WEIGHTS`."""
    if isinstance(problem, LoaderProblem):
        return FINAL_WEIGHTS
    full_batch = problem.batch_size is None or problem.batch_size >= len(problem.inputs)
    if full_batch and problem.eval_inputs is None and problem.eval_fn is None:
        return LAST_STEP
    return FINAL_WEIGHTS


def _loss(problem: Problem, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if problem.eval_fn is not None:
        return problem.eval_fn(model, inputs, targets)
    return problem.loss_fn(model(inputs).float(), targets)


def evaluate(problem: Problem | LoaderProblem, model: nn.Module) -> Evaluation:
    """Evaluates ``model`` on the problem's evaluation set (one host read at the end).

    Args:
        problem: The problem (its evaluation set on the model's device).
        model: Its weights; put in eval mode for the evaluation and back in train mode after.
    """
    return evaluation_of(evaluation_values(problem, model).tolist())


def evaluation_values(problem: Problem | LoaderProblem, model: nn.Module) -> torch.Tensor:
    """:func:`evaluate`'s numbers still on the device: the whole set's loss, then each chunk's.

    For callers that evaluate many models and read the host once for all of them (population mode).
    """
    was_training = model.training
    model.eval()
    try:
        if isinstance(problem, LoaderProblem):  # The batches are the chunks; the whole is their mean.
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                chunks = torch.stack(
                    [problem.eval_loss_of(model, b).reshape(()) for b in problem.evaluation_batches()]
                )
                return torch.cat([chunks.mean().reshape(1), chunks])
        inputs, targets = problem.evaluation_set()
        chunk = problem.batch_size if problem.batch_size is not None else len(inputs)
        with torch.no_grad():
            whole = _loss(problem, model, inputs, targets).float()
            if chunk >= len(inputs):
                chunks = whole.reshape(1)
            else:
                chunks = torch.stack(
                    [
                        _loss(problem, model, x, y).float()
                        for x, y in zip(inputs.split(chunk), targets.split(chunk))
                    ]
                )
            return torch.cat([whole.reshape(1), chunks.reshape(-1)])
    finally:
        model.train(was_training)


def evaluation_of(values: list[float]) -> Evaluation:
    """The :class:`Evaluation` of :func:`evaluation_values` read to the host."""
    return Evaluation(loss=values[0], median_chunk_loss=statistics.median(values[1:]))


# One entry per live problem: the initial weights are the same for every trial of a study.
_INITIAL: dict[int, tuple[weakref.ref, Evaluation]] = {}


def initial_evaluation(problem: Problem | LoaderProblem) -> Evaluation:
    """The evaluation of the problem's initial weights, computed once per problem object."""
    cached = _INITIAL.get(id(problem))
    if cached is not None and cached[0]() is problem:
        return cached[1]
    result = evaluate(problem, problem.model)
    _INITIAL[id(problem)] = (
        weakref.ref(problem, lambda _ref, key=id(problem): _INITIAL.pop(key, None)),
        result,
    )
    return result
