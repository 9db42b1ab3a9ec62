"""P2: our trainer vs a plain copy of the original example's loop, same work, interleaved repetitions; and the
general (LoaderProblem) path vs the tensor path on the same batches.

The copy is made device-correct (model and data on the device, fp16 autocast + GradScaler there)
and does not re-initialise the model per configuration; otherwise it is the original example's loop line for
line, on purpose (the original example: docs/fairness.md).
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from search.scalers import ScalerConfig
from search.tasks import LoaderProblem, Problem
from search.tasks.deep_mlp import build as deep_mlp
from search.tasks.seed_mlp import build
from search.training import batch_plan, train


def seed_loop(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, cfg: ScalerConfig, epochs: int
) -> list[float]:
    """The original example's train_with_config, device-correct, without its reset_parameters."""
    device_type = inputs.device.type
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(
        device_type,
        init_scale=cfg.init_scale,
        growth_factor=cfg.growth_factor,
        backoff_factor=cfg.backoff_factor,
        growth_interval=cfg.growth_interval,
    )
    losses = []
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        with torch.autocast(device_type=device_type, dtype=torch.float16):
            outputs = model(inputs)
            loss = criterion(outputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        if torch.isnan(loss) or torch.isinf(loss):
            break
    return losses


def trainer_ratio(device: torch.device, repeats: int) -> tuple[float, float, float]:
    """(ours / the original example's loop, ours seconds, its seconds), medians of interleaved runs."""
    problem = build(42).to(device)
    cfg = ScalerConfig(2.0**16, 2.0, 0.5, 2000)
    ours, theirs = [], []
    for _ in range(3):  # Warm-up of both.
        train(problem, cfg, epochs=30)
        seed_loop(copy.deepcopy(problem.model), problem.inputs, problem.targets, cfg, 30)
    for _ in range(repeats):
        t0 = time.perf_counter()
        train(problem, cfg, epochs=30)
        t1 = time.perf_counter()
        seed_loop(copy.deepcopy(problem.model), problem.inputs, problem.targets, cfg, 30)
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
    o, s = statistics.median(ours), statistics.median(theirs)
    return o / s, o, s


def as_loader(problem: Problem, steps: int) -> LoaderProblem:
    """``problem`` as a LoaderProblem: the same mini-batches in the same order, as (inputs, targets) pairs."""
    pairs = []
    for micro in batch_plan(problem, steps=steps):
        for index in micro:
            pairs.append(
                (problem.inputs, problem.targets)
                if index is None
                else (problem.inputs[index], problem.targets[index])
            )
    evaluation = list(
        zip(
            problem.inputs.split(problem.batch_size or len(problem.inputs)),
            problem.targets.split(problem.batch_size or len(problem.inputs)),
        )
    )
    return LoaderProblem(
        problem.model,
        pairs,
        problem.make_optimizer,
        steps,
        loss_fn=problem.loss_fn,
        eval_batches=evaluation,
        accumulation_steps=problem.accumulation_steps,
        grad_clip=problem.grad_clip,
        seed=problem.shuffle_seed,
    )


def loader_ratio(device: torch.device, repeats: int, steps: int = 256) -> tuple[float, float, float]:
    """(loader path / tensor path, loader seconds, tensor seconds) per trial on deep-mlp's mini-batches,
    medians of interleaved runs: the general path's cost for the same steps on the same batches."""
    tensor = deep_mlp(42).to(device)
    loader = as_loader(deep_mlp(42), steps).to(device)
    cfg = ScalerConfig(2.0**20, 2.0, 0.5, 2000)
    for _ in range(2):  # Warm-up of both (the loader's batches are drawn and moved once here).
        a, b = train(tensor, cfg, steps=steps), train(loader, cfg, steps=steps)
    assert a.loss_curve == b.loss_curve, "the two paths must do the same work"
    ours, theirs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        train(loader, cfg, steps=steps)
        t1 = time.perf_counter()
        train(tensor, cfg, steps=steps)
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
    o, s = statistics.median(ours), statistics.median(theirs)
    return o / s, o, s
