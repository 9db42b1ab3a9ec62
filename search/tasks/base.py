"""The task interface: what one training problem hands the trainer."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
from torch import nn

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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
        epochs: Default number of full-batch optimizer steps.
    """

    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor
    loss_fn: LossFn
    make_optimizer: OptimizerFactory
    epochs: int

    def to(self, device: torch.device) -> Problem:
        """Returns a copy with the model and data on ``device``; ``self`` is unchanged."""
        return replace(
            self,
            model=copy.deepcopy(self.model).to(device),
            inputs=self.inputs.to(device),
            targets=self.targets.to(device),
        )

    def fingerprint(self) -> str:
        """A short hash of the initial weights and the data.

        Stored in the study so that every worker and every resume can prove it trains the
        same problem (a different torch build may draw different random numbers).
        """
        digest = hashlib.sha256()
        tensors = [self.inputs, self.targets] + [t for t in self.model.state_dict().values()]
        for tensor in tensors:
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]
