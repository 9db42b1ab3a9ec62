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

from plain_loop import _batches


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
    next_scale: Callable[[bool], float] | None = None,
) -> PlainSteps:
    """Global steps ``first`` ... of the plain AMP loop, one per entry of ``losses`` (a batch's loss).

    ``next_scale``: another framework's rule moves the scale (its own class, told each step's overflow, which
    the loop reads off the gradients); None: GradScaler's own ``update()``."""
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
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        overflow = any(not torch.isfinite(g).all().item() for g in grads)
        scaler.step(optimizer)
        if next_scale is None:
            scaler.update()
            skipped = scaler.get_scale() < before
        else:
            scaler.update(new_scale=next_scale(overflow))
            skipped = overflow
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


def losses_of(problem, first: int, count: int) -> list:  # noqa: ANN001
    """The loss of each of global steps ``first`` ... (a task's mini-batches in their seeded order)."""
    x, y = problem.inputs, problem.targets
    return [
        lambda m, i=index: problem.loss_fn(m(x[i]), y[i])
        for (index,) in _batches(problem, first + count)[first:]
    ]


class DeepSpeedMoves:
    """DeepSpeed's own scaler told each step's overflow; the next scale is its ``cur_scale``."""

    def __init__(self, scaler) -> None:  # noqa: ANN001
        self.scaler = scaler

    def __call__(self, overflow: bool) -> float:
        self.scaler.update_scale(overflow)
        return self.scaler.cur_scale

    def saved(self):  # noqa: ANN201
        return self.scaler  # ZeRO's state_dict holds the object itself.

    def loaded(self, saved) -> DeepSpeedMoves:  # noqa: ANN001
        return DeepSpeedMoves(saved)

    @property
    def scale(self) -> float:
        return self.scaler.cur_scale


class MegatronMoves:
    """Megatron-LM's scaler (transcribed) told each step's overflow; its flags saved beside its state."""

    FLAGS = dict(min_scale=3.7, growth_factor=2.0, backoff_factor=0.5, growth_interval=3, hysteresis=3)

    def __init__(self, scaler) -> None:  # noqa: ANN001 (frameworks.PlainDynamicGradScaler)
        self.scaler = scaler

    def __call__(self, overflow: bool) -> float:
        self.scaler.update(overflow)
        return self.scaler._scale.item()

    def saved(self) -> dict:
        flags = {"min_loss_scale": 3.7, "loss_scale_window": 3, "hysteresis": 3}
        return self.scaler.state_dict() | flags

    def loaded(self, saved: dict) -> MegatronMoves:
        scaler = copy.deepcopy(self.scaler)
        scaler.load_state_dict(saved)
        return MegatronMoves(scaler)

    @property
    def scale(self) -> float:
        return self.scaler._scale.item()


def save_rule_run(problem, path, moves, steps: int) -> None:  # noqa: ANN001
    """``steps`` steps of ``problem`` from its initial weights (seed 42), the framework's scaler moving the
    scale; saved as a torch.save dict with that scaler as its framework saves it."""
    model = copy.deepcopy(problem.model)
    optimizer = problem.make_optimizer(model.parameters())
    scheduler = problem.make_scheduler(optimizer)
    scaler = torch.amp.GradScaler("cpu", init_scale=moves.scale)
    done = plain_steps(
        model, optimizer, scheduler, scaler, losses_of(problem, 0, steps), 0, 42, True, moves
    )
    assert any(done.skipped)  # the scaler moved on the way: its counters are not a fresh start's
    states = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    saved = {k: v.state_dict() for k, v in states.items()} | {"scaler": moves.saved(), "step": steps}
    torch.save(saved, path)


def plain_rule_continue(problem, path, moves, first: int, count: int) -> PlainSteps:  # noqa: ANN001
    """The plain loop that loads the checkpoint saved at step ``first`` and goes on ``count`` steps with the
    framework's scaler loaded."""
    saved = torch.load(path, weights_only=False)
    going_on = moves.loaded(saved["scaler"])
    states = (saved["model"], saved["optimizer"], saved["scheduler"], None)
    scaler = torch.amp.GradScaler("cpu", init_scale=going_on.scale)
    model, optimizer, scheduler, scaler = loaded(
        copy.deepcopy(problem.model), problem.make_optimizer, problem.make_scheduler, states, scaler
    )
    losses = losses_of(problem, first, count)
    return plain_steps(model, optimizer, scheduler, scaler, losses, first, 42, True, going_on)
