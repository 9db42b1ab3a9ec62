"""The AMP training loop: autocast + GradScaler, full-batch or mini-batch, with accumulation and clipping.

It knows nothing of Optuna, so it can be tested and benchmarked alone. Per-step values stay
on the device and are read once at the end: the only host syncs are the ones GradScaler makes
itself (``scaler.step`` checks for infs).

Where each measurement is taken, so that a plain PyTorch loop can reproduce it:

* **skipped steps**: GradScaler's own verdict. ``scaler.step`` skips ``optimizer.step()`` exactly
  when the step's ``found_inf`` is non-zero; the trainer reads that flag (summed over devices)
  after ``step`` and before ``update`` (which clears it). Nothing is inferred from the scale
  curve: the scale is a float32 tensor, and comparing it with the float64 ``init_scale`` the
  user asked for would count float32's rounding as a skip.
* **scale curve**: GradScaler's float32 scale after each ``update()``.
* **zero-gradient fraction** (the underflow evidence): the fraction of gradient entries exactly 0
  as backward produced them (still scaled, before ``unscale_`` and clipping), over the steps
  that were *not* skipped. After clipping it would be wrong: on an overflowing step the clip
  coefficient is ``max_norm / inf = 0`` and turns every finite gradient into an exact 0.
* **loss curve**: each step's loss under autocast, before that step's update (the sum of its
  accumulated micro-batch losses, i.e. their mean); ``final_loss`` is the last one.
* **learning rate**: the rate each step's ``optimizer.step`` uses, read before the scheduler steps
  (:mod:`search.training._schedule` says when it steps on a skipped step).
* **from a checkpoint** (``problem.start``): every run loads its weights, optimizer and scheduler states
  and trains the run's batches from its global step on, each step seeded by its global step.
* **evaluation**: see :mod:`search.training._evaluation` (the final weights, or the last step for
  full-batch tasks).
"""

from __future__ import annotations

import copy
import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from search.scalers import RULES, RuleSetting, ScaleAtMinimum, ScalerConfig, ScaleRule
from search.tasks import LoaderProblem, Problem
from search.training._evaluation import (
    LAST_STEP,
    _last_step_evaluations,
    evaluate,
    evaluation_mode,
    initial_evaluation,
)
from search.training._feed import batch_plan, feed_of, seed_step
from search.training._schedule import schedule_of


@dataclass(frozen=True)
class TrainResult:
    """What one training run measured. Non-finite floats are kept as ``nan``/``inf`` here.

    Attributes:
        loss_curve: Loss of each optimizer step's forward pass under autocast, before that step.
        scale_curve: GradScaler's (float32) scale after each step's ``update()``.
        skipped: Per step, whether GradScaler skipped it (its ``found_inf`` was non-zero), under every rule.
        final_loss: ``loss_curve[-1]``, the last step's training loss (the original example's definition).
        final_loss_fp32: Loss of the final weights on the training data in fp32, without autocast.
        eval_loss: The evaluation loss every trial is judged on (:mod:`search.training._evaluation`).
        initial_eval_loss: The same evaluation of the initial weights (the same for every trial).
        eval_median: Median chunk loss of the final weights' evaluation (``learned`` uses it).
        initial_eval_median: The same for the initial weights.
        evaluation: How the evaluation was taken: ``last_step`` or ``final_weights``.
        skipped_steps: Optimizer steps GradScaler skipped for inf/NaN gradients.
        zero_grad_fraction: Fraction of gradient entries exactly zero as backward produced them,
            over the steps that were not skipped (fp16 underflow shows up here).
        fp32_zero_fraction: The same fraction in an fp32 run of the same problem and steps
            (:func:`fp32_zero_fraction`): the zeros the model has without any underflow.
        weights_finite: Whether every final weight is finite.
        steps: Number of optimizer steps taken (one per epoch for full-batch tasks).
        train_seconds: Wall time of the loop, the final evaluation and the host read; not of
            the references computed once per problem (the fp32 zero fraction, the initial weights'
            evaluation), which the first trial of a process would otherwise carry.
        stopped_early: Whether ``should_stop`` ended the run before ``epochs``.
        ended_by_rule: When a framework's scale rule ended the run at its minimum scale, why
            (DeepSpeed's and fairseq's rules do); the last step, skipped, is in the curves.
        planned_steps: The optimizer steps the run was to take (``steps`` is those it took).
        steps_at_minimum: Under a rule with a minimum scale, the steps taken with the scale there.
        overflows_at_minimum: How many of those overflowed (Megatron clamps and goes on skipping).
        rule: The rule whose setting the run trained (``torch``, ``deepspeed``, ...).
        min_scale: The lowest scale the rule trains at, or None where it has none (GradScaler).
        lr_curve: The learning rate each optimizer step used.
        first_step: The run's global step of its first step (the checkpoint's step, else 0).
    """

    loss_curve: list[float]
    scale_curve: list[float]
    skipped: list[bool]
    final_loss: float
    final_loss_fp32: float
    eval_loss: float
    initial_eval_loss: float
    eval_median: float
    initial_eval_median: float
    evaluation: str
    skipped_steps: int
    zero_grad_fraction: float
    fp32_zero_fraction: float
    weights_finite: bool
    steps: int
    train_seconds: float
    stopped_early: bool = False
    ended_by_rule: str = ""  # Why a framework's scale rule ended the run at its minimum, or "".
    planned_steps: int = 0
    steps_at_minimum: int = 0
    overflows_at_minimum: int = 0
    rule: str = ""
    min_scale: float | None = None
    lr_curve: tuple[float, ...] = ()
    first_step: int = 0


