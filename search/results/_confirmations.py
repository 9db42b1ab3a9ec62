"""The read side of confirmation runs: collecting them, the paired statistics, the table.

``python -m search.confirm`` writes the runs into the sibling study ``<study>.confirm``
(:mod:`search.confirmation._confirmation_runs`); this module reads them back for the command, for
``search.report`` and for :func:`search.results._recommendation.recommend`, without importing the command.
Each configuration is compared with PyTorch's default by a two-sided paired t-test over the data
seeds (``scipy.stats.ttest_rel``, alpha :data:`ALPHA`).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import (
    CHECK,
    CONFIRM_SUFFIX,
    CORNER,
    DATA_SEED,
    DEFAULTS,
    EVAL_LOSS,
    EVAL_MEDIAN,
    POINT,
    SOURCE_TRIAL,
    failure_of,
)
from search.results._score import run_score
from search.scalers import GRADSCALER, RULES, TORCH
from search.storage import StorageError, close_storage, open_existing_storage

SUFFIX = CONFIRM_SUFFIX
DEFAULT_LABEL = GRADSCALER.default_label  # PyTorch's default GradScaler settings: "seed-1 (default)".
ALPHA = 0.05


def default_label(scaler: str = TORCH) -> str:
    """The label of the default's runs: the rule's (``seed-1 (default)``, ``deepspeed-default (default)``)."""
    return RULES[scaler].default_label


def is_default(label: str) -> bool:
    """Whether ``label`` names the default's runs, under any rule."""
    return any(label == rule.default_label for rule in RULES.values())


def config_key(source_trial: int | None, params: dict[str, Any]) -> str:
    # Keyed by source trial and params, not by label: a rank can change when the search goes on.
    canon = {k: float(v) if isinstance(v, (int, float)) else v for k, v in sorted(params.items())}
    return json.dumps([source_trial, canon], sort_keys=True)


def confirm_study_name(study_name: str) -> str:
    """The sibling study holding the confirmation runs of ``study_name``."""
    return study_name + SUFFIX


def confirmation_seeds(study_seed: int, k: int) -> list[int]:
    """The data/initialisation seeds of a confirmation: ``study_seed + 1 ... study_seed + k``."""
    return [study_seed + i for i in range(1, k + 1)]


# -- reading the confirmation back ------------------------------------------------------------


@dataclass
class ConfigRuns:
    """A configuration's runs on the requested seeds, for the table."""

    candidate: dict[str, Any]  # label, source_trial, params (as stored in the sibling's attrs)
    values: dict[int, float]  # data seed -> score (:func:`run_score`)
    final_losses: dict[int, float | None]  # data seed -> the evaluation the objective reads


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1); nan where undefined."""
    array = np.asarray(values, dtype=float)
    mean = float(array.mean()) if array.size else math.nan
    sd = float(array.std(ddof=1)) if array.size > 1 else math.nan
    return mean, sd


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _open_existing(url: str) -> optuna.storages.RDBStorage | None:
    """The storage if it already holds Optuna's schema (nothing is created), else None."""
    try:
        return open_existing_storage(url)
    except StorageError as e:
        if "does not exist" in str(e) or "holds no Optuna studies" in str(e):
            return None
        raise


def collect_runs(
    storage: optuna.storages.BaseStorage, study_name: str
) -> tuple[list[int], list[ConfigRuns], list[dict[str, Any]]] | None:
    """The latest confirmation's seeds, each configuration's runs and the corner runs, or None
    without a sibling study. A corner run is ``{"point", "failure", "value", "data_seed"}``."""
    sibling_name = confirm_study_name(study_name)
    try:
        study_id = storage.get_study_id_from_name(sibling_name)
    except KeyError:
        return None
    attrs = storage.get_study_user_attrs(study_id)
    penalty = storage.get_study_user_attrs(storage.get_study_id_from_name(study_name)).get("penalty") or {}
    skip_weight = float(penalty.get("skip", DEFAULTS.penalty.skip))
    judged = EVAL_MEDIAN if penalty.get("evaluation") == "median" else EVAL_LOSS
    seeds = [int(s) for s in attrs.get("seeds", [])]
    configs = list(attrs.get("configs", []))
    runs: dict[tuple[str, int], FrozenTrial] = {}
    corners = []
    for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get(CHECK) == CORNER:
            corners.append(
                {
                    "point": dict(t.user_attrs[POINT]),
                    "failure": failure_of(t),
                    "value": t.value,
                    "data_seed": t.user_attrs.get(DATA_SEED),
                }
            )
            continue
        seed = t.user_attrs.get(DATA_SEED)
        if seed is not None and t.value is not None:
            runs.setdefault((config_key(t.user_attrs.get(SOURCE_TRIAL), t.params), int(seed)), t)
    stats = []
    for config in configs:
        key = config_key(config["source_trial"], config["params"])
        found = {s: runs[(key, s)] for s in seeds if (key, s) in runs}
        stats.append(
            ConfigRuns(
                candidate=config,
                values={s: run_score(t, skip_weight) for s, t in found.items()},
                final_losses={s: t.user_attrs.get(judged) for s, t in found.items()},
            )
        )
    return seeds, stats, corners


@dataclass(frozen=True)
class _Paired:
    """best-1 against the default over the seeds where both ran."""

    comparison: dict[str, Any]
    n: int
    sd_diff: float | None
    same_settings: bool
    tie: bool


