"""P5: trials per second of population mode (K members in one process) against ordinary trials.

Same task, same device, one run: ``search.training._trainer.train`` one setting after another, then
``search.training._population.train_population`` with K = 64 and K = 256 settings at once. Both sides do a
trial's whole measurement (training, the fp32 loss of the final weights, the evaluation); the fp32
zero-fraction reference and the initial evaluation, computed once per problem on both sides, are
warmed up before the clocks start. The settings are sampled like a search samples them (init_scale
2^0..2^24, growth, backoff, interval), the same list on both sides.

On a CPU, fp16 matrix products are compute-bound: batching K of them saves the per-op overhead but
not the arithmetic, so expect little there; on a GPU one trial of a tiny model is launch-bound and
the population fills the device (target >= 20x on seed-mlp).

    python -m bench.p5_population [--task seed-mlp] [--device cpu] [--ordinary 16] [--populations 64,256]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from search.scalers import ScalerConfig
from search.study import threads_per_process
from search.tasks import build_problem, resolve_task
from search.training import train, train_population

__all__ = ["main", "population_throughput", "sampled_configs"]


def sampled_configs(n: int, seed: int = 0) -> list[ScalerConfig]:
    """``n`` GradScaler settings drawn the way a search draws them (log-uniform init_scale)."""
    rng = np.random.default_rng(seed)
    return [
        ScalerConfig(
            init_scale=float(2.0 ** rng.uniform(0, 24)),
            growth_factor=float(rng.uniform(1.5, 4.0)),
            backoff_factor=float(rng.uniform(0.25, 0.75)),
            growth_interval=int(rng.choice([1, 10, 100, 2000])),
        )
        for _ in range(n)
    ]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def population_throughput(
    task: str = "seed-mlp",
    device: str = "cpu",
    populations: tuple[int, ...] = (64, 256),
    ordinary: int = 16,
    steps: int | None = None,
) -> list[tuple[str, float, float]]:
    """Trials per second, ordinary and per population size, on one task and device.

    Args:
        task: A built-in task name or ``package.module:callable``.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        populations: The population sizes K to time, one ``train_population`` call each.
        ordinary: How many ordinary trials to time (one after another).
        steps: Optimizer steps per trial instead of the task's epochs, or None.

    Returns:
        ``(label, trials per second, ratio to ordinary)`` rows, the ordinary row first (ratio 1).
    """
    where = torch.device(device)
    problem = build_problem(resolve_task(task), task, 42).to(where)
    configs = sampled_configs(max((ordinary, *populations)))
    # Warm-up: the per-problem caches (fp32 zero fraction, initial evaluation) and the kernels.
    train(problem, configs[0], epochs=problem.epochs, steps=steps)
    train_population(problem, configs[:2], epochs=problem.epochs, steps=steps)
    _sync(where)

    start = time.perf_counter()
    for cfg in configs[:ordinary]:
        train(problem, cfg, epochs=problem.epochs, steps=steps)
    _sync(where)
    base = ordinary / (time.perf_counter() - start)
    rows = [(f"ordinary ({ordinary} trials, one after another)", base, 1.0)]
    for k in populations:
        start = time.perf_counter()
        train_population(problem, configs[:k], epochs=problem.epochs, steps=steps)
        _sync(where)
        rate = k / (time.perf_counter() - start)
        rows.append((f"population {k}", rate, rate / base))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.p5_population",
        description="P5: trials/s of population mode against ordinary trials, same task and device, one run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", default="seed-mlp", help="built-in task or package.module:callable")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--ordinary", type=int, default=16, metavar="N", help="ordinary trials timed")
    parser.add_argument("--populations", default="64,256", metavar="K,K", help="population sizes timed")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="optimizer steps per trial (default: the task's epochs)",
    )
    args = parser.parse_args()
    populations = tuple(int(k) for k in args.populations.split(","))
    torch.set_num_threads(
        threads_per_process()
    )  # as the service trains: one thread unless OMP_NUM_THREADS says
    where = torch.device(args.device)
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else f"{os.cpu_count()} CPUs"
    print(
        f"P5 on {args.task}, {args.device} ({name}), torch {torch.__version__}, {torch.get_num_threads()}"
        " torch threads"
    )
    for label, rate, ratio in population_throughput(
        args.task, args.device, populations, args.ordinary, args.steps
    ):
        print(f"  {label:45s} {rate:9.2f} trials/s  {ratio:6.2f}x")
    if where.type == "cpu":
        print(
            "  (CPU: fp16 matrix products are compute-bound; batching saves per-op overhead, not arithmetic.)"
        )


if __name__ == "__main__":
    main()