class StepObserver(Protocol):
    """Reads a run step by step (the diagnosis's :class:`search.diagnosis.RunObserver`)."""

    def attach(self, model: torch.nn.Module) -> None: ...

    def gradients(self, step: int, scale: torch.Tensor) -> None: ...

    def detach(self) -> None: ...


class TrialTimeout(Exception):
    """Raised between steps when a run has trained longer than its timeout."""


def run_steps(problem: Problem | LoaderProblem, epochs: int, steps: int) -> int:
    """The optimizer steps of one run on ``problem``, from the settings' ``epochs`` and ``steps``.

    The one place the settings' zeros are read: ``steps`` when it is not 0, else what ``epochs``
    passes make, 0 epochs being the task's own default (``problem.epochs``). A run plan resolves
    this once, and every trial, population and confirmation run then trains that many steps.
    """
    if isinstance(problem, LoaderProblem):
        if epochs and not steps:
            raise ValueError(
                "a LoaderProblem runs --steps, not --epochs (its loader's length may be unknown)"
            )
        return steps or problem.steps
    return len(batch_plan(problem, epochs or problem.epochs, steps or None))


def train(
    problem: Problem | LoaderProblem,
    scaler_config: ScalerConfig | RuleSetting,
    *,
    epochs: int = 0,
    steps: int | None = None,
    amp_dtype: torch.dtype | None = torch.float16,
    timeout: float | None = None,
    checkpoints: tuple[int, ...] = (),
    should_stop: Callable[[int, float], bool] | None = None,
    scale_rule: ScaleRule | None = None,
    observer: StepObserver | None = None,
    fp32_reference: bool = True,
    continue_scaler: bool = False,
) -> TrainResult:
    """Trains a fresh copy of ``problem.model`` under mixed precision.

    One optimizer step per full batch, or per ``problem.accumulation_steps`` mini-batches of
    ``problem.batch_size`` (see :func:`batch_plan`); with ``problem.grad_clip`` the gradients are
    unscaled (``scaler.unscale_``) and clipped before the step, as PyTorch's AMP recipe does.

    Args:
        problem: The problem, already on the target device (see :meth:`Problem.to`).
        scaler_config: The setting of a rule: GradScaler's four settings, or a framework's setting
            (:class:`~search.scalers.RuleSetting`), whose rule then moves the scale as ``scale_rule`` does.
        epochs: Passes over the data (full-batch tasks: optimizer steps).
        steps: Optimizer steps instead of ``epochs``, or None.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16`` for autocast; None trains in fp32
            without autocast (the reference of :func:`fp32_zero_fraction`).
        timeout: Seconds of this run's own training after which :class:`TrialTimeout` is raised
            between steps; the clock starts after the shared references (the fp32 run and the
            initial evaluation), which only the process's first trial pays.
        checkpoints: Steps after which ``should_stop`` is asked (pruning). Each costs a sync.
        should_stop: ``should_stop(step, loss)``; returning True ends training there.
        scale_rule: Another framework's rule for the scale (``DeepSpeedScale``, ``MegatronScale``,
            ``FairseqScale``): GradScaler still scales, unscales and finds infs, starting from the
            rule's scale, but after each step the rule sets the next scale (``scaler_config`` is then
            unused). A rule has a ``min_loss_scale``: the steps taken there are counted. Reading each step's
            verdict costs one host sync a step. When the rule ends the run at its minimum scale, training
            stops there (``ended_by_rule``).
        continue_scaler: Start the scaler in the state the problem's checkpoint saved (GradScaler's scale and
            count of clean steps, or a framework's scale and counters), as the run was, instead of afresh at
            ``scaler_config`` (which must then be that state's own setting).

    Returns:
        The measurements of the run; its curves have one value per optimizer step.
    """
    saved = _saved_scaler_state(problem, scaler_config) if continue_scaler else None
    if saved is not None:  # The run as it was: the framework's counters go on from the checkpoint's.
        scale_rule = RULES[scaler_config.rule].resumed(scaler_config.values, saved)
    elif scale_rule is None:
        scale_rule = scaler_config.make()  # None: GradScaler's own update() moves the scale.
    # Computed once per problem and shared by every trial (the first trial pays): outside its time.
    fp32_zeros = (
        None
        if amp_dtype is None
        else fp32_zero_fraction(problem, epochs, steps) if fp32_reference else math.nan
    )
    feed = feed_of(problem, epochs, steps)
    initial_eval = None if evaluation_mode(problem) == LAST_STEP else initial_evaluation(problem)
    start = time.perf_counter()
    deadline = None if timeout is None else start + timeout
    device_type, plan = feed.device_type, feed.plan
    model = copy.deepcopy(problem.model)  # Every trial starts from the same initial weights (and buffers).
    schedule = schedule_of(problem, model)
    optimizer = schedule.optimizer
    # Under a framework's rule GradScaler still scales, unscales and finds infs, from the rule's scale; the
    # rule, not GradScaler's own update(), then sets each next scale.
    scaler = torch.amp.GradScaler(
        device_type, **(scaler_config.values if scale_rule is None else {"init_scale": scale_rule.scale})
    )
    if saved is not None and scale_rule is None:
        scaler.load_state_dict(dict(saved))
    params = list(model.parameters())
    if observer is not None:
        observer.attach(model)
    losses: list[torch.Tensor] = []
    scales: list[torch.Tensor] = []
    found_infs: list[torch.Tensor] = []
    zero_counts: list[torch.Tensor] = []
    grad_sizes: list[int] = []
    rates: list[float] = []

    model.train()
    taken = 0
    stopped_early = False
    ended_by_rule = ""
    at_minimum = overflows_at_minimum = 0
    for step, micro_batches in enumerate(plan):
        if deadline is not None and time.perf_counter() > deadline:
            raise TrialTimeout(f"trial timeout after {step} of {len(plan)} steps")
        optimizer.zero_grad(set_to_none=True)
        seed_step(feed, step)  # Dropout draws the same masks in every trial.
        rates.append(schedule.learning_rate())
        step_loss = None
        for batch in micro_batches:
            with torch.autocast(device_type, dtype=amp_dtype or torch.float16, enabled=amp_dtype is not None):
                loss = feed.loss(model, batch)
                if len(micro_batches) > 1:
                    loss = loss / len(micro_batches)  # Accumulated gradients average the micro-batches.
            scaler.scale(loss).backward()
            step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
        # Zeros as backward produced them: after clipping, an overflowing step's finite
        # gradients are all exactly 0 (clip coefficient max_norm / inf).
        grads = [p.grad for p in params if p.grad is not None]
        zero_counts.append(
            sum(g.numel() for g in grads) - torch.stack([g.count_nonzero() for g in grads]).sum()
        )
        grad_sizes.append(sum(g.numel() for g in grads))
        if observer is not None:
            observer.gradients(step, scaler._scale)
        if problem.grad_clip is not None:
            scaler.unscale_(optimizer)  # Clip the true gradients, not the scaled ones.
            torch.nn.utils.clip_grad_norm_(params, problem.grad_clip)
        scaler.step(optimizer)  # Unscales the gradients (unless done above); skips the step on inf/NaN.
        # GradScaler's own verdict on this step, before update() clears it.
        found_infs.append(sum(scaler._found_inf_per_device(optimizer).values()))
        if scale_rule is None:
            scaler.update()
        else:
            overflow = bool(found_infs[-1] > 0)
            if scale_rule.scale <= scale_rule.min_loss_scale:
                at_minimum += 1
                overflows_at_minimum += overflow
            try:
                scale_rule.update(overflow)
            except ScaleAtMinimum as end:  # The framework stops the run here; the step was skipped.
                ended_by_rule = str(end)
                losses.append(step_loss)
                scales.append(scaler._scale.clone())
                taken = step + 1
                break
            scaler.update(new_scale=scale_rule.scale)
        schedule.after_step(found_infs[-1])

        # Bookkeeping on the device, no .item(): GradScaler keeps its scale as a tensor.
        losses.append(step_loss)
        scales.append(scaler._scale.clone())  # update() changes the scale tensor in place.
        taken = step + 1
        if should_stop is not None and taken in checkpoints:
            if should_stop(step, float(losses[-1])):
                stopped_early = True
                break

    if observer is not None:
        observer.detach()
    final_fp32 = feed.final_loss_fp32(model)
    with torch.no_grad():
        weights_finite = torch.stack([torch.isfinite(p).all() for p in params]).all()
    # The one host read of the run.
    loss_curve = torch.stack(losses).tolist() if losses else []
    scale_curve = torch.stack(scales).tolist() if scales else []
    skipped = [v > 0 for v in torch.stack(found_infs).tolist()] if found_infs else []
    zeros = torch.stack(zero_counts).tolist() if zero_counts else []
    zero_fraction = _zero_fraction(zeros, grad_sizes, skipped)
    if evaluation_mode(problem) == LAST_STEP:
        initial, final = _last_step_evaluations(loss_curve)
    else:
        assert initial_eval is not None
        initial, final = initial_eval, evaluate(problem, model)
    return TrainResult(
        loss_curve=loss_curve,
        scale_curve=scale_curve,
        skipped=skipped,
        final_loss=loss_curve[-1] if loss_curve else float("nan"),
        final_loss_fp32=float(final_fp32),
        eval_loss=final.loss,
        initial_eval_loss=initial.loss,
        eval_median=final.median_chunk_loss,
        initial_eval_median=initial.median_chunk_loss,
        evaluation=evaluation_mode(problem),
        skipped_steps=sum(skipped),
        zero_grad_fraction=zero_fraction,
        fp32_zero_fraction=zero_fraction if fp32_zeros is None else fp32_zeros,
        weights_finite=bool(weights_finite),
        steps=taken,
        train_seconds=time.perf_counter() - start,
        stopped_early=stopped_early,
        ended_by_rule=ended_by_rule,
        planned_steps=len(plan),
        steps_at_minimum=at_minimum,
        overflows_at_minimum=overflows_at_minimum,
        rule=scaler_config.rule,
        min_scale=None if scale_rule is None else scale_rule.min_loss_scale,
        lr_curve=tuple(rates),
        first_step=feed.first_step,
    )


