"""The AMP training loop: autocast + GradScaler, one full-batch step per epoch.

It knows nothing of Optuna, so it can be tested and benchmarked alone. Per-epoch values stay
on the device and are read once at the end: the only host syncs are the ones GradScaler makes
itself (``scaler.step`` checks for infs).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from search.tasks.base import Problem

__all__ = ["ScalerConfig", "TrainResult", "TrialTimeout", "train"]


@dataclass(frozen=True)
class ScalerConfig:
    """The four ``torch.amp.GradScaler`` settings one trial uses."""

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    def as_code(self, device_type: str = "cuda") -> str:
        """A copy-paste ``torch.amp.GradScaler(...)`` line."""
        return (
            f'torch.amp.GradScaler("{device_type}", init_scale={_pretty_scale(self.init_scale)}, '
            f"growth_factor={self.growth_factor:.4g}, backoff_factor={self.backoff_factor:.4g}, "
            f"growth_interval={self.growth_interval})"
        )


def _pretty_scale(value: float) -> str:
    exponent = math.log2(value)
    if exponent == round(exponent):
        return f"2.0**{int(exponent)}"
    return f"{value:.6g}"


@dataclass(frozen=True)
class TrainResult:
    """What one training run measured. Non-finite floats are kept as ``nan``/``inf`` here.

    Attributes:
        loss_curve: Loss of each epoch's forward pass under autocast, before that step.
        scale_curve: GradScaler's scale after each epoch's ``update()``.
        final_loss: ``loss_curve[-1]`` (the seed script's definition).
        final_loss_fp32: Loss of the final weights in fp32, without autocast.
        skipped_steps: Optimizer steps GradScaler skipped for inf/NaN gradients.
        zero_grad_fraction: Mean fraction of gradient entries that were exactly zero
            (fp16 underflow shows up here).
        weights_finite: Whether every final weight is finite.
        epochs: Number of optimizer steps taken.
        train_seconds: Wall time of the loop, including the final host read.
        stopped_early: Whether ``should_stop`` ended the run before ``epochs``.
    """

    loss_curve: list[float]
    scale_curve: list[float]
    final_loss: float
    final_loss_fp32: float
    skipped_steps: int
    zero_grad_fraction: float
    weights_finite: bool
    epochs: int
    train_seconds: float
    stopped_early: bool = False


class TrialTimeout(Exception):
    """Raised between steps when a run passes its deadline."""


def train(
    problem: Problem,
    scaler_config: ScalerConfig,
    *,
    epochs: int,
    amp_dtype: torch.dtype = torch.float16,
    deadline: float | None = None,
    checkpoints: tuple[int, ...] = (),
    should_stop: Callable[[int, float], bool] | None = None,
) -> TrainResult:
    """Trains a fresh copy of ``problem.model`` under mixed precision.

    Args:
        problem: The problem, already on the target device (see :meth:`Problem.to`).
        scaler_config: GradScaler settings.
        epochs: Number of full-batch optimizer steps.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16`` for autocast.
        deadline: ``time.perf_counter()`` value after which :class:`TrialTimeout` is raised.
        checkpoints: Epochs after which ``should_stop`` is asked (pruning). Each costs a sync.
        should_stop: ``should_stop(epoch, loss)``; returning True ends training there.

    Returns:
        The measurements of the run.
    """
    start = time.perf_counter()
    inputs, targets = problem.inputs, problem.targets
    device_type = inputs.device.type
    model = copy.deepcopy(problem.model)  # Every trial starts from the same initial weights.
    optimizer = problem.make_optimizer(model.parameters())
    scaler = torch.amp.GradScaler(
        device_type,
        init_scale=scaler_config.init_scale,
        growth_factor=scaler_config.growth_factor,
        backoff_factor=scaler_config.backoff_factor,
        growth_interval=scaler_config.growth_interval,
    )
    params = list(model.parameters())
    n_weights = sum(p.numel() for p in params)
    losses: list[torch.Tensor] = []
    scales: list[torch.Tensor] = []
    zero_grads: list[torch.Tensor] = []

    model.train()
    steps = 0
    stopped_early = False
    for epoch in range(epochs):
        if deadline is not None and time.perf_counter() > deadline:
            raise TrialTimeout(f"trial timeout after {epoch} of {epochs} epochs")
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=amp_dtype):
            outputs = model(inputs)
            loss = problem.loss_fn(outputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # Unscales the gradients in place; skips the step on inf/NaN.
        scaler.update()

        # Bookkeeping on the device, no .item(): GradScaler keeps its scale as a tensor.
        losses.append(loss.detach())
        scales.append(scaler._scale.clone())  # update() changes the scale tensor in place.
        zero_grads.append(torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None]).eq(0).sum())
        steps = epoch + 1
        if should_stop is not None and steps in checkpoints:
            if should_stop(epoch, float(losses[-1])):
                stopped_early = True
                break

    with torch.no_grad():
        final_fp32 = problem.loss_fn(model(inputs).float(), targets)
        weights_finite = torch.stack([torch.isfinite(p).all() for p in params]).all()
    # The one host read of the run.
    loss_curve = torch.stack(losses).tolist() if losses else []
    scale_curve = [scaler_config.init_scale] + (torch.stack(scales).tolist() if scales else [])
    zero_fraction = float(torch.stack(zero_grads).sum()) / max(1, n_weights * steps) if steps else 0.0
    # backoff_factor < 1, so every skipped step shows as a drop of the scale at update().
    skipped = sum(1 for before, after in zip(scale_curve, scale_curve[1:]) if after < before)
    return TrainResult(
        loss_curve=loss_curve,
        scale_curve=scale_curve[1:],
        final_loss=loss_curve[-1] if loss_curve else float("nan"),
        final_loss_fp32=float(final_fp32),
        skipped_steps=skipped,
        zero_grad_fraction=zero_fraction,
        weights_finite=bool(weights_finite),
        epochs=steps,
        train_seconds=time.perf_counter() - start,
        stopped_early=stopped_early,
    )
