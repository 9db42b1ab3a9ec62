"""Population mode: K GradScaler settings trained at once, in one process, on one :class:`Problem`.

A tiny model leaves an accelerator idle: one trial of seed-mlp is a few hundred kernel launches
of microseconds each. :func:`train_population` trains K copies of ``problem.model`` together, one per
:class:`~search.core.ScalerConfig`, and returns for each the :class:`~search.training._trainer.TrainResult`
that :func:`search.training._trainer.train` would have returned for that setting alone, so that
:func:`search.training._penalty.assess` gives the same verdict.

The loop is the ordinary trainer's, for K members at once:

* what it can train, and the problem read into a plan: :mod:`search.training._population_check`;
* autocast's forward, the loss times each member's scale, and the backward, written out for stacked
  weights: :mod:`search.training._population_model`;
* GradScaler's ``unscale_`` (``found_inf`` per member) and ``update``:
  :mod:`search.training._population_scaler`;
* per-member clipping, and the optimizer step of the members whose step is taken (a skipped member's
  weights and state stay bit for bit): :mod:`search.training._population_optimizer`.

**Equivalence.** On the CPU build this was written on, every kernel above gives the same bits for a
member as the unbatched kernel gives for that member alone (``baddbmm``/``bmm`` in fp16 equal
``addmm``/``mm``; elementwise kernels are FMA-contracted on both their vector and scalar paths), and
``tests/test_population.py`` checks whole runs against :func:`search.training._trainer.train`: skipped steps,
scale curves and failure codes equal, losses within the tolerance measured there. Three things are
not the same kernels and may differ in the last bits: the loss *values* of the vectorised losses (a
reduction over one member's slice instead of the whole tensor; the gradients do not depend on it),
the per-member gradient norm of ``grad_clip`` (the clip coefficient, hence the weights), and on CUDA
the batched GEMMs and cuBLAS's choice of algorithm, which this CPU test cannot cover.

**Evaluation** uses :mod:`search.training._evaluation` unchanged, member by member, on a copy of the model
  that
holds the member's final weights: the same numbers :func:`search.training._trainer.train` computes, read to
the host once for all members. The loop reads the host only there (and at ``checkpoints``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch

from search.scalers import ScalerConfig
from search.tasks.base import Problem
from search.training._evaluation import (
    LAST_STEP,
    _last_step_evaluations,
    evaluation_mode,
    evaluation_of,
    evaluation_values,
    initial_evaluation,
)
from search.training._feed import batch_plan
from search.training._population_check import _spec
from search.training._population_model import _backward, _forward, _loss_and_grad
from search.training._population_optimizer import _clip_per_member, _MemberOptimizer
from search.training._population_scaler import _MemberScalers
from search.training._trainer import TrainResult, TrialTimeout, _zero_fraction, fp32_zero_fraction


def train_population(
    problem: Problem,
    configs: Sequence[ScalerConfig],
    *,
    epochs: int = 0,
    steps: int | None = None,
    amp_dtype: torch.dtype = torch.float16,
    timeout: float | None = None,
    checkpoints: tuple[int, ...] = (),
    should_stop: Callable[[int, int, float], bool] | None = None,
) -> list[TrainResult]:
    """Trains one fresh copy of ``problem.model`` per setting in ``configs``, all at once.

    Each member sees the batches :func:`search.training._feed.batch_plan` gives every trial, with its own
    loss scale, growth tracker and skip decisions (:mod:`search.training._population_scaler`). One host read
    at the end, plus one per checkpoint when ``should_stop`` is given.

    Args:
        problem: The problem, already on the target device (see :meth:`Problem.to`).
        configs: One GradScaler setting per member (K >= 1).
        epochs: Passes over the data (full-batch tasks: optimizer steps).
        steps: Optimizer steps instead of ``epochs``, or None.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16`` for autocast.
        timeout: Seconds of the population's own training (after the shared references) after
            which :class:`~search.training._trainer.TrialTimeout` is raised for the whole population.
        checkpoints: Steps after which ``should_stop`` is asked, for every member still training.
        should_stop: ``should_stop(member, step, loss)``; True stops that member there (its weights
            and scale freeze, its curves end; ``stopped_early`` in its result), as the trainer's
            ``should_stop`` ends one trial.

    Returns:
        One :class:`~search.training._trainer.TrainResult` per member, in the order of ``configs``; each
        ``train_seconds`` is the wall time of the whole population's run (not the references
        computed once per problem: the fp32 zero fraction and the initial weights' evaluation).

    Raises:
        PopulationError: The model, loss, optimizer or dtype cannot be vectorised.
    """
    if not configs:
        raise ValueError("train_population needs at least one ScalerConfig")
    spec = _spec(problem, amp_dtype)
    # Computed once per problem and shared by every trial (the first population pays): outside its time.
    mode = evaluation_mode(problem)
    fp32_zeros = fp32_zero_fraction(problem, epochs, steps)
    initial = initial_evaluation(problem) if mode != LAST_STEP else None
    start = time.perf_counter()
    deadline = None if timeout is None else start + timeout
    k = len(configs)
    inputs, targets = problem.inputs, problem.targets
    device = inputs.device
    plan = batch_plan(problem, epochs, steps)
    optimizer = _MemberOptimizer(problem, k, spec.optimizer, len(plan))  # holds the stacked weights
    scaler = _MemberScalers(configs, device)
    n_params = len(optimizer.params)
    active = torch.ones(k, dtype=torch.bool, device=device)
    stopped_at: list[int | None] = [None] * k  # the step count where should_stop ended a member
    taken = 0

    losses: list[torch.Tensor] = []
    scales: list[torch.Tensor] = []
    found_infs: list[torch.Tensor] = []
    zero_counts: list[torch.Tensor] = []
    grad_size = sum(p[0].numel() for p in optimizer.params)

    for step, micro_batches in enumerate(plan):
        if deadline is not None and time.perf_counter() > deadline:
            raise TrialTimeout(f"trial timeout after {step} of {len(plan)} steps (population of {k})")
        divisor = len(micro_batches)  # Accumulated micro-batch losses are divided by their number.
        grads: list[torch.Tensor] | None = None
        step_loss: torch.Tensor | None = None
        for index in micro_batches:
            x, y = (inputs, targets) if index is None else (inputs[index], targets[index])
            # Autocast's forward, then scaler.scale(loss).backward(), for the K members at once.
            outputs, saved, low = _forward(spec.layers, optimizer.params, x, k, amp_dtype)
            loss, grad_outputs = _loss_and_grad(
                spec.loss, problem, outputs, y, scaler.scale, divisor, amp_dtype
            )
            micro_grads = _backward(spec.layers, saved, low, grad_outputs, n_params)
            grads = micro_grads if grads is None else [a + b for a, b in zip(grads, micro_grads)]
            step_loss = loss if step_loss is None else step_loss + loss
        assert grads is not None and step_loss is not None
        # Zeros as backward produced them (still scaled), per member: after clipping, an overflowing
        # step's finite gradients are all exactly 0.
        zero_counts.append(torch.stack([(g == 0).reshape(k, -1).sum(1) for g in grads]).sum(0))
        grads, found_inf = scaler.unscale(grads)
        if problem.grad_clip is not None:
            grads = _clip_per_member(grads, problem.grad_clip)
        optimizer.step(grads, ~found_inf & active)  # as scaler.step: no step where found_inf
        scaler.update(found_inf, active)

        # Bookkeeping on the device: update() gives each step's scales a new tensor.
        losses.append(step_loss)
        scales.append(scaler.scale)
        found_infs.append(found_inf)
        taken = step + 1
        if should_stop is not None and taken in checkpoints:
            current = step_loss.tolist()  # a host read, as the trainer's checkpoint makes one
            for member in range(k):
                if stopped_at[member] is None and should_stop(member, step, float(current[member])):
                    stopped_at[member] = taken
            active = torch.tensor([at is None for at in stopped_at], dtype=torch.bool, device=device)
            if all(at is not None for at in stopped_at):
                break

    # The one host read of the run (per member: rows of these tables).
    loss_table = torch.stack(losses, 1).tolist() if losses else [[] for _ in range(k)]
    scale_table = torch.stack(scales, 1).tolist() if scales else [[] for _ in range(k)]
    skip_table = torch.stack(found_infs, 1).tolist() if found_infs else [[] for _ in range(k)]
    zero_table = torch.stack(zero_counts, 1).tolist() if zero_counts else [[] for _ in range(k)]
    read = _final_values(problem, optimizer.params, mode)
    measured = []
    for member in range(k):
        n = taken if stopped_at[member] is None else stopped_at[member]
        loss_curve, scale_curve = loss_table[member][:n], scale_table[member][:n]
        skipped = [bool(s) for s in skip_table[member][:n]]
        zero_fraction = _zero_fraction(zero_table[member][:n], [grad_size] * n, skipped)
        final_fp32, weights_finite = read[member][0], bool(read[member][1])
        if mode == LAST_STEP:
            before, after = _last_step_evaluations(loss_curve)
        else:
            assert initial is not None
            before, after = initial, evaluation_of(read[member][2:])
        measured.append(
            (loss_curve, scale_curve, skipped, zero_fraction, final_fp32, weights_finite, before, after, n)
        )
    seconds = time.perf_counter() - start
    results = []
    for member, (
        loss_curve,
        scale_curve,
        skipped,
        zero_fraction,
        final_fp32,
        weights_finite,
        before,
        after,
        n,
    ) in enumerate(measured):
        results.append(
            TrainResult(
                loss_curve=loss_curve,
                scale_curve=scale_curve,
                skipped=skipped,
                final_loss=loss_curve[-1] if loss_curve else float("nan"),
                final_loss_fp32=final_fp32,
                eval_loss=after.loss,
                initial_eval_loss=before.loss,
                eval_median=after.median_chunk_loss,
                initial_eval_median=before.median_chunk_loss,
                evaluation=mode,
                skipped_steps=sum(skipped),
                zero_grad_fraction=zero_fraction,
                fp32_zero_fraction=fp32_zeros,
                weights_finite=weights_finite,
                steps=n,
                train_seconds=seconds,
                stopped_early=stopped_at[member] is not None,
            )
        )
    return results


def _final_values(problem: Problem, stacked_params: Sequence[torch.Tensor], mode: str) -> list[list[float]]:
    """Per member: the fp32 training loss of its final weights, 1.0 if they are all finite, its evaluation.

    Member by member through the same module code as :func:`search.training._trainer.train` (the same
    numbers), but read to the host once for all members: per member that was 2 + one per parameter
    syncs. The evaluation's values (:func:`evaluation_values`) are left out under :data:`LAST_STEP`.
    """
    k = stacked_params[0].shape[0]
    model = copy.deepcopy(problem.model)
    on_device = []
    with torch.no_grad():
        for member in range(k):
            for target, stacked in zip(model.parameters(), stacked_params):
                target.copy_(stacked[member])
            # float64 holds every number below exactly, whatever the task's loss returns.
            final_fp32 = problem.loss_fn(model(problem.inputs).float(), problem.targets).double().reshape(1)
            finite = (
                torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all().double().reshape(1)
            )
            evaluated = (
                evaluation_values(problem, model).double() if mode != LAST_STEP else final_fp32.new_empty(0)
            )
            on_device.append(torch.cat([final_fp32, finite, evaluated]))
    return [row.tolist() for row in torch.stack(on_device).cpu()] if k else []