def _saved_scaler_state(problem: Problem | LoaderProblem, setting: ScalerConfig | RuleSetting) -> dict:
    """The checkpoint's scaler state, refused unless ``setting`` is that state's own setting."""
    if problem.start is None or problem.start.scaler_state is None:
        raise ValueError("continue_scaler needs a problem whose checkpoint saved its scaler's state")
    if setting != problem.start.scaler_setting():
        raise ValueError(f"continue_scaler: {setting} is not the checkpoint's scaler setting")
    return dict(problem.start.scaler_state)


def _zero_fraction(zero_counts: list[int], grad_sizes: list[int], skipped: list[bool]) -> float:
    """Zero gradient entries over all gradient entries, counting only the steps that were not skipped.

    ``zero_counts`` and ``grad_sizes`` hold one count per step (the gradients as backward produced
    them); ``skipped`` says which steps GradScaler skipped. A run with no step taken counts 0.0.
    """
    counted = sum(n for n, s in zip(grad_sizes, skipped) if not s)
    return sum(z for z, s in zip(zero_counts, skipped) if not s) / counted if counted else 0.0


# One entry per live problem and step count: the fp32 reference is the same for every trial.
_FP32_ZEROS: dict[tuple[int, int, int | None], tuple[weakref.ref, float]] = {}


