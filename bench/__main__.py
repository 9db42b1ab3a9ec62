"""``python -m bench``: the service's speed, each figure a ratio measured side by side.

P1  service overhead per trial (wall time per trial minus training time) on a default SQLite
    file, vs plain Optuna on a default SQLite file storing 3 params + 9 user attrs one call at a
    time with a trivial objective; plain Optuna on in-memory storage is the floor.
P2  our trainer vs a plain copy of the seed script's loop made device-correct (model and data
    on the device, fp16 autocast + GradScaler there), same work, interleaved repetitions.
P3  throughput of ``--workers 2`` vs ``--workers 1`` on the seed task and a SQLite study: trials
    per second from the first trial's start to the last trial's end (process start-up excluded),
    and wall time including start-up; rounds alternate the arms.

Not a test: these machines are shared and noisy, so it prints numbers and asserts nothing.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time

import optuna
import torch

from search.config import DEFAULTS
from search.config import with_run
from search.optimize import make_sampler
from search.runner import Runner
from search.storage import enable_wal
from search.storage import open_storage
from search.study import prepare_study
from search.tasks.seed_mlp import build
from search.trainer import ScalerConfig
from search.trainer import train


def plain_optuna_per_trial(storage: str | None, n_trials: int) -> float:
    """Seconds per trial of plain Optuna: 3 suggests, 9 set_user_attr, trivial objective."""
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        a = trial.suggest_float("init_scale", 2.0**-20, 2.0**32, log=True)
        b = trial.suggest_float("growth_factor", 1.01, 8.0, log=True)
        c = trial.suggest_float("backoff_factor", 0.05, 0.95)
        for i in range(9):
            trial.set_user_attr(f"attr_{i}", [float(i)] * 30 if i < 2 else float(i))
        return a * 0 + b + c

    start = time.perf_counter()
    study.optimize(objective, n_trials=n_trials)
    return (time.perf_counter() - start) / n_trials


def service_overhead_per_trial(path: str, n_trials: int) -> tuple[float, float, float]:
    """(overhead per trial, overhead per sampled trial, train seconds per trial) of our runner."""
    settings = with_run(DEFAULTS, trials=n_trials, storage=f"sqlite:///{path}")
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    stamps: list[float] = []
    runner = Runner(
        handle.study,
        settings,
        problem,
        "cpu",
        torch.float16,
        sampler,
        None,
        on_trial=lambda state, value: stamps.append(time.perf_counter()),
    )
    start = time.perf_counter()
    stats = runner.run()
    wall = time.perf_counter() - start
    trials = handle.study.get_trials()
    train_s = [t.user_attrs["train_seconds"] for t in trials]
    overhead = (wall - sum(train_s)) / len(trials)
    # Sampled trials only (the 5 baselines go through ask/tell): per-trial wall minus training.
    sampled = [b - a for a, b in zip(stamps[5:], stamps[6:])]
    sampled_overhead = statistics.median(w - t for w, t in zip(sampled, train_s[6:]))
    assert stats.completed == n_trials
    storage.engine.dispose()
    return overhead, sampled_overhead, statistics.fmean(train_s)


def seed_loop(
    model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor, cfg: ScalerConfig, epochs: int
) -> list[float]:
    """The seed script's train_with_config, device-correct, without its reset_parameters."""
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
    """(ours / seed loop, ours seconds, seed seconds), medians of interleaved runs."""
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


def workers_throughput(workers: int, n_trials: int, directory: str) -> tuple[float, float]:
    """(trials/s between the first start and the last end, wall seconds) of the real command."""
    path = os.path.join(directory, f"w{workers}.db")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "search.optimize", "--trials", str(n_trials), "--workers", str(workers)]
        + ["--storage", f"sqlite:///{path}", "--quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=directory,
    )
    wall = time.perf_counter() - start
    trials = optuna.load_study(storage=f"sqlite:///{path}", study_name="seed-mlp").get_trials()
    first = min(t.datetime_start for t in trials)
    last = max(t.datetime_complete for t in trials)
    return len(trials) / (last - first).total_seconds(), wall


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60, help="trials per P1 measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds for P1")
    parser.add_argument("--repeats", type=int, default=40, help="interleaved runs for P2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--p3-trials", type=int, default=200, help="trials per P3 run")
    parser.add_argument("--p3-rounds", type=int, default=2, help="alternating rounds for P3")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(
        f"torch {torch.__version__}, optuna {optuna.__version__}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads"
    )

    # Rounds alternate the arms so that a noisy neighbour hits both alike; medians are reported.
    rounds: list[tuple[float, float, float, float, float]] = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            memory = plain_optuna_per_trial(None, args.trials)
            plain = plain_optuna_per_trial("sqlite:///plain.db", args.trials)
            ours, ours_sampled, train_s = service_overhead_per_trial(
                os.path.join(tmp, "study.db"), args.trials
            )
            rounds.append((memory, plain, ours, ours_sampled, train_s))
            print(
                f"  round {r + 1}: plain {plain * 1000:.1f} ms, ours {ours * 1000:.1f} ms ({ours / plain:.2f}x)"
            )
    memory, plain, ours, ours_sampled, train_s = (statistics.median(col) for col in zip(*rounds))
    print(f"\nP1 overhead per trial ({args.trials} trials, TPE, median of {args.rounds} rounds):")
    print(f"  plain Optuna, in-memory (floor)        {memory * 1000:8.1f} ms")
    print(f"  plain Optuna, default SQLite           {plain * 1000:8.1f} ms   1.00x")
    print(
        f"  this service, SQLite, all trials       {ours * 1000:8.1f} ms   {ours / plain:.2f}x  (target <= 0.3x)"
    )
    print(
        f"  this service, SQLite, sampled trials   {ours_sampled * 1000:8.1f} ms   {ours_sampled / plain:.2f}x  (median)"
    )
    print(f"  (training itself: {train_s * 1000:.1f} ms per trial)")

    ratio, o, s = trainer_ratio(torch.device(args.device), args.repeats)
    print(f"\nP2 train time per trial on {args.device} (seed task, 30 epochs, median of {args.repeats}):")
    print(f"  seed loop, device-correct              {s * 1000:8.1f} ms   1.00x")
    print(f"  search.trainer.train                   {o * 1000:8.1f} ms   {ratio:.2f}x  (target <= 1.0x)")

    p3: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # The P1 rounds left us in a directory that no longer exists.
        for r in range(args.p3_rounds):
            for workers in (1, 2) if r % 2 == 0 else (2, 1):
                round_dir = os.path.join(tmp, f"r{r}")
                os.makedirs(round_dir, exist_ok=True)
                p3[workers].append(workers_throughput(workers, args.p3_trials, round_dir))
    (one, one_wall), (two, two_wall) = (
        tuple(statistics.median(col) for col in zip(*p3[k])) for k in (1, 2)
    )
    print(f"\nP3 throughput, seed task, {args.p3_trials} trials on SQLite (median of {args.p3_rounds} rounds):")
    print(f"  --workers 1                            {one:8.2f} trials/s   1.00x   (wall {one_wall:.1f} s)")
    print(
        f"  --workers 2                            {two:8.2f} trials/s   {two / one:.2f}x   "
        f"(wall {two_wall:.1f} s, {one_wall / two_wall:.2f}x)  (target >= 1.8x)"
    )


if __name__ == "__main__":
    main()
