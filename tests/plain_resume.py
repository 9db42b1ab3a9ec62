"""An independent plain PyTorch AMP loop that goes on from a checkpoint: read step by step, from the host.

It shares nothing with ``search.training`` but the documented rules: each step seeded with
``torch.manual_seed((seed * 1_000_003 + global_step) % 2**63)`` (docs/tasks.md), the rate each step uses
read before the scheduler steps, and the scheduler stepped as PyTorch's AMP recipe does (every iteration) or
as Hugging Face Trainer does (only when the optimizer stepped, i.e. ``scaler.get_scale()`` did not fall).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class PlainSteps:
    losses: list[float]
    scales: list[float]
    skipped: list[bool]
    rates: list[float]


def plain_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    scaler: torch.amp.GradScaler,
    losses: Sequence[Callable[[nn.Module], torch.Tensor]],
    first: int,
    seed: int,
    on_skip: bool,
) -> PlainSteps:
    """Global steps ``first`` ... of the plain AMP loop, one per entry of ``losses`` (a batch's loss)."""
    out = PlainSteps([], [], [], [])
    model.train()
    for step, loss_of in enumerate(losses, start=first):
        torch.manual_seed((seed * 1_000_003 + step) % 2**63)
        optimizer.zero_grad(set_to_none=True)
        out.rates.append(optimizer.param_groups[0]["lr"])
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_of(model)
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped = scaler.get_scale() < before
        if scheduler is not None and (on_skip or not skipped):
            scheduler.step()
        out.losses.append(loss.item())
        out.scales.append(scaler.get_scale())
        out.skipped.append(skipped)
    return out


def loaded(
    model: nn.Module,
    make_optimizer: Callable,
    make_scheduler: Callable | None,
    states: tuple,
    scaler: torch.amp.GradScaler | None,
) -> tuple:
    """(model, optimizer, scheduler, scaler) holding a checkpoint's ``states`` (weights, optimizer, scheduler,
    scaler), loaded as a user's resume loads them: the optimizer and scheduler built first, then their states
    (copies: ``load_state_dict`` keeps the saved tensors, and the optimizer updates them in place);
    ``scaler`` None: a GradScaler holding the saved state."""
    weights, optimizer_state, scheduler_state, scaler_state = states
    model.load_state_dict(weights)
    optimizer = make_optimizer(model.parameters())
    scheduler = None if make_scheduler is None else make_scheduler(optimizer)
    optimizer.load_state_dict(copy.deepcopy(optimizer_state))
    if scheduler is not None:
        scheduler.load_state_dict(copy.deepcopy(scheduler_state))
    if scaler is None:
        scaler = torch.amp.GradScaler("cpu")
        scaler.load_state_dict(scaler_state)
    return model, optimizer, scheduler, scaler


def assert_same_steps(result, plain: PlainSteps, first: int) -> None:  # noqa: ANN001 (a TrainResult)
    """The trainer's run from a checkpoint took the plain loop's steps: skips, scales, rates and losses."""
    assert result.first_step == first and result.steps == len(plain.losses)
    assert result.skipped == plain.skipped
    assert result.scale_curve == plain.scales  # float32 scales, exactly
    assert list(result.lr_curve) == plain.rates
    assert result.loss_curve == plain.losses


def write_content(path, content) -> None:  # noqa: ANN001
    """A checkpoint file as a test wants it: raw bytes, a ``torch.save`` of ``content``, or nothing (None)."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        torch.save(content, path)
