"""An independent plain PyTorch AMP loop for a LoaderProblem, written for the tests from the documented rules.

It shares nothing with ``search.training`` but the task it trains and the documented seeds: it draws the
batches itself (docs/tasks.md: the global RNG seeded with ``problem.seed`` while the loader is iterated,
passes repeated until the steps have their batches, ``accumulation_steps`` per step), seeds each step with
``torch.manual_seed((seed * 1_000_003 + step) % 2**63)`` (the same dropout masks in every trial), computes
the loss as documented (``model(**batch).loss`` for a dict batch, ``loss_fn(model(x), y)`` for a pair),
reads the host every step, decides a skip from the gradients themselves and checks that GradScaler agrees,
and evaluates the final weights in fp32, in eval mode, batch by batch (the whole: their mean). The failure
code and objective follow docs/objective.md (:func:`plain_loop.judge`).
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Mapping

import torch

from search.tasks import LoaderProblem

from plain_loop import PlainRun, judge, plain_step


def _draw(source, count: int | None, seed: int) -> list:
    drawn: list = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        while count is None or len(drawn) < count:
            iterable = source() if callable(source) and not hasattr(source, "__iter__") else source
            for batch in iterable:
                drawn.append(batch)
                if count is not None and len(drawn) == count:
                    break
            if count is None:
                break
    return drawn


def _loss(problem: LoaderProblem, model: torch.nn.Module, batch) -> torch.Tensor:
    if problem.loss is not None:
        return problem.loss(model, batch)
    if isinstance(batch, Mapping):
        return model(**batch).loss
    return problem.loss_fn(model(batch[0]), batch[1])


def _evaluate(problem: LoaderProblem, model: torch.nn.Module, batches: list) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        values = [
            float(
                (
                    problem.eval_loss(model, b) if problem.eval_loss is not None else _loss(problem, model, b)
                ).float()
            )
            for b in batches
        ]
    model.train()
    return sum(values) / len(values), statistics.median(values)


def plain_loader_run(
    problem: LoaderProblem,
    init_scale: float,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
    steps: int,
    **judging: float | str,
) -> PlainRun:
    """One plain AMP run of ``steps`` steps; ``judging``: :func:`plain_loop.judge`'s thresholds (its defaults
    here)."""
    per = problem.accumulation_steps
    drawn = _draw(problem.train_batches, steps * per, problem.seed)
    first_pass = len(_draw(problem.train_batches, None, problem.seed))
    judged = (
        _draw(problem.eval_batches, None, problem.seed)
        if problem.eval_batches is not None
        else drawn[:first_pass]
    )
    model = copy.deepcopy(problem.model)
    params = list(model.parameters())
    optimizer = problem.make_optimizer(params)
    scaler = torch.amp.GradScaler(
        "cpu",
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    losses, scales, skipped, zeros, counted = [], [], 0, 0, 0
    model.train()
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        torch.manual_seed((problem.seed * 1_000_003 + step) % 2**63)
        total = 0.0
        for batch in drawn[step * per : (step + 1) * per]:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = _loss(problem, model, batch) / per if per > 1 else _loss(problem, model, batch)
            scaler.scale(loss).backward()
            total += loss.item()
        overflow, step_zeros, step_counted, scale_before = plain_step(
            scaler, optimizer, params, problem.grad_clip, moved_when_taken=True
        )
        zeros, counted = zeros + step_zeros, counted + step_counted
        scaler.update()
        # GradScaler agrees: a skipped step backs off; a taken one does not.
        assert scaler.get_scale() < scale_before if overflow else scaler.get_scale() >= scale_before
        skipped += overflow
        losses.append(total)
        scales.append(scaler.get_scale())
    initial = _evaluate(problem, copy.deepcopy(problem.model), judged)
    final = _evaluate(problem, model, judged)
    rules = {
        "fp32_zeros": 0.0,
        "churn": 0.5,
        "underflow": 0.5,
        "learn": 0.1,
        "nonfinite_weight": 10.0,
        "silent": 1.0,
        "skip": 0.1,
        "evaluation": "mean",
    } | judging
    zero_fraction = zeros / counted if counted else 0.0
    return judge(losses, scales, params, skipped, zero_fraction, (*initial, *final), steps, **rules)
