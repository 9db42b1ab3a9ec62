"""Building a task's problem, and checking it with one real step before any trial runs."""

from __future__ import annotations

import copy
import math
import time
import weakref
from dataclasses import dataclass

import torch

from search.tasks._checkpoints import read_checkpoint
from search.tasks._loader import LoaderProblem
from search.tasks._resolve import Task, TaskError
from search.tasks._start import start_from
from search.tasks.base import Problem


@dataclass(frozen=True)
class StepCost:
    """What one optimizer step of a task cost in the start-up probe, on the CPU: under fp16 autocast and in
    fp32.

    CPUs lack fast fp16 kernels for some operations (a torchvision resnet18 step at batch 64: 29.7 s under
    fp16 autocast against 0.28 s in fp32 here), so a search a user would wait hours for is said before it
    starts.
    """

    fp16_seconds: float
    fp32_seconds: float  # nan: not timed (the fp16 step took under SLOW_STEP).


SLOW_STEP = 0.1  # Seconds of the probe's fp16 step from which its fp32 step is timed too.
_COSTS: dict[int, tuple[weakref.ref, StepCost]] = {}


def step_cost(problem: Problem | LoaderProblem) -> StepCost | None:
    """The probe's timing of ``problem`` (built by :func:`build_problem` in this process), or None."""
    entry = _COSTS.get(id(problem))
    return entry[1] if entry is not None and entry[0]() is problem else None


def build_problem(task: Task, name: str, seed: int, checkpoint: str = "") -> Problem | LoaderProblem:
    """Calls ``task(seed)``, checks that it returned a problem, continues it from ``checkpoint`` when one is
    given (:func:`~search.tasks.read_checkpoint`; "": from the initial weights), and probes it
    (:func:`probe_step`).

    Raises:
        TaskError: The task cannot be built or trained; :class:`~search.tasks.CheckpointError` (a TaskError):
            the checkpoint cannot be read or does not fit the task's model.
    """
    try:
        problem = task(seed)
    except SystemExit as e:  # Not a success: a task that exits is an error, never exit 0.
        raise TaskError(f"task {name!r} called sys.exit({e.code!r}) while building")
    except Exception as e:
        raise TaskError(f"task {name!r} failed to build: {type(e).__name__}: {e}")
    if not isinstance(problem, (Problem, LoaderProblem)):
        raise TaskError(
            f"task {name!r} returned {type(problem).__name__}, expected search.tasks.Problem or LoaderProblem"
        )
    if checkpoint:
        problem = start_from(problem, read_checkpoint(checkpoint))
    cost = probe_step(problem, name)
    _COSTS[id(problem)] = (weakref.ref(problem, lambda _ref, key=id(problem): _COSTS.pop(key, None)), cost)
    return problem


def probe_step(problem: Problem | LoaderProblem, name: str) -> StepCost:
    """One real step on the first batch, the way a trial takes it: forward and loss under fp16
    autocast, backward, then the final evaluation's forward (fp32, no autocast, eval mode).

    A task that cannot train (a loss of per-sample values, a model that returns an object the loss
    cannot read, a dict batch without labels) then fails once, here, with one line, instead of in
    every trial. The step runs on a copy of the model, with the global RNG restored afterwards, so
    the trials see exactly what they would have seen without it. Then the same forward, loss and
    backward in fp32, on another copy: the two timings are returned (:class:`StepCost`).
    """
    model = copy.deepcopy(problem.model)
    start = time.perf_counter()
    what = "loss" if isinstance(problem, LoaderProblem) else "loss_fn"
    try:
        with torch.random.fork_rng(devices=[]):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = _first_loss(problem, model, name)
            _check_loss(loss, name, what)
            what = "backward"
            loss.float().backward()
            fp16 = time.perf_counter() - start
            what = "evaluation"
            _check_loss(_first_evaluation(problem, model), name, what)
        fp32 = math.nan  # Timed only when fp16 is slow enough to matter: it is one more step of start-up.
        if fp16 >= SLOW_STEP:
            what = "fp32 step"
            with torch.random.fork_rng(devices=[]):
                start = time.perf_counter()
                _first_loss(problem, copy.deepcopy(problem.model), name).float().backward()
                fp32 = time.perf_counter() - start
    except TaskError:
        raise
    except SystemExit as e:
        raise TaskError(f"task {name!r}: its {what} called sys.exit({e.code!r}) on the first batch")
    except Exception as e:
        raise TaskError(f"task {name!r}: its {what} failed on the first batch: {type(e).__name__}: {e}")
    return StepCost(fp16, fp32)


def _first_loss(problem: Problem | LoaderProblem, model: torch.nn.Module, name: str) -> torch.Tensor:
    """The training loss of ``model`` on the problem's first batch, as a trial computes it."""
    if isinstance(problem, LoaderProblem):
        return problem.loss_of(model, problem.planned(1)[0][0])
    size = problem.batch_size or len(problem.inputs)
    outputs = model(problem.inputs[:size])
    if not isinstance(outputs, torch.Tensor):
        raise TaskError(
            f"task {name!r}: the model returns {type(outputs).__name__}, not a tensor: return a tensor (e.g. "
            ".logits), or use search.tasks.LoaderProblem, whose dict batches use model(**batch).loss"
        )
    return problem.loss_fn(outputs, problem.targets[:size])


def _first_evaluation(problem: Problem | LoaderProblem, model: torch.nn.Module) -> torch.Tensor:
    """The evaluation's loss of ``model`` on the first evaluation batch: fp32, no autocast, eval mode."""
    model.eval()
    with torch.no_grad():
        if isinstance(problem, LoaderProblem):
            return problem.eval_loss_of(model, problem.evaluation_batches()[0])
        inputs, targets = problem.evaluation_set()
        size = problem.batch_size or len(problem.inputs)
        if problem.eval_fn is not None:
            return problem.eval_fn(model, inputs[:size], targets[:size])
        return problem.loss_fn(model(inputs[:size]).float(), targets[:size])


def _check_loss(loss: object, name: str, what: str = "loss") -> None:
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        got = (
            f"a tensor of shape {tuple(loss.shape)}"
            if isinstance(loss, torch.Tensor)
            else type(loss).__name__
        )
        raise TaskError(
            f"task {name!r}: its {what} returned {got}; it must return one floating-point number as a "
            "tensor (reduce it, e.g. with .mean())"
        )
