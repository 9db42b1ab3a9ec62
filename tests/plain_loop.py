"""An independent plain PyTorch AMP loop, written for the tests from the documented definitions.

It shares nothing with ``search.training._trainer`` but the :class:`~search.Problem` it trains: it draws the
mini-batch order itself (docs/internals.md: ``torch.Generator().manual_seed(shuffle_seed)``, one
``randperm(n)`` per epoch, split into ``batch_size`` micro-batches, ``accumulation_steps`` of them per
step), reads the host every step (``.item()``, ``get_scale()``), decides a skip *from the gradients
themselves* (a non-finite scaled gradient) and checks that GradScaler agrees (the optimizer did not
move the weights, the scale backed off), counts zero gradients as backward produced them on
unskipped steps, evaluates the final weights in fp32, and derives the failure code with the
rules docs/objective.md states. A test compares the service's numbers with these.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from search import Problem


@dataclass
class PlainRun:
    losses: list[float]
    scales: list[float]
    skipped: int
    zero_fraction: float
    eval_loss: float
    eval_median: float
    initial_eval_loss: float
    learned: bool
    failure: str
    objective: float


def _batches(problem: Problem, steps: int) -> list[list[torch.Tensor | None]]:
    n = len(problem.inputs)
    if problem.batch_size is None or problem.batch_size >= n:
        return [[None] * problem.accumulation_steps for _ in range(steps)]
    generator = torch.Generator().manual_seed(problem.shuffle_seed)
    plan: list[list[torch.Tensor | None]] = []
    while len(plan) < steps:
        micro = list(torch.randperm(n, generator=generator).split(problem.batch_size))
        plan += [
            micro[i : i + problem.accumulation_steps]
            for i in range(0, len(micro), problem.accumulation_steps)
        ]
    return plan[:steps]


def _evaluate(problem: Problem, model: torch.nn.Module) -> tuple[float, float]:
    """(loss on the whole evaluation set, median chunk loss), fp32, eval mode."""
    x, y = (
        (problem.eval_inputs, problem.eval_targets)
        if problem.eval_inputs is not None
        else (problem.inputs, problem.targets)
    )

    def loss(a: torch.Tensor, b: torch.Tensor) -> float:
        if problem.eval_fn is not None:
            return problem.eval_fn(model, a, b).item()
        return problem.loss_fn(model(a).float(), b).item()

    model.eval()
    with torch.no_grad():
        whole = loss(x, y)
        size = problem.batch_size or len(x)
        chunks = [loss(a, b) for a, b in zip(x.split(size), y.split(size))]
    model.train()
    return whole, statistics.median(chunks)


def plain_fp32_zero_fraction(problem: Problem, steps: int) -> float:
    """Exact-zero share of the gradients of a plain fp32 run: no autocast, no scaler, every step."""
    model = copy.deepcopy(problem.model)
    params = list(model.parameters())
    optimizer = problem.make_optimizer(params)
    zeros = counted = 0
    for micro in _batches(problem, steps):
        optimizer.zero_grad(set_to_none=True)
        for index in micro:
            x, y = (
                (problem.inputs, problem.targets)
                if index is None
                else (problem.inputs[index], problem.targets[index])
            )
            (problem.loss_fn(model(x), y) / len(micro)).backward()
        grads = [p.grad for p in params if p.grad is not None]
        zeros += sum(int((g == 0).sum().item()) for g in grads)
        counted += sum(g.numel() for g in grads)
        if problem.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, problem.grad_clip)
        optimizer.step()
    return zeros / counted


def plain_run(
    problem: Problem,
    init_scale: float,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
    steps: int,
    *,
    fp32_zeros: float = 0.0,
    churn: float = 0.5,
    underflow: float = 0.5,
    learn: float = 0.1,
    nonfinite_weight: float = 10.0,
    silent: float = 1.0,
    skip: float = 0.1,
    evaluation: str = "mean",
) -> PlainRun:
    device = problem.inputs.device.type
    model = copy.deepcopy(problem.model)
    params = list(model.parameters())
    optimizer = problem.make_optimizer(params)
    scaler = torch.amp.GradScaler(
        device,
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    losses, scales = [], []
    skipped, zeros, counted = 0, 0, 0
    model.train()
    for micro in _batches(problem, steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for index in micro:
            x, y = (
                (problem.inputs, problem.targets)
                if index is None
                else (problem.inputs[index], problem.targets[index])
            )
            with torch.autocast(device_type=device, dtype=torch.float16):
                loss = problem.loss_fn(model(x), y)
                if len(micro) > 1:
                    loss = loss / len(micro)
            scaler.scale(loss).backward()
            total += loss.item()
        overflow, step_zeros, step_counted, scale_before = plain_step(
            scaler, optimizer, params, problem.grad_clip
        )
        zeros, counted = zeros + step_zeros, counted + step_counted
        scaler.update()
        if overflow:
            skipped += 1
            assert scaler.get_scale() < scale_before  # GradScaler agrees: the scale backed off.
        losses.append(total)
        scales.append(scaler.get_scale())

    full_batch = problem.batch_size is None or problem.batch_size >= len(problem.inputs)
    if full_batch and problem.eval_inputs is None and problem.eval_fn is None:
        initial, initial_median = losses[0], losses[0]
        final, final_median = losses[-1], losses[-1]
    else:
        initial, initial_median = _evaluate(problem, copy.deepcopy(problem.model))
        final, final_median = _evaluate(problem, model)
    zero_fraction = zeros / counted if counted else 0.0
    return judge(
        losses,
        scales,
        params,
        skipped,
        zero_fraction,
        (initial, initial_median, final, final_median),
        steps,
        fp32_zeros=fp32_zeros,
        churn=churn,
        underflow=underflow,
        learn=learn,
        nonfinite_weight=nonfinite_weight,
        silent=silent,
        skip=skip,
        evaluation=evaluation,
    )


def plain_step(
    scaler: torch.amp.GradScaler,
    optimizer: torch.optim.Optimizer,
    params: list[torch.Tensor],
    grad_clip: float | None,
    moved_when_taken: bool = False,
) -> tuple[bool, int, int, float]:
    """After a step's backward passes: decides the skip from the gradients themselves (a non-finite scaled
    gradient), counts exact zeros of a taken step as backward produced them, clips the unscaled gradients, and
    steps; GradScaler must agree (a skipped step leaves the weights as they were; with ``moved_when_taken``, a
    taken step moves them). Returns (overflow, zeros, gradient entries counted, the scale before the update).
    """
    grads = [p.grad for p in params if p.grad is not None]
    overflow = any(not torch.isfinite(g).all().item() for g in grads)
    zeros = 0 if overflow else sum(int((g == 0).sum().item()) for g in grads)
    counted = 0 if overflow else sum(g.numel() for g in grads)
    if grad_clip is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    before, scale_before = [p.detach().clone() for p in params], scaler.get_scale()
    scaler.step(optimizer)
    unmoved = all(torch.equal(b, p.detach()) for b, p in zip(before, params))
    assert unmoved if overflow else (not unmoved or not moved_when_taken)
    return overflow, zeros, counted, scale_before


def plain_rule_run(
    problem: Problem, initial: float, next_scale: Callable[[bool], float | None], steps: int
) -> tuple[list[float], list[bool], bool]:
    """A task trained by a plain loop whose scale another framework's rule moves: GradScaler scales and
    skips, the skip decided from the gradients; after each step ``next_scale(overflow)`` (the framework's
    own class, or a transcription) gives the next scale, or None where it ends the run. Full batch or the
    task's mini-batches (in their seeded order). Returns (the scale after each step, the skipped steps,
    whether the rule ended the run); :data:`LAST_RULE_MODEL` keeps the trained model for an evaluation, and
    :data:`LAST_RULE_LOSSES` each step's loss (a full-batch task without validation data is judged on the
    last one, docs/internals.md)."""
    model = copy.deepcopy(problem.model)
    params = list(model.parameters())
    optimizer = problem.make_optimizer(params)
    scaler = torch.amp.GradScaler("cpu", init_scale=initial)
    scales, skipped = [], []
    LAST_RULE_MODEL[:] = [model]
    LAST_RULE_LOSSES.clear()
    for micro in _batches(problem, steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for index in micro:
            x, y = (
                (problem.inputs, problem.targets)
                if index is None
                else (problem.inputs[index], problem.targets[index])
            )
            with torch.autocast("cpu", dtype=torch.float16):
                loss = problem.loss_fn(model(x), y)
                if len(micro) > 1:
                    loss = loss / len(micro)
            scaler.scale(loss).backward()
            total += loss.item()
        LAST_RULE_LOSSES.append(total)
        overflow = plain_step(scaler, optimizer, params, problem.grad_clip)[0]
        skipped.append(overflow)
        scale = next_scale(overflow)
        if scale is None:
            scales.append(scaler.get_scale())
            return scales, skipped, True
        scaler.update(new_scale=scale)
        scales.append(scaler.get_scale())
    return scales, skipped, False


LAST_RULE_MODEL: list[torch.nn.Module] = []  # plain_rule_run's last trained model (plain_evaluation)
LAST_RULE_LOSSES: list[float] = []  # plain_rule_run's last run's loss at each step


def plain_evaluation(problem: Problem, model: torch.nn.Module) -> float:
    """The loss of ``model`` on the task's evaluation set, fp32, eval mode."""
    return _evaluate(problem, model)[0]


