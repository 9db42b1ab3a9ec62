"""A user task given as a DataLoader: a small conv net with BatchNorm and dropout on scikit-learn's digits.

Most training scripts do not hold their data as two tensors: they hold a ``DataLoader`` and a loss.
:class:`search.tasks.LoaderProblem` takes them as they are; this example is a template for that:

    python -m search.optimize --task examples.digits_convnet:build --trials 50

The data are ``sklearn.datasets.load_digits()`` (1797 8x8 images of 10 digits, shipped with
scikit-learn, no download), split into training and validation from the seed. The net has
``BatchNorm2d`` (running statistics: every trial starts from the initial ones) and ``Dropout`` (its
masks are seeded per step by the trainer, the same in every trial), so two trials with the same
settings still train bit-identically. The batches are drawn once, with the global RNG seeded from
``seed``, so the shuffled loader feeds every trial, worker and resume the same batches in the same
order. Every trial is judged on the validation loss of its final weights (fp32, eval mode).

The net is kept small because fp16 convolutions on a CPU take a slow path (measured: two 3x3
convs, 1-16-32 channels, on 64 8x8 images, forward and backward: 122 ms under autocast, 1.6 ms in
fp32); as it is, a trial takes about 0.4 s on one CPU thread.
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from search.tasks import LoaderProblem

VALIDATION = 360  # Of the 1797 images; the other 1437 train (23 batches of 64 a pass).


def split(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The training and validation sets: images scaled to [0, 1], a permutation drawn from ``seed``."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (1797, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    val, train = order[:VALIDATION], order[VALIDATION:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


def build(seed: int) -> LoaderProblem:
    """Two conv layers with BatchNorm, dropout, a linear head; Adam; 30 steps of 64 images (1.3 passes)."""
    train, val = split(seed)
    torch.manual_seed(seed)  # The initial weights.
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8 x 4 x 4
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),  # 16 x 4 x 4 = 256 features
        nn.Dropout(0.2),
        nn.Linear(256, 10),
    )
    return LoaderProblem(
        model=model,
        train_batches=DataLoader(train, batch_size=64, shuffle=True),  # Shuffled from the seeded global RNG.
        eval_batches=DataLoader(val, batch_size=120),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
        loss_fn=nn.functional.cross_entropy,
        steps=30,
        seed=seed,
    )
