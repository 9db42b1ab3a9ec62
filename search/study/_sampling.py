"""Samplers and pruners for ``--sampler``/``--pruner``, and the per-worker sampler seed."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import optuna


def sampler_seed(task_seed: int, n_existing: int, worker: int = 0, process: str = "") -> int:
    """The sampler's seed, unique to each worker of each run.

    Derived from ``--seed``, the number of trials already in the study (so a resume never
    repeats earlier samples), the worker's index, and ``process`` (host name and pid: two hosts
    or two runs on one host that start at the same moment on the same study still differ).
    """
    digest = hashlib.sha256(process.encode()).digest()
    entropy = [task_seed, n_existing, worker, int.from_bytes(digest[:8], "little")]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``--sampler``.

    ``tpe`` is Optuna's default; in Optuna 5 it models the four settings jointly (TPE's
    ``multivariate`` flag is kept only for old code and unused), so it can see that a high scale is
    safe only with a backoff far from 1; ``gp`` is Optuna's Gaussian-process sampler (needs torch and scipy,
    both required here), strong on a few continuous parameters with small budgets;
    ``deterministic_objective=True`` because a trial re-run with the same settings gives the same
    value (common random numbers); ``cmaes`` and ``random`` as named.
    """
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        with warnings.catch_warnings():  # deterministic_objective is marked experimental; chosen knowingly.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed, deterministic_objective=True)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(name: str, epochs: int) -> optuna.pruners.BasePruner | None:
    """The Optuna pruner for ``--pruner`` (None: no pruning, no per-step syncs)."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=epochs // 3)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, epochs // 10), max_resource=epochs)
    return None