def paired_comparison(seeds: list[int], stats: list[ConfigRuns], label: str = "best-1 ") -> _Paired | None:
    """The paired comparison of a config (best-1 unless ``label`` says) with the default, or None."""
    best = next((s for s in stats if s.candidate["label"].startswith(label)), None)
    default = next((s for s in stats if is_default(s.candidate["label"])), None)
    if best is None or default is None:
        return None
    paired = [s for s in seeds if s in best.values and s in default.values]
    a = np.array([best.values[s] for s in paired])
    b = np.array([default.values[s] for s in paired])
    mean_diff, sd_diff = mean_sd(a - b)
    t, p, test = paired_test(a, b)
    tie = len(paired) >= 2 and bool(np.all(a == b))
    comparison = {
        "best_label": best.candidate["label"],
        "default_label": default.candidate["label"],
        "mean_diff": _finite(mean_diff),
        "t": _finite(t),
        "p": _finite(p),
        "better_beyond_noise": bool(math.isfinite(p) and p < ALPHA and mean_diff < 0),
        "worse_beyond_noise": bool(math.isfinite(p) and p < ALPHA and mean_diff > 0),
        "test": test,
    }
    same = config_key(None, best.candidate["params"]) == config_key(None, default.candidate["params"])
    return _Paired(comparison, len(paired), _finite(sd_diff), same, tie)


def paired_test(best: Sequence[float], default: Sequence[float]) -> tuple[float, float, str]:
    """Two-sided paired t-test of ``best`` against ``default`` over seeds (same order in both).

    A significant result in either direction is reported as such: the best may be better than the
    default beyond noise, or the default better than the best.

    Returns:
        ``(t, p, test)``: the t statistic and p-value (nan where undefined) and a description of
        the test. Fewer than two pairs: no test, nan. Identical values on every seed: a tie, no
        test, t nan and p 1. A difference that is the same on every seed gives t = -inf/+inf and
        p = 0/1 (scipy's answer: no noise at all).
    """
    a, b = np.asarray(best, dtype=float), np.asarray(default, dtype=float)
    n = len(a)
    if n < 2:
        return math.nan, math.nan, f"none: {n} paired seed(s), a paired test needs at least 2"
    if np.all(a == b):
        return math.nan, 1.0, f"none: identical objective on all {n} seeds (a tie, p = 1)"
    from scipy import stats  # Imported here: the rest of the service does not need scipy.

    with warnings.catch_warnings():
        # Nearly identical values: scipy warns of precision loss; a constant difference divides
        # by zero. The results stand (see above).
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_rel(a, b)  # Two-sided: a default that is better is news too.
    test = f"paired t-test over {n} seeds, two-sided, scipy.stats.ttest_rel, alpha {ALPHA:g}"
    return float(result.statistic), float(result.pvalue), test


def confirmation_data(
    seeds: list[int], stats: list[ConfigRuns], corners: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """:func:`collect_runs`'s result as plain data (see :func:`summarize_confirmation`)."""
    configs = []
    for s in stats:
        values = [s.values[seed] for seed in seeds if seed in s.values]
        mean, sd = mean_sd(values)
        configs.append(
            {
                "label": s.candidate["label"],
                "source_trial": s.candidate["source_trial"],
                "params": dict(s.candidate["params"]),
                "n": len(values),
                "mean": _finite(mean),
                "sd": _finite(sd),
                "values": values,
            }
        )
    paired = paired_comparison(seeds, stats)
    comparison = paired.comparison if paired is not None else None
    default = next((c for c in configs if is_default(c["label"])), None)
    comparisons = []  # Every config against the default: what search.results._recommendation.recommend reads.
    for s in stats:
        if is_default(s.candidate["label"]):
            continue
        one = paired_comparison(seeds, stats, s.candidate["label"])
        if one is None:
            continue
        comparisons.append(
            {
                "label": s.candidate["label"],
                "params": dict(s.candidate["params"]),
                "n": one.n,
                "mean_diff": one.comparison["mean_diff"],
                "sd_diff": one.sd_diff,
                "t": one.comparison["t"],
                "p": one.comparison["p"],
                "significant": one.comparison["better_beyond_noise"] or one.comparison["worse_beyond_noise"],
                "default_sd": default["sd"] if default else None,
            }
        )
    return {
        "seeds": list(seeds),
        "configs": configs,
        "comparison": comparison,
        "comparisons": comparisons,
        "corners": [dict(c) for c in corners],
    }


def summarize_confirmation(
    storage: str | optuna.storages.BaseStorage, study_name: str
) -> dict[str, Any] | None:
    """The confirmation of ``study_name`` as plain, JSON-serializable data.

    Args:
        storage: A storage URL or an opened storage; a URL is opened only if it already holds
            Optuna's schema (a missing SQLite file is not created).
        study_name: The *search* study (its runs are in ``<study_name>.confirm``).

    Returns:
        None when there is no confirmation of ``study_name``; otherwise ``{"seeds": [...],
        "configs": [{"label", "source_trial", "params", "n", "mean", "sd", "values"}, ...],
        "comparison": {"best_label", "default_label", "mean_diff", "t", "p",
        "better_beyond_noise", "test"}, "comparisons": [...], "corners": [{"point", "failure", "value",
        "data_seed"}, ...]}``; ``corners`` are the corner runs of the ranges safe together
        (:func:`search.results._together.check_boxes`). ``sd`` is the sample standard deviation (ddof=1);
        undefined numbers (nan, inf) are None. ``values`` follow the order of ``seeds``, leaving
        out seeds not run yet. ``comparison`` is None if best-1 or the default is missing.
    """
    if isinstance(storage, str):
        opened = _open_existing(storage)
        if opened is None:
            return None
        try:
            collected = collect_runs(opened, study_name)
        finally:
            close_storage(opened)
    else:
        collected = collect_runs(storage, study_name)
    return None if collected is None else confirmation_data(*collected)
