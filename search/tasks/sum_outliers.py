"""sum-outliers: a task where DeepSpeed's default loss scaler ends the run and another of its settings trains.

Regression in the targets' own units (standard deviation 8, not standardised) on a **summed** squared error,
as fairseq's criterions and many token-summed LM losses are, with 6 corrupted labels among 4096 samples
(x10^4: a unit mistake). Measured numbers of every framework's default: docs/tasks.md.

Construction (all of it drawn from ``torch.Generator().manual_seed(seed)``; the global RNG is untouched):

* data: 4096 x ~ N(0, I_32); targets ``8 * standardise(tanh(x A) B)`` from a fixed random teacher (16 hidden
  units, 8 outputs); 6 training targets multiplied by 10^4; 1024 clean evaluation samples from the same
  teacher; the objective reads their mean squared error (the untrained model's: ~64);
* student 32-64-64-8, tanh, N(0, 1/fan_in) weights, zero biases; Adam(lr 3e-3); mini-batches of 64 in an
  order seeded by ``seed``; 3 epochs = 192 steps.

Why. A clean batch's largest gradient (the output layer's, a sum over 64 samples of errors of ~8) is a few
hundred: it overflows fp16 above a scale of about 2^7, so every rule first backs off to there. A batch that
holds a corrupted label has a gradient above 65504 even unscaled: it overflows at **every** scale and is
skipped (about one step in ten). Each such step costs DeepSpeed's rule a halving once its hysteresis is
spent (it refills only on growth, every 1000 clean steps by default), so the scale walks down to its
minimum of 1 and the next corrupted batch ends the run ("Current loss scale already at minimum"): at step
102 of 192 with the defaults, at step 106 with ZeRO's no-key default (2^32, hysteresis 1). With
``consecutive_hysteresis`` every clean step refills the hysteresis, a lone corrupted batch only spends it,
and the run trains to the end. PyTorch's GradScaler and fairseq's rule survive the same walk but end far
below the clean batches' edge (2^-4, 2^-5), where small gradients round to zero; Megatron clamps at 1
and goes on.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from search.tasks.base import Problem

__all__ = ["build"]

SAMPLES = 4096
EVAL_SAMPLES = 1024
IN_FEATURES, WIDTH, TEACHER_WIDTH, OUT_FEATURES = 32, 64, 16, 8
TARGET_STD = 8.0  # The targets' own units: a summed error of them gives gradients of a few hundred.
OUTLIERS = 6  # Corrupted training labels...
OUTLIER_FACTOR = 1e4  # ...by this factor: their batches overflow fp16 at every scale >= 1.


def _linear(generator: torch.Generator, fan_in: int, fan_out: int) -> nn.Linear:
    # skip_init: no default initialisation, so the global RNG is neither used nor advanced.
    layer = nn.utils.skip_init(nn.Linear, fan_in, fan_out)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(fan_out, fan_in, generator=generator) / math.sqrt(fan_in))
        layer.bias.zero_()
    return layer


def build(seed: int) -> Problem:
    """``sum-outliers``: the module docstring's task, drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(SAMPLES, IN_FEATURES, generator=generator)
    teacher_in = torch.randn(IN_FEATURES, TEACHER_WIDTH, generator=generator) / math.sqrt(IN_FEATURES)
    teacher_out = torch.randn(TEACHER_WIDTH, OUT_FEATURES, generator=generator) / 4.0
    raw = torch.tanh(inputs @ teacher_in) @ teacher_out
    mean, std = raw.mean(0), raw.std(0)
    eval_inputs = torch.randn(EVAL_SAMPLES, IN_FEATURES, generator=generator)
    eval_targets = TARGET_STD * ((torch.tanh(eval_inputs @ teacher_in) @ teacher_out - mean) / std)
    targets = TARGET_STD * (raw - mean) / std
    targets[torch.randperm(SAMPLES, generator=generator)[:OUTLIERS]] *= OUTLIER_FACTOR
    model = nn.Sequential(
        _linear(generator, IN_FEATURES, WIDTH),
        nn.Tanh(),
        _linear(generator, WIDTH, WIDTH),
        nn.Tanh(),
        _linear(generator, WIDTH, OUT_FEATURES),
    )
    return Problem(
        model=model,
        inputs=inputs,
        targets=targets,
        loss_fn=nn.MSELoss(reduction="sum"),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=3e-3),
        epochs=3,
        batch_size=64,
        shuffle_seed=seed,
        eval_inputs=eval_inputs,
        eval_targets=eval_targets,
        eval_fn=_mean_squared_error,
    )


def _mean_squared_error(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(inputs).float(), targets)
