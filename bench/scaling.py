"""Scaling: time per trial as the steps per trial grow (the study's size: bench/study_size.py)."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import optuna
import torch

from bench.commands import BAD_INPUT, REPORT_HELP, command_costs
from bench.study_size import WINDOW, study_size
from search.core import DEFAULTS, with_run
from search.storage import enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.tasks.seed_mlp import build
from search.training import run_steps


def _run(path: str, trials: int, epochs: int) -> tuple[list[float], list[float]]:
    """(wall seconds per trial, train seconds per trial) of the trial loop on a new SQLite study."""
    settings = with_run(DEFAULTS, trials=trials, epochs=epochs, storage=f"sqlite:///{path}")
    problem = build(settings.run.seed)
    storage = open_storage(settings.run.storage)
    enable_wal(storage)
    sampler = make_sampler("tpe", 0)
    handle = prepare_study(storage, settings, problem.fingerprint(), sampler, optuna.pruners.NopPruner())
    stamps = [time.perf_counter()]
    Runner(
        handle.study,
        settings,
        problem,
        "cpu",
        torch.float16,
        sampler,
        None,
        on_trial=lambda state, value: stamps.append(time.perf_counter()),
        steps=run_steps(problem, settings.run.epochs, settings.run.steps),
    ).run()
    trials = handle.study.get_trials()
    storage.engine.dispose()
    walls = [b - a for a, b in zip(stamps, stamps[1:])]
    return walls, [t.user_attrs["train_seconds"] for t in trials]


def per_trial_vs_steps(
    directory: str, epochs: tuple[int, ...], trials: int
) -> list[tuple[int, float, float]]:
    """(epochs, median wall s/trial, median train s/trial) on seed-mlp (full batch: steps = epochs)."""
    rows = []
    for e in epochs:
        walls, train = _run(os.path.join(directory, f"steps{e}.db"), trials, e)
        rows.append((e, statistics.median(walls[5:]), statistics.median(train[5:])))  # Sampled trials.
    return rows


def scaling(args: argparse.Namespace, tmp: str) -> list[tuple[str, str, str]]:
    print("\nS  time per trial as steps grow (seed-mlp, full batch, TPE, SQLite; medians of sampled trials):")
    for epochs, wall, train in per_trial_vs_steps(tmp, (30, 100, 300), 15):
        print(
            f"  {epochs:4} steps   wall {wall * 1000:7.1f} ms   train {train * 1000:7.1f} ms   "
            f"overhead {(wall - train) * 1000:6.1f} ms"
        )
    sizes = tuple(int(n) for n in args.size_windows.split(","))
    print(
        f"\nS  one more trial as the study grows (seed-mlp, 1 step a trial, SQLite; medians of {WINDOW} TPE"
        " trials at each size, the study grown in between by random-sampled trials; ms a trial):"
    )
    print("  trials in study   service: wall  train    TPE  overhead   plain Optuna: whole    TPE   rest")
    ours, plain = study_size(tmp, sizes)
    for o, p in zip(ours, plain):
        print(
            f"  {o.size:15,}   {o.wall * 1e3:13.1f} {o.train * 1e3:6.1f} {o.sampling * 1e3:6.1f}"
            f" {o.overhead * 1e3:9.1f}   {p.wall * 1e3:19.1f} {p.sampling * 1e3:6.1f} {p.overhead * 1e3:6.1f}"
        )
    first, last, plain_last = ours[0], ours[-1], plain[-1]
    growth, share = last.overhead / first.overhead, last.overhead / plain_last.wall
    rows = [
        (
            f"S service overhead a trial, {first.size:,} -> {last.size:,} trials in the study",
            f"{first.overhead * 1e3:.1f} -> {last.overhead * 1e3:.1f} ms ({growth:.2f}x)",
            "<= 2x",
        ),
        (
            f"S service overhead vs plain Optuna's whole trial at {last.size:,} trials",
            f"{share:.3f}x (of its trial without TPE: {last.overhead / plain_last.overhead:.3f}x)",
            "<= 0.2x",
        ),
        (
            f"S TPE's own sampling a trial at {last.size:,} trials (Optuna's; service / plain)",
            f"{last.sampling * 1e3:.0f} / {plain_last.sampling * 1e3:.0f} ms",
            "",
        ),
    ]
    print(
        f"\nS  whole commands, start-up included, this tree vs {args.s_before} (medians of 5 alternating"
        " runs):"
    )
    costs = command_costs(tmp, args.s_before)
    for (name, target), (label, args_shown) in zip(
        (("bad input", 0.5), ("report --help", 1.0), ("report", 1.5)),
        (
            ("bad-input exit", " ".join(BAD_INPUT)),
            ("report --help", " ".join(REPORT_HELP)),
            ("report, finished 100-trial study", "search.report"),
        ),
    ):
        now, before = costs[name]["now"], costs[name]["before"]
        print(
            f"  {label:34} ({args_shown}) this tree {now:6.2f} s   {args.s_before} {before:6.2f} s  "
            f" {now / before:5.2f}x"
        )
        rows.append((f"S {label}", f"{now:.2f} s ({now / before:.2f}x)", f"<= {target} s"))
    return rows