def judge(
    losses: list[float],
    scales: list[float],
    params: list[torch.Tensor],
    skipped: int,
    zero_fraction: float,
    evaluations: tuple[float, float, float, float],
    steps: int,
    *,
    fp32_zeros: float,
    churn: float,
    underflow: float,
    learn: float,
    nonfinite_weight: float,
    silent: float,
    skip: float,
    evaluation: str,
) -> PlainRun:
    """The failure code and objective of a run, by docs/objective.md's rules (``evaluations``: initial
    loss, initial median, final loss, final median)."""
    initial, initial_median, final, final_median = evaluations
    finite = all(math.isfinite(v) for v in losses) and all(torch.isfinite(p).all().item() for p in params)
    finite = finite and math.isfinite(final)
    learned = final_median <= (1 - learn) * initial_median
    fraction = skipped / steps
    if not finite:
        first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), steps)
        failure, objective = "nonfinite", nonfinite_weight * (2 - first_bad / steps)
    else:
        if fraction >= churn:
            failure = "overflow_churn"
        elif zero_fraction - fp32_zeros >= underflow:
            failure = "underflow"
        elif not learned:
            failure = "frozen"
        else:
            failure = "none"
        judged = final_median if evaluation == "median" else final  # docs/objective.md: [penalty] evaluation
        objective = judged + skip * fraction + (silent if failure != "none" else 0.0)
    return PlainRun(
        losses, scales, skipped, zero_fraction, final, final_median, initial, learned, failure, objective
    )
