"""Tasks used only by the tests: each is the seed task with one part changed to force a behaviour."""

from __future__ import annotations

import itertools
import os
import pathlib
import time
from dataclasses import replace

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from search.tasks import LoaderProblem, Problem
from search.tasks.seed_mlp import build as build_seed


def exploding(seed: int) -> Problem:
    """A huge learning rate: the weights really diverge and the loss becomes NaN/Inf.

    GradScaler skips steps with inf gradients, so a real NaN loss needs finite but huge
    updates: lr=1e6 blows the fp16 forward pass up after one step.
    """
    return replace(build_seed(seed), make_optimizer=lambda params: torch.optim.SGD(params, lr=1e6))


MID_TRIAL_FLAG = "mid_trial.flag"
_calls = [0]


def _slow_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    time.sleep(0.05)
    _calls[0] += torch.is_grad_enabled()  # Training steps only, not the final fp32 evaluation.
    if (
        torch.is_grad_enabled() and _calls[0] % 30 == 10
    ):  # A third into each 30-epoch trial: tell the test a trial is in flight.
        pathlib.Path(MID_TRIAL_FLAG).write_text(str(os.getpid()))  # Which process is mid-trial.
    return nn.functional.cross_entropy(outputs, targets)


def slow(seed: int) -> Problem:
    """About 50 ms per step, so that a trial is still running when the test signals. On 256 of seed-mlp's
    2,048 records: a step's time is then its sleep, not fp16 matmuls on the CPU (~5 ms a step on all)."""
    problem = build_seed(seed)
    return replace(problem, inputs=problem.inputs[:256], targets=problem.targets[:256], loss_fn=_slow_loss)


_CALLS = itertools.count(1)


def _no_optimizer(params):
    raise RuntimeError(f"optimizer factory is broken on purpose (call {next(_CALLS)})")


def broken_optimizer(seed: int) -> Problem:
    """Builds fine, but every trial raises inside training, each time a little differently (call N), so
    that it is the --max-failed-trials bound that stops the run, not two identical failures."""
    return replace(build_seed(seed), make_optimizer=_no_optimizer)


LOADER_STEPS = 6


def seed_loader(seed: int) -> LoaderProblem:
    """The seed task's data, model and optimizer as a loader task: batches of 64 from a DataLoader,
    :data:`LOADER_STEPS` optimizer steps (a LoaderProblem counts steps, never epochs)."""
    problem = build_seed(seed)
    return LoaderProblem(
        model=problem.model,
        train_batches=DataLoader(TensorDataset(problem.inputs, problem.targets), batch_size=64, shuffle=True),
        make_optimizer=problem.make_optimizer,
        loss_fn=problem.loss_fn,
        steps=LOADER_STEPS,
        seed=seed,
    )


THREADS_SEEN: list[int] = (
    []
)  # torch's intra-op threads at each call of thread_counting's loss, in this process


def _thread_counting_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    THREADS_SEEN.append(torch.get_num_threads())
    return nn.functional.cross_entropy(outputs, targets)


def thread_counting(seed: int) -> Problem:
    """The seed task whose loss notes torch's thread count each time it runs (the start-up probe first)."""
    return replace(build_seed(seed), loss_fn=_thread_counting_loss)


def wrong_type(seed: int) -> dict:
    """Returns the wrong type: a user-task mistake that must be a one-line error."""
    return {"model": None}


