"""P4: search efficiency: trials until a sampler gets within 1% of the best-known objective.

Each sampler (random, TPE, CMA-ES) runs ``budget`` trials of a task from 5 sampler seeds, through the
service's own trial loop on in-memory storage (the seed baselines are enqueued first, as in every
study). The best-known objective is the lowest any run reached; a run "reaches" it at the first
trial within ``tolerance`` of it. A run that never does counts as ``budget + 1`` (censored: the
median is then a lower bound, printed with ">").
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import optuna
import torch

from search.config import DEFAULTS
from search.config import with_run
from search.optimize import make_sampler
from search.runner import Runner
from search.study import prepare_study
from search.tasks import build_problem
from search.tasks import resolve_task

SAMPLERS = ("random", "tpe", "cmaes")


@dataclass(frozen=True)
class SearchRun:
    """The objective values of one sampler run, in trial order."""

    sampler: str
    seed: int
    values: list[float]


def run_search(task: str, sampler: str, seed: int, budget: int) -> SearchRun:
    """``budget`` trials of ``task`` with ``sampler`` seeded ``seed``, in memory."""
    settings = with_run(DEFAULTS, task=task, trials=budget, sampler=sampler, storage="")
    problem = build_problem(resolve_task(task), task, settings.run.seed)
    settings = with_run(settings, epochs=problem.epochs)
    storage = optuna.storages.InMemoryStorage()
    chosen = make_sampler(sampler, seed)
    handle = prepare_study(storage, settings, problem.fingerprint(), chosen, optuna.pruners.NopPruner())
    Runner(handle.study, settings, problem, "cpu", torch.float16, chosen, None).run()
    trials = handle.study.get_trials(deepcopy=False)
    return SearchRun(sampler, seed, [t.value for t in trials if t.value is not None])


def trials_to_reach(values: list[float], target: float, budget: int) -> int:
    """1-based index of the first value <= target, or budget + 1."""
    return next((i + 1 for i, v in enumerate(values) if v <= target), budget + 1)


def search_efficiency(
    task: str, budget: int, seeds: int = 5, tolerance: float = 0.01
) -> tuple[float, dict[str, list[int]]]:
    """(best-known objective, trials-to-reach per sampler over the seeds)."""
    runs = [run_search(task, s, seed, budget) for seed in range(seeds) for s in SAMPLERS]
    best = min(min(r.values) for r in runs)
    target = best + tolerance * abs(best)
    reach = {s: [trials_to_reach(r.values, target, budget) for r in runs if r.sampler == s] for s in SAMPLERS}
    return best, reach


def median_label(counts: list[int], budget: int) -> tuple[float, str]:
    """The median and how to print it ('>60' when censored)."""
    m = statistics.median(counts)
    return m, (f">{budget}" if m > budget else f"{m:g}")
