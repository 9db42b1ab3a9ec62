"""deep-mlp: a task where the fp16 loss scale decides whether anything is learned.

seed-mlp learns the same with any init_scale from 2^-8 to 2^19. This one learns nothing at all
with PyTorch's default GradScaler (2^16, x2, x0.5, every 2000 steps), silently: no overflow, no NaN,
every trunk gradient exactly zero in fp16. 2^19..2^20 trains it to a loss about 80x lower.

Construction (all of it drawn from ``torch.Generator().manual_seed(seed)``; the global RNG is untouched):

* data: 2048 x ~ N(0, I_16); targets from a fixed random teacher ``tanh(1.5 x A) B`` (8 hidden units,
  64 outputs), standardised per output, so the untrained loss is ~1.0. MSE, i.e. a mean over
  batch x 64 outputs.
* student 16-32-32-32-32-32-64, tanh, no biases except the output layer's. Init: input layer exactly 0;
  layers 2-3 N(0, 1/fan_in); layers 4-5 and the output layer N(0, (2^-14)^2), at fp16's smallest normal
  number 6.1e-5 (a smaller weight would be flushed to zero by autocast's fp16 copy of it, at any scale).
* Adam(lr 0.02, eps 1e-20), mini-batches of 64 (order from ``shuffle_seed = seed``), 8 epochs = 256 steps.
* ``deep-mlp-large`` (for GPUs): the same with width 128, 8192 samples, batches of 256, 16 epochs = 512
  steps, lr 0.01. Batch x4 and width x4 cancel in the gradient chain below, so the edge stays put.

What it measures (tables of every setting's loss, skips and failure code): docs/deep-mlp.md.

Why. At the initial weights every hidden activation is exactly 0 (input layer 0, no biases), so the only
non-zero trunk gradient is the input layer's, dL/dW1 = d1^T x, and d1 (the gradient at layer 1's output)
comes back through three near-zero layers. Measured in fp32 on the first mini-batch (median / max per
element): 2(out - y)/(64 * 64) = 2^-11.4 / 2^-9.5 at the output; each near-zero layer multiplies by about
2^-14 * sqrt(fan_out) = 2^-11..2^-11.5, giving 2^-22.5 at layer 5's output, 2^-34 at layer 4's and 2^-45.5 /
2^-42.7 at layers 3, 2 and 1. fp16 spans 2^-24 = 6e-8 (smallest subnormal, one significant bit; full
precision from 2^-14 = 6.1e-5, the smallest normal) to 65504 = 2^16, and a scaled value below 2^-25 rounds
to exactly 0, so d1 needs a scale of 2^17.7 (largest entries) to 2^20.5 (median). Measured at the first
step: the share of non-zero input-layer gradients is 0 up to 2^17, 2.9% at 2^18, 84% at 2^19, 95% at 2^20.
At 2^16 the chain dies at layer 3 (2^-34 x 2^16 = 2^-18 survives as a subnormal, the next x2^-11.5 does
not). At the other end, the largest gradient at the start is the output bias's, 2^-7 (a sum over the
batch): it passes 65504 from 2^23 up, so GradScaler skips the first steps there, one per halving; after the
escape (~10 steps) the weight gradients reach 2^-5 and overflow above ~2^21, a few more skips. Between the
two, 2^19..2^20, nothing is skipped and nothing underflows. Above it GradScaler recovers by itself at one
skipped step per octave (a soft edge); below it nothing ever recovers (a hard edge): a zero gradient never
grows, and growth_interval 2000 > 256 steps never raises the scale. Adam makes the zero decisive: its first
step m/sqrt(v) is +-lr whatever the gradient's size (eps 1e-20 is far below the 2^-41 of dL/dW1), so the
input layer jumps from 0 to +-0.02 and the network escapes; a zero gradient moves nothing. With SGD (lr 0.1)
the tiny gradients are useless in fp32 too (loss still 1.00 after 256 steps): no loss scale could matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from search.tasks.base import Problem

__all__ = ["LARGE", "SMALL", "DeepMLPSize", "build", "build_large", "build_spikes", "build_sum", "make"]

IN_FEATURES = 16
OUT_FEATURES = 64  # The loss is a mean over batch x 64 outputs: small per-element gradients.
TEACHER_WIDTH = 8
TINY_STD = 2.0**-14  # fp16's smallest normal number (6.1e-5).
ADAM_EPS = 1e-20  # Far below every gradient here: Adam stays scale-free (see the docstring).
SPIKE_OUTLIERS = 4  # deep-mlp-spikes: training samples whose targets are corrupted...
SPIKE_FACTOR = 64.0  # ...by this factor: the rare mini-batches holding one have ~64x larger gradients.
EVAL_SAMPLES = 1024  # deep-mlp-spikes: clean validation samples from the same teacher.


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


def make(seed: int, size: DeepMLPSize, *, outliers: int = 0, summed: bool = False) -> Problem:
    """Builds the data, the teacher targets and the student's initial weights from ``seed``.

    Args:
        seed: Seeds everything (data, teacher, weights, mini-batch order).
        size: The variant's sizes.
        outliers: Training samples whose targets are multiplied by ``SPIKE_FACTOR`` (deep-mlp-spikes);
            the trials are then judged on ``EVAL_SAMPLES`` clean samples from the same teacher.
        summed: Train on the summed squared error (``reduction="sum"``, x4096 per batch of 64) instead
            of its mean (deep-mlp-sum); trials are still judged on the mean.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size.samples, IN_FEATURES, generator=generator)
    teacher_in = torch.randn(IN_FEATURES, TEACHER_WIDTH, generator=generator) / math.sqrt(IN_FEATURES)
    teacher_out = torch.randn(TEACHER_WIDTH, OUT_FEATURES, generator=generator) / math.sqrt(TEACHER_WIDTH)
    targets = torch.tanh(1.5 * inputs @ teacher_in) @ teacher_out
    mean, std = targets.mean(0), targets.std(0)
    targets = (targets - mean) / std  # Unit variance: the untrained loss is ~1.

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
    eval_inputs = eval_targets = None
    if outliers:
        # Drawn after everything above, so deep-mlp's own draws (and fingerprints) are unchanged.
        corrupted = torch.randperm(size.samples, generator=generator)[:outliers]
        eval_inputs = torch.randn(EVAL_SAMPLES, IN_FEATURES, generator=generator)
        eval_targets = (torch.tanh(1.5 * eval_inputs @ teacher_in) @ teacher_out - mean) / std
        targets = targets.clone()
        targets[corrupted] *= SPIKE_FACTOR
    return Problem(
        model=model,
        inputs=inputs,
        targets=targets,
        loss_fn=nn.MSELoss(reduction="sum") if summed else nn.MSELoss(),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=lr, eps=ADAM_EPS),
        epochs=size.epochs,
        batch_size=size.batch_size,
        shuffle_seed=seed,
        eval_inputs=eval_inputs,
        eval_targets=eval_targets,
        eval_fn=_mean_squared_error if summed else None,
    )


def _mean_squared_error(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(inputs).float(), targets)


def build(seed: int) -> Problem:
    """``deep-mlp``: the CPU-sized task (256 optimizer steps of 64 samples)."""
    return make(seed, SMALL)


def build_large(seed: int) -> Problem:
    """``deep-mlp-large``: the same construction, 4x wider, 4x the data and batch, 2x the passes."""
    return make(seed, LARGE)


def build_spikes(seed: int) -> Problem:
    """``deep-mlp-spikes``: deep-mlp with 4 corrupted training targets (x64), judged on clean data."""
    return make(seed, SMALL, outliers=SPIKE_OUTLIERS)


def build_sum(seed: int) -> Problem:
    """``deep-mlp-sum``: deep-mlp trained on the summed error for 2 passes (64 steps), judged on the mean."""
    return make(seed, replace(SMALL, epochs=2), summed=True)