def _sensor_data(seed: int, n: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean sensor records from a fixed teacher (drawn from ``seed``); ``offset`` picks other records."""
    teacher = torch.Generator().manual_seed(seed)
    w = torch.randn(12, 1, generator=teacher) / 12**0.5
    records = torch.Generator().manual_seed(seed + offset)
    x = torch.randn(n, 12, generator=records)
    noise = 0.05 * torch.randn(n, 1, generator=records)
    return x, torch.tanh(x @ w) * 2 + 0.3 * torch.sin(3 * x[:, :1]) + noise


def sensor_outliers(seed: int) -> Problem:
    """A realistic user task: an MLP on 2,048 sensor-like records, 0.3% of them corrupted.

    Six records carry 100x targets (a faulty sensor), which dominate the whole-data MSE however
    well the model fits the rest. Adam + clipping, 64-sample batches, 320 steps (10 epochs).
    """
    x, y = _sensor_data(seed, 2048, 1)
    corrupted = torch.randperm(2048, generator=torch.Generator().manual_seed(seed))[:6]
    y[corrupted] *= 100
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    return Problem(
        model=model,
        inputs=x,
        targets=y,
        loss_fn=nn.MSELoss(),
        make_optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
        epochs=10,
        batch_size=64,
        grad_clip=1.0,
        shuffle_seed=seed,
    )


def _mean_absolute_error(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (model(inputs).float() - targets).abs().mean()


def sensor_validation(seed: int) -> Problem:
    """``sensor_outliers`` judged on 512 clean held-out records with an eval function (mean absolute error).
    """
    x, y = _sensor_data(seed, 512, 2)
    return replace(sensor_outliers(seed), eval_inputs=x, eval_targets=y, eval_fn=_mean_absolute_error)


def still(seed: int) -> Problem:
    """lr 0: nothing moves, yet every gradient is finite and non-zero (a frozen run, not underflow)."""
    return replace(build_seed(seed), make_optimizer=lambda params: torch.optim.SGD(params, lr=0.0))


BUILDING_FLAG = "building.flag"


def slow_to_build(seed: int) -> Problem:
    """seed-mlp after 3 s of building, a flag file saying it started: a signal lands after the command's
    start-up guard is lifted and before its trial loop (where Python's defaults lost or muted it)."""
    pathlib.Path(BUILDING_FLAG).write_text(str(os.getpid()))
    time.sleep(3)
    return build_seed(seed)


def exits_at_build(seed: int) -> Problem:
    """A user task that calls sys.exit(0) while building: an error, never a success."""
    import sys

    sys.exit(0)


def _exiting_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    import sys

    sys.exit(0)


def exits_in_loss(seed: int) -> Problem:
    """Builds fine; its loss calls sys.exit(0) whenever it runs (the start-up probe catches it)."""
    return replace(build_seed(seed), loss_fn=_exiting_loss)


def _fails_in_training(seed: int, fail) -> Problem:
    """The seed task whose loss calls ``fail()`` whenever it runs with gradients, except the first time: the
    start-up probe's one step passes, the trials fail."""
    with_grad = [0]

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            with_grad[0] += 1
            if with_grad[0] > 1:  # The probe's step is the first.
                fail()
        return nn.functional.cross_entropy(outputs, targets)

    return replace(build_seed(seed), loss_fn=loss)


def exits_in_training(seed: int) -> Problem:
    """Passes the start-up probe (its one step with gradients); calls sys.exit(0) in the first trial."""
    return _fails_in_training(seed, lambda: _exiting_loss(None, None))


def _labels_out_of_range() -> None:
    raise ValueError("labels out of range")


def vector_loss(seed: int) -> Problem:
    """A user-task mistake: the loss keeps one value per sample (reduction="none")."""
    return replace(build_seed(seed), loss_fn=nn.CrossEntropyLoss(reduction="none"))


def raises_in_training(seed: int) -> Problem:
    """Passes the start-up probe; every trial then raises the same error in its loss (a task bug)."""
    return _fails_in_training(seed, _labels_out_of_range)


def activation_overflow(seed: int) -> Problem:
    """The seed task with a first layer whose outputs reach ~10^5 (weights x30000), then a LayerNorm: fp32 and
    bf16 normalise them and learn; fp16 autocast's Linear output is inf above 65504, the LayerNorm makes it
    NaN, and every step is skipped whatever the loss scale (a forward overflow, as T5's feed-forward layers
    have in fp16).
    """
    problem = build_seed(seed)
    first = nn.Linear(16, 64)
    with torch.no_grad():
        first.weight.mul_(30000.0)
    model = nn.Sequential(first, nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 2))
    return replace(problem, model=model)


def listening_worker(spec: object) -> int:
    """A ``run_pool`` target (search.study._workers): 128 + the signal it heard within 5 s, else 0."""
    from search.core import record_interrupts, take_pending

    record_interrupts()
    deadline = time.time() + 5
    while time.time() < deadline:
        signum = take_pending()
        if signum is not None:
            return 128 + signum
        time.sleep(0.01)
    return 0


def seed_run_length(seed: int) -> Problem:
    """seed-mlp standing for a real run of 60 steps (``run_steps``): twice its trials' 30."""
    return replace(build_seed(seed), run_steps=60)


class WarmupDecay:
    """A learning-rate factor: linear warm-up over ``warmup`` steps, then linear decay to 5% at ``total``
    (an object, not a lambda: LambdaLR saves an object's state with the scheduler's)."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return max(0.05, 1 - (step - self.warmup) / (self.total - self.warmup))


def scheduled(seed: int) -> Problem:
    """The seed task in mini-batches of 128 under AdamW with a warm-up-then-decay schedule, stepped on
    skipped steps too (PyTorch's AMP recipe)."""
    return replace(
        build_seed(seed),
        batch_size=128,
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=3e-3),
        make_scheduler=lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupDecay(8, 60)),
        epochs=2,
    )
