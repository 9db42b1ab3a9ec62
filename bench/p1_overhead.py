"""P1: the service's overhead per trial vs plain Optuna, both on a default SQLite file.

Overhead = wall time per trial minus training time. Two plain-Optuna arms, each a trivial objective
run by ``study.optimize``: the *same values* the service stores for a trial (its 4 params with the
same distributions, its user attrs, its loss curve via ``trial.report``; also without the curve),
and the guide's reference of 3 float params + 9 user attrs. Plain Optuna in memory is the floor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import optuna
import torch
from optuna.trial import FrozenTrial

from search.core import DEFAULTS, suggest, with_run
from search.storage import enable_wal, open_storage
from search.study import Runner, make_sampler, prepare_study
from search.tasks.seed_mlp import build
from search.training import run_steps


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

    return _optimize_seconds_per_trial(study, objective, n_trials)


def plain_same_values_per_trial(
    storage: str | None, n_trials: int, template: FrozenTrial, curve: bool
) -> float:
    """Seconds per trial of plain Optuna storing what the service stores for ``template``.

    The same search space (``search.core._space.distributions`` of the defaults: 3 floats and the integer
    growth_interval), the same user attrs set one by one, and with ``curve`` the same loss curve
    reported as intermediate values (one ``trial.report`` per epoch, as plain Optuna code does it).
    """
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
    space = DEFAULTS.space

    def objective(trial: optuna.Trial) -> float:
        suggest(trial, space)
        for key, value in template.user_attrs.items():
            trial.set_user_attr(key, value)
        if curve:
            for step, value in sorted(template.intermediate_values.items()):
                trial.report(value, step)
        assert template.value is not None
        return template.value

    return _optimize_seconds_per_trial(study, objective, n_trials)


def _optimize_seconds_per_trial(
    study: optuna.Study, objective: Callable[[optuna.Trial], float], n: int
) -> float:
    start = time.perf_counter()
    study.optimize(objective, n_trials=n)
    return (time.perf_counter() - start) / n


def service_overhead_per_trial(path: str, n_trials: int) -> tuple[float, float, float, FrozenTrial]:
    """Our runner's overhead per trial, per sampled trial, train seconds per trial, and its last trial."""
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
        steps=run_steps(problem, settings.run.epochs, settings.run.steps),
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
    return overhead, sampled_overhead, statistics.fmean(train_s), trials[-1]


def user_side_per_trial(
    directory: str, plain_script: str, first: int = 20, second: int = 40, third: int = 100
) -> tuple[float, float]:
    """Overhead per extra trial as the user pays it: whole commands, start-up and end-of-run work included.

    Two resumed runs of the same command (``first`` -> ``second`` trials, then ``second`` -> ``third``);
    each run's wall time minus the training of the trials it added; the difference of the two over the
    difference in trials is what one more trial costs, start-up and every fixed cost cancelling. The
    same for ``plain_script``, a plain-Optuna program that stores 3 params + 9 attrs per trial on
    SQLite with the same training, and for the same program searching growth_interval too (the service's
    four params). Returns (ours, plain, plain with four params) in seconds per extra trial.
    """
    import os
    import subprocess
    import sys

    def run(args: list[str], db: str) -> tuple[float, float]:
        before = _train_seconds(db)
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=directory, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        return wall, _train_seconds(db) - before

    out = []
    for command, db in (
        (lambda n: ["-m", "search.optimize", "--trials", str(n), "--quiet"], "study.db"),
        (lambda n: [plain_script, str(n)], "plain-user.db"),
        (lambda n: [plain_script, str(n), "four"], "plain-user-4.db"),
    ):
        db = os.path.join(directory, db)
        run(command(first), db)
        wall_a, train_a = run(command(second), db)
        wall_b, train_b = run(command(third), db)
        out.append(((wall_b - train_b) - (wall_a - train_a)) / ((third - second) - (second - first)))
    return out[0], out[1], out[2]


def _train_seconds(db: str) -> float:
    import os

    if not os.path.exists(db):
        return 0.0
    storage = f"sqlite:///{db}"
    total = 0.0
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(storage=storage, study_name=summary.study_name)
        total += sum(t.user_attrs.get("train_seconds", 0.0) for t in study.get_trials(deepcopy=False))
    return total


PLAIN_USER_SCRIPT = '''
"""Plain Optuna as a user would write it: seed-mlp trained for real, 3 params + 9 attrs, SQLite; with a
second argument, growth_interval searched too, as the service searches it (4 params)."""
import sys, time, optuna, torch
from search.tasks.seed_mlp import build
from search.scalers import ScalerConfig
from search.training import train
optuna.logging.set_verbosity(optuna.logging.WARNING)
problem = build(42)
four = len(sys.argv) > 2
db = "sqlite:///plain-user-4.db" if four else "sqlite:///plain-user.db"
study = optuna.create_study(storage=db, study_name="plain", load_if_exists=True)
def objective(trial):
    cfg = ScalerConfig(trial.suggest_float("init_scale", 2.0**-20, 2.0**32, log=True),
                       trial.suggest_float("growth_factor", 1.01, 8.0, log=True),
                       trial.suggest_float("backoff_factor", 0.05, 0.95),
                       trial.suggest_int("growth_interval", 1, 2000, log=True) if four else 2000)
    start = time.perf_counter()
    result = train(problem, cfg, epochs=30)
    trial.set_user_attr("train_seconds", time.perf_counter() - start)
    trial.set_user_attr("loss_curve", result.loss_curve)
    for i in range(7):
        trial.set_user_attr(f"attr_{i}", float(i))
    return result.final_loss
torch.set_num_threads(1)
n = int(sys.argv[1])
done = sum(t.state.is_finished() for t in study.trials)
study.optimize(objective, n_trials=max(0, n - done))
'''
