"""P4: search efficiency: trials until a sampler gets within 1% of the best-known objective.

Run on several tasks where PyTorch's default is not the best (``TASKS``: deep-mlp, whose window is
above the default, and deep-mlp-spikes and deep-mlp-sum, whose good windows are closed on both sides).
Each sampler (random, TPE, multivariate TPE, GP, CMA-ES) runs ``budget`` sampled trials of a task from 5 sampler seeds,
through the service's own trial loop on in-memory storage (after the 5 seed baselines, which every
study runs first and which are not counted). The best-known objective is the lowest any run reached. Two targets, both with 1%:

* strict: within 1% of the best-known value itself, as the issue words it. On deep-mlp the
  objective of neighbouring good settings varies by ~±0.004 around 0.01, i.e. by ±40%, so this asks
  for the one lucky point rather than for a good region;
* of the gap: within 1% of the distance between the seed default (PyTorch's GradScaler, objective
  ~2.0 on deep-mlp: it underflows) and the best-known, i.e. 99% of the possible improvement.

A run "reaches" a target at its first trial at or below it; a run that never does counts as
``budget + 1`` (censored: the median is then a lower bound, printed with ">").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import optuna
import torch

from search.config import DEFAULTS, with_run
from search.record import DEFAULT_BASELINE, TRAIN_SECONDS, baseline_of
from search.runner import Runner
from search.sampling import make_sampler
from search.study import prepare_study
from search.tasks import build_problem, resolve_task

SAMPLERS = ("random", "tpe", "tpe-multivariate", "gp", "cmaes")
TASKS = ("deep-mlp", "deep-mlp-spikes", "deep-mlp-sum")


@dataclass(frozen=True)
class SearchRun:
    """The objective values of one sampler run, in trial order, and its seed-1 baseline's value."""

    sampler: str
    seed: int
    values: list[float]
    default: float
    overhead: float  # median seconds per sampled trial outside training: mostly the sampler's suggest


def run_search(task: str, sampler: str, seed: int, budget: int) -> SearchRun:
    """``budget`` trials of ``task`` with ``sampler`` seeded ``seed``, in memory."""
    settings = with_run(DEFAULTS, task=task, trials=budget + 5, sampler=sampler, storage="")
    problem = build_problem(resolve_task(task), task, settings.run.seed)
    settings = with_run(settings, epochs=problem.epochs)
    storage = optuna.storages.InMemoryStorage()
    chosen = make_sampler(sampler, seed)
    handle = prepare_study(storage, settings, problem.fingerprint(), chosen, optuna.pruners.NopPruner())
    Runner(handle.study, settings, problem, "cpu", torch.float16, chosen, None).run()
    trials = handle.study.get_trials(deepcopy=False)
    # Each sampled trial's own time outside training (the sampler's suggest is inside it), median:
    # a mean would charge one-time costs (the first optimizer's imports, a sampler's own imports)
    # to whichever sampler happens to run first in the process.
    overhead = statistics.median(
        (t.datetime_complete - t.datetime_start).total_seconds() - t.user_attrs.get(TRAIN_SECONDS, 0.0)
        for t in trials
        if baseline_of(t) is None and t.datetime_complete is not None
    )
    default = next(t.value for t in trials if baseline_of(t) == DEFAULT_BASELINE)
    # The five seed baselines run first in every study, whatever the sampler: they are not the
    # sampler's work (seed-3, 2^24, alone is within the gap target on deep-mlp), so they are not
    # counted; the budget is of sampled trials.
    sampled = [t.value for t in trials if t.value is not None and baseline_of(t) is None]
    return SearchRun(sampler, seed, sampled, default, overhead)


def trials_to_reach(values: list[float], target: float, budget: int) -> int:
    """1-based index of the first value <= target, or budget + 1."""
    return next((i + 1 for i, v in enumerate(values) if v <= target), budget + 1)


def search_efficiency(
    task: str, budget: int, seeds: int = 5, tolerance: float = 0.01
) -> tuple[float, float, dict[str, dict[str, list[int]]], dict[str, float]]:
    """(best-known objective, the default's objective, trials-to-reach per target and sampler,
    median seconds per trial outside training per sampler)."""
    runs = [run_search(task, s, seed, budget) for seed in range(seeds) for s in SAMPLERS]
    best = min(min(r.values) for r in runs)
    default = runs[0].default  # The same in every run: same data, weights and settings.
    targets = {"strict": best + tolerance * abs(best), "gap": best + tolerance * (default - best)}
    reach = {
        name: {s: [trials_to_reach(r.values, t, budget) for r in runs if r.sampler == s] for s in SAMPLERS}
        for name, t in targets.items()
    }
    overhead = {s: statistics.median(r.overhead for r in runs if r.sampler == s) for s in SAMPLERS}
    return best, default, reach, overhead


def choose_default(
    medians: dict[str, dict[str, float]], overhead: dict[str, dict[str, float]]
) -> tuple[str, dict[str, float], dict[str, float]]:
    """The sampler that needs the fewest trials over the tasks, and how that was decided.

    ``medians[task][sampler]`` is the median (over sampler seeds) of the trials to the gap target.
    A sampler's score is the median of those over the tasks (the median task); ties go to the
    sampler that costs less time per trial outside training (its median over the tasks).

    Returns:
        (the chosen sampler, each sampler's score, each sampler's median time per trial).
    """
    score = {s: statistics.median(medians[t][s] for t in medians) for s in SAMPLERS}
    cost = {s: statistics.median(overhead[t][s] for t in overhead) for s in SAMPLERS}
    return min(SAMPLERS, key=lambda s: (score[s], cost[s])), score, cost


def median_label(counts: list[int], budget: int) -> tuple[float, str]:
    """The median and how to print it ('>40' when censored at a budget of 40)."""
    m = statistics.median(counts)
    return m, (f">{budget}" if m > budget else f"{m:g}")
