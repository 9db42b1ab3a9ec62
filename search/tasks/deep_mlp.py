"""deep-mlp: DRAFT (docstring with the measured evidence follows)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from search.tasks.base import Problem

__all__ = ["LARGE", "SMALL", "DeepMLPSize", "build", "build_large", "make"]

IN_FEATURES = 16
OUT_FEATURES = 64  # The loss is a mean over batch x 64 outputs: small per-element gradients.
TEACHER_WIDTH = 8
TINY_STD = 2.0**-14  # fp16's smallest normal number (6.1e-5).
ADAM_EPS = 1e-20  # Far below every gradient here: Adam stays scale-free (see the docstring).


@dataclass(frozen=True)
class DeepMLPSize:
    """The sizes of one variant; everything else is the same construction."""

    samples: int
    width: int
    batch_size: int
    epochs: int
    learning_rate: float


SMALL = DeepMLPSize(samples=2048, width=32, batch_size=64, epochs=8, learning_rate=2e-2)
LARGE = DeepMLPSize(samples=8192, width=128, batch_size=256, epochs=16, learning_rate=1e-2)


def _linear(generator: torch.Generator, fan_in: int, fan_out: int, std: float, bias: bool) -> nn.Linear:
    # skip_init: no default initialisation, so the global RNG is neither used nor advanced.
    layer = nn.utils.skip_init(nn.Linear, fan_in, fan_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(fan_out, fan_in, generator=generator) * std)
        if layer.bias is not None:
            layer.bias.zero_()
    return layer


def make(seed: int, size: DeepMLPSize) -> Problem:
    """Builds the data, the teacher targets and the student's initial weights from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size.samples, IN_FEATURES, generator=generator)
    teacher_in = torch.randn(IN_FEATURES, TEACHER_WIDTH, generator=generator) / math.sqrt(IN_FEATURES)
    teacher_out = torch.randn(TEACHER_WIDTH, OUT_FEATURES, generator=generator) / math.sqrt(TEACHER_WIDTH)
    targets = torch.tanh(1.5 * inputs @ teacher_in) @ teacher_out
    targets = (targets - targets.mean(0)) / targets.std(0)  # Unit variance: the untrained loss is ~1.

    w = size.width
    layers = [
        _linear(generator, IN_FEATURES, w, 0.0, bias=False),  # input layer: exactly zero
        _linear(generator, w, w, 1 / math.sqrt(w), bias=False),  # standard init
        _linear(generator, w, w, 1 / math.sqrt(w), bias=False),  # standard init
        _linear(generator, w, w, TINY_STD, bias=False),  # near zero
        _linear(generator, w, w, TINY_STD, bias=False),  # near zero
        _linear(generator, w, OUT_FEATURES, TINY_STD, bias=True),  # output layer, near zero
    ]
    modules: list[nn.Module] = []
    for layer in layers[:-1]:
        modules += [layer, nn.Tanh()]
    model = nn.Sequential(*modules, layers[-1])
    lr = size.learning_rate
    return Problem(
        model=model,
        inputs=inputs,
        targets=targets,
        loss_fn=nn.MSELoss(),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=lr, eps=ADAM_EPS),
        epochs=size.epochs,
        batch_size=size.batch_size,
        shuffle_seed=seed,
    )


def build(seed: int) -> Problem:
    """``deep-mlp``: the CPU-sized task (256 optimizer steps of 64 samples)."""
    return make(seed, SMALL)


def build_large(seed: int) -> Problem:
    """``deep-mlp-large``: the same construction, 4x wider, 4x the data and batch, 2x the passes."""
    return make(seed, LARGE)
