"""A trial's optimizer and learning-rate scheduler, continued from the problem's checkpoint when it has one.

Whether the scheduler steps on a step the scaler skipped differs between frameworks, and over a run with
many skips it moves the whole schedule:

* PyTorch's AMP recipe calls ``scheduler.step()`` every iteration, skipped or not;
* Lightning 2.6 does too (``lightning/pytorch/loops/training_epoch_loop.py``, ``update_lr_schedulers``:
  no check of the step);
* Hugging Face Trainer does not (transformers 5.25 ``trainer.py``: ``if not
  self.accelerator.optimizer_step_was_skipped: self.lr_scheduler.step()``);
* accelerate does not (accelerate 1.16 ``scheduler.py``, ``AcceleratedScheduler.step``: ``if
  opt.step_was_skipped: return``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn

from search.tasks import LoaderProblem, Problem


@dataclass
class Schedule:
    """A trial's optimizer, its scheduler (or None) and whether the scheduler steps on skipped steps."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    on_skipped_step: bool

    def learning_rate(self) -> float:
        """The rate the next optimizer step uses (the first parameter group's)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def after_step(self, skipped: torch.Tensor | float) -> None:
        """Steps the scheduler after an optimizer step, unless it was skipped and the framework waits.

        ``skipped``: the step's ``found_inf`` (read from the device only when it decides)."""
        if self.scheduler is None:
            return
        if self.on_skipped_step or not float(skipped) > 0:
            with warnings.catch_warnings():
                # The recipe steps the scheduler after a skipped first step on purpose; PyTorch warns of it.
                warnings.filterwarnings(
                    "ignore", "Detected call of `lr_scheduler.step()` before", UserWarning
                )
                self.scheduler.step()


def scheduler_steps_on_skip(problem: Problem | LoaderProblem) -> bool:
    """The task's setting, else the checkpoint's framework's behaviour, else PyTorch's AMP recipe's (True)."""
    if problem.scheduler_on_skipped_step is not None:
        return problem.scheduler_on_skipped_step
    if problem.start is not None and problem.start.scheduler_on_skipped_step is not None:
        return problem.start.scheduler_on_skipped_step
    return True


def schedule_of(problem: Problem | LoaderProblem, model: nn.Module) -> Schedule:
    """A fresh optimizer over ``model``'s parameters and its scheduler, each holding the checkpoint's state
    when the problem starts from one (a copy of it: every trial starts from the same state)."""
    optimizer = problem.make_optimizer(model.parameters())
    # Built before the states are loaded, as Hugging Face Trainer resumes: a new scheduler sets the rate of
    # its step 0, which the optimizer's saved param groups then replace.
    scheduler = None if problem.make_scheduler is None else problem.make_scheduler(optimizer)
    start = problem.start
    if start is not None and start.optimizer_state is not None:
        optimizer.load_state_dict(start.fresh_optimizer_state())
    if scheduler is not None and start is not None and start.scheduler_state is not None:
        scheduler.load_state_dict(dict(start.scheduler_state))
    return Schedule(optimizer, scheduler, scheduler_steps_on_skip(problem))
