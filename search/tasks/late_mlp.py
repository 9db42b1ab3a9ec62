"""late-mlp: a task whose loss-scale trouble comes late, at step 320, where a run's checkpoint finds it.

Its inputs are two groups of 8 features. The first carries signal from step 0; the second is all zeros
until step :data:`LATE_STEP` (a sensor that comes online mid-run, a feature group added to the data) and
carries the rest of the targets from then on. The model reads each group through its own path and adds
the two: the first group through a plain MLP (16-32-32-64 at standard initialisation), the second through
deep-mlp's trunk (:mod:`search.tasks.deep_mlp`: input layer exactly 0, two standard layers, three layers
at fp16's smallest normal number, 2^-14).

* Steps 0 to 319: the second path's inputs are zero and its input layer is zero, so its every gradient is
  exactly 0 in fp16 and in fp32 alike (zero by construction, not underflow); the first path trains as any
  small MLP does, and PyTorch's default GradScaler (2^16) is fine: a diagnosis or a search from step 0 finds
  nothing wrong with it.
* From step 320: the second path must learn, and its input layer's gradient comes back through the three
  near-zero layers, about 2^-42 (deep-mlp's docstring): at 2^16 it rounds to 0 in fp16, and with a growth
  interval of 2000 the scale never rises in time. From a checkpoint at step 320 the default learns nothing of
  the new signal, and 2^19..2^20 does: what a diagnosis and a search from the checkpoint say.

Data and weights are drawn from ``torch.Generator().manual_seed(seed)``; Adam(lr 0.02, eps 1e-20), batches of
64 in a fixed order (the batch of step s is the same in every run), 64 steps a trial by default.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from search.tasks._loader import LoaderProblem
from search.tasks.deep_mlp import ADAM_EPS, TINY_STD, _linear

__all__ = ["LATE_STEP", "LateMLP", "build"]

LATE_STEP = 320  # The first step whose batches carry the second group of inputs.
GROUP = 8  # Features per group.
WIDTH = 32
OUT_FEATURES = 64
SAMPLES = 4096
BATCH = 64
STEPS = 64  # A trial's steps by default (--steps).
BATCHES = 1024  # Steps whose batches are laid out; a longer run cycles through them again.


class LateMLP(nn.Module):
    """The two paths, added: ``first(x[:, :8]) + second(x[:, 8:])``."""

    def __init__(self, first: nn.Sequential, second: nn.Sequential) -> None:
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.first(x[:, :GROUP]) + self.second(x[:, GROUP:])


def _path(generator: torch.Generator, stds: list[float]) -> nn.Sequential:
    sizes = [GROUP] + [WIDTH] * (len(stds) - 1) + [OUT_FEATURES]
    layers = [
        _linear(generator, sizes[i], sizes[i + 1], std, bias=i == len(stds) - 1) for i, std in enumerate(stds)
    ]
    modules: list[nn.Module] = []
    for layer in layers[:-1]:
        modules += [layer, nn.Tanh()]
    return nn.Sequential(*modules, layers[-1])


def build(seed: int) -> LoaderProblem:
    """``late-mlp``: the batches of :data:`BATCHES` steps, the second input group live from
    :data:`LATE_STEP`."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(SAMPLES, 2 * GROUP, generator=generator)
    teacher = [torch.randn(2 * GROUP, 8, generator=generator) / math.sqrt(2 * GROUP)]
    teacher.append(torch.randn(8, OUT_FEATURES, generator=generator) / math.sqrt(8))
    raw = torch.tanh(1.5 * inputs @ teacher[0]) @ teacher[1]
    mean, std = raw.mean(0), raw.std(0)
    targets = (raw - mean) / std  # Unit variance: the untrained loss is ~1.
    early_inputs = inputs.clone()
    early_inputs[:, GROUP:] = 0  # Before LATE_STEP the second group reads 0; the targets follow the first.
    early_targets = (torch.tanh(1.5 * early_inputs @ teacher[0]) @ teacher[1] - mean) / std
    first = _path(generator, [1 / math.sqrt(GROUP), 1 / math.sqrt(WIDTH), 1 / math.sqrt(WIDTH)])
    standard = 1 / math.sqrt(WIDTH)
    second = _path(generator, [0.0, standard, standard, TINY_STD, TINY_STD, TINY_STD])
    passes = BATCHES * BATCH // SAMPLES
    order = torch.cat([torch.randperm(SAMPLES, generator=generator) for _ in range(passes)])
    batches = []
    for step in range(BATCHES):
        index = order[step * BATCH : (step + 1) * BATCH]
        if step < LATE_STEP:
            batches.append((early_inputs[index], early_targets[index]))
        else:
            batches.append((inputs[index], targets[index]))
    held_out = torch.randn(1024, 2 * GROUP, generator=generator)
    held_targets = (torch.tanh(1.5 * held_out @ teacher[0]) @ teacher[1] - mean) / std
    return LoaderProblem(
        model=LateMLP(first, second),
        train_batches=batches,
        make_optimizer=lambda params: torch.optim.Adam(params, lr=2e-2, eps=ADAM_EPS),
        steps=STEPS,
        loss_fn=nn.MSELoss(),
        eval_batches=[(held_out[i : i + 256], held_targets[i : i + 256]) for i in range(0, 1024, 256)],
        seed=seed,
    )
