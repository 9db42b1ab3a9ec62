"""The task interface: what one training problem hands the trainer."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch import nn

from search.tasks._start import StartState

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EvalFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Problem:
    """One fixed training problem: data, initial weights, loss and optimizer.

    A task builds a ``Problem`` once per process from the study's seed. Every trial trains a
    deep copy of ``model``, so all trials start from the same weights on the same data
    (common random numbers): differences between trials come from the scaler alone.

    Attributes:
        model: The model with its initial weights. Never trained in place.
        inputs: Full-batch inputs.
        targets: Full-batch targets.
        loss_fn: ``loss_fn(outputs, targets)`` returning a scalar tensor.
        make_optimizer: Builds a fresh optimizer over the trial's model parameters.
        epochs: Default number of passes over the data (``--epochs`` overrides it).
        batch_size: Samples per micro-batch; None trains on the full batch.
        accumulation_steps: Micro-batches whose gradients are accumulated per optimizer step.
        grad_clip: Max global gradient norm (``clip_grad_norm_`` after ``scaler.unscale_``), or None.
        shuffle_seed: Seeds the order of the mini-batches, the same in every trial.
        eval_inputs: Validation inputs every trial's final weights are judged on, or None for
            the training data (see :mod:`search.training._evaluation`).
        eval_targets: Validation targets (given together with ``eval_inputs``).
        eval_fn: ``eval_fn(model, inputs, targets)`` returning a scalar tensor, the evaluation
            loss (lower is better); None uses ``loss_fn`` on fp32 outputs.
        run_steps: The optimizer steps of the real run this task stands for, or None: the answer and
            the default are then trained that long after a search, a confirmation or a diagnosis,
            their skipped steps shown (``--run-steps`` wins over it).
        make_scheduler: Builds the learning-rate scheduler over a trial's optimizer (warm-up, cosine, any
            ``torch.optim.lr_scheduler``), stepped once per optimizer step; None keeps the optimizer's rate.
        scheduler_on_skipped_step: Whether the scheduler also steps on a step the scaler skipped: PyTorch's
            AMP recipe and Lightning do, Hugging Face Trainer and accelerate do not. None: as the
            checkpoint's framework does, else as PyTorch's recipe does.
        start: The checkpoint every trial continues from (:func:`search.tasks.start_from`), or None: the
            initial weights at step 0.
    """

    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor
    loss_fn: LossFn
    make_optimizer: OptimizerFactory
    epochs: int
    batch_size: int | None = None
    accumulation_steps: int = 1
    grad_clip: float | None = None
    shuffle_seed: int = 0
    eval_inputs: torch.Tensor | None = None
    eval_targets: torch.Tensor | None = None
    eval_fn: EvalFn | None = None
    run_steps: int | None = None
    make_scheduler: SchedulerFactory | None = None
    scheduler_on_skipped_step: bool | None = None
    start: StartState | None = None

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.run_steps is not None and self.run_steps < 1:
            raise ValueError(f"run_steps must be >= 1 or None, got {self.run_steps}")
        if len(self.inputs) != len(self.targets):
            raise ValueError(
                f"inputs and targets differ in length: {len(self.inputs)} vs {len(self.targets)}"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {self.batch_size}")
        if self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1, got {self.accumulation_steps}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        if (self.eval_inputs is None) != (self.eval_targets is None):
            raise ValueError("eval_inputs and eval_targets must be given together")
        if self.eval_inputs is not None and len(self.eval_inputs) != len(self.eval_targets):
            raise ValueError(
                f"eval_inputs and eval_targets differ in length: {len(self.eval_inputs)} vs"
                f" {len(self.eval_targets)}"
            )
        if self.eval_inputs is not None and len(self.eval_inputs) == 0:
            raise ValueError("eval_inputs is empty")

    def evaluation_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The data every trial's final weights are judged on: the validation data, else the training data."""
        if self.eval_inputs is not None:
            return self.eval_inputs, self.eval_targets
        return self.inputs, self.targets

    def to(self, device: torch.device) -> Problem:
        """Returns a copy with the model and data on ``device``; ``self`` is unchanged."""
        return replace(
            self,
            model=copy.deepcopy(self.model).to(device),
            inputs=self.inputs.to(device),
            targets=self.targets.to(device),
            eval_inputs=None if self.eval_inputs is None else self.eval_inputs.to(device),
            eval_targets=None if self.eval_targets is None else self.eval_targets.to(device),
        )

    def fingerprint(self, steps: int | None = None) -> str:
        """A short hash of the initial weights and the data (``steps``: unused; every step draws from them).

        Stored in the study so that every worker and every resume can prove it trains the
        same problem (a different torch build may draw different random numbers).
        """
        digest = hashlib.sha256()
        if (self.batch_size, self.accumulation_steps, self.grad_clip) != (None, 1, None):
            # How it is trained is part of the problem too (a full-batch task adds nothing here,
            # so the fingerprints of studies made before these fields existed still match).
            knobs = (self.batch_size, self.accumulation_steps, self.grad_clip, self.shuffle_seed)
            digest.update(repr(knobs).encode())
        tensors = [self.inputs, self.targets] + [t for t in self.model.state_dict().values()]
        if self.eval_inputs is not None:  # Absent validation data adds nothing (old fingerprints hold).
            digest.update(b"eval")
            tensors += [self.eval_inputs, self.eval_targets]
        if self.start is not None:  # So does the absent checkpoint.
            digest.update(f"start {self.start.digest()}".encode())
        for tensor in tensors:
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]