def fp32_zero_fraction(problem: Problem | LoaderProblem, epochs: int = 0, steps: int | None = None) -> float:
    """The zero-gradient fraction of one fp32 run (no autocast, scale 1), computed once per problem.

    Some models have exact zeros in their gradients without any underflow (dead ReLUs, embedding
    rows a batch does not use); underflow is the zeros *above* these. The run takes the same steps
    and batches as a trial.
    """
    key = (id(problem), epochs, steps)
    cached = _FP32_ZEROS.get(key)
    if cached is not None and cached[0]() is problem:
        return cached[1]
    result = train(problem, ScalerConfig(1.0, 2.0, 0.5, 2**30), epochs=epochs, steps=steps, amp_dtype=None)
    _FP32_ZEROS[key] = (
        weakref.ref(problem, lambda _ref: _FP32_ZEROS.pop(key, None)),
        result.zero_grad_fraction,
    )
    return result.zero_grad_fraction


def skips_over(
    problem: Problem | LoaderProblem,
    settings: dict[str, ScalerConfig | RuleSetting],
    steps: int,
    continued: tuple[str, ...] = (),
) -> dict[str, dict[str, Any]]:
    """Each labelled setting trained ``steps`` steps in fp16 as a trial is (the user's run length,
    ``--run-steps``): its values, skipped steps and evaluation, by label; those ``continued`` continue the
    checkpoint's scaler (``continue_scaler``)."""
    out = {}
    for label, setting in settings.items():
        as_run = label in continued
        result = train(problem, setting, steps=steps, fp32_reference=False, continue_scaler=as_run)
        out[label] = {
            "settings": dict(setting.values),
            "skipped": int(sum(result.skipped)),
            "eval_loss": result.eval_loss,
        }
    return out
