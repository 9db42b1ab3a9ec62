"""seed-mlp, the original example's task (docs/fairness.md): an MLP 16-64-2 on a synthetic binary problem.

Reproduces the original example's random-number sequence exactly: ``torch.manual_seed(seed)``, then
``X = randn(2048, 16)``, then the label noise ``randn(2048)``, then the model is constructed.
Unlike the original example, the model is built once and every trial starts from these weights.
"""

from __future__ import annotations

import torch
from torch import nn

from search.tasks.base import Problem

N_SAMPLES = 2048
N_FEATURES = 16
HIDDEN = 64
LEARNING_RATE = 0.1
EPOCHS = 30


def build(seed: int) -> Problem:
    """Builds the original example's data and model from ``seed`` (the original example uses 42)."""
    torch.manual_seed(seed)
    inputs = torch.randn(N_SAMPLES, N_FEATURES)
    noise = torch.randn(N_SAMPLES)
    targets = (inputs[:, 0] * 2 + inputs[:, 1] * 1.5 + noise * 0.1 > 0).long()
    model = nn.Sequential(nn.Linear(N_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 2))
    return Problem(
        model=model,
        inputs=inputs,
        targets=targets,
        loss_fn=nn.CrossEntropyLoss(),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=LEARNING_RATE),
        epochs=EPOCHS,
    )
