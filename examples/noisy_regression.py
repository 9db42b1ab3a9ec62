"""A user task: a small residual MLP regressing a noisy sine, trained in mini-batches.

Written against the public interface only (``search.Problem``), as a template for your own:

    python -m search.optimize --task examples.noisy_regression:build --trials 50

(run from the repository root, or put the module anywhere on ``PYTHONPATH``). The callable gets the
study's seed and returns a :class:`search.Problem`; everything random is drawn from that seed, so
every worker and every resume builds the same data and the same initial weights.
"""

from __future__ import annotations

import torch
from torch import nn

from search import Problem


class Block(nn.Module):
    """A pre-norm residual block."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(self.norm(x)))


def build(seed: int) -> Problem:
    """1024 points of y = sin(3x) + noise; a 4-block residual MLP; AdamW with clipping."""
    generator = torch.Generator().manual_seed(seed)  # All randomness from the seed: data...
    x = torch.rand(1024, 1, generator=generator) * 4 - 2
    y = torch.sin(3 * x) + 0.05 * torch.randn(1024, 1, generator=generator)
    torch.manual_seed(seed)  # ...and the initial weights.
    model = nn.Sequential(nn.Linear(1, 32), *[Block(32) for _ in range(4)], nn.Linear(32, 1))
    return Problem(
        model=model,
        inputs=x,
        targets=y,
        loss_fn=nn.MSELoss(),
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=3e-3),
        epochs=4,  # 4 passes x 8 steps (1024 / 64 per micro-batch / 2 accumulated) = 32 optimizer steps
        batch_size=64,
        accumulation_steps=2,
        grad_clip=1.0,  # clip_grad_norm_ after scaler.unscale_ (the trainer does it)
        shuffle_seed=seed,
    )
