"""``python -m search.confirm``: is the best setting of a finished search really better than the default?

A search ranks settings on one seed: one data set and one set of initial weights. The winner may
simply be lucky on that seed. This command re-runs the top-k configurations of a finished study
(its k lowest-objective COMPLETE trials, de-duplicated by params, baselines included) and PyTorch's
default GradScaler settings (the ``seed-1`` baseline, in the study's space: a fixed parameter keeps
its fixed value) on K new seeds: seed ``s`` in ``study_seed + 1 ... study_seed + K`` builds the
study's task with new data and new initial weights. Every configuration is trained on every seed
with the study's recorded epochs, autocast dtype and penalty, through
:func:`search.objective.run_trial`, so each value is the search's own objective. All
configurations on one seed share that seed's data and weights (common random numbers), so the
comparison with the default is paired by seed: a two-sided paired t-test (``scipy.stats.ttest_rel``,
alpha 0.05), so a default that is significantly better is said so too. Besides the top-k, the
search's recommendation (:func:`search.analysis.recommend`) is run when it is not the default
itself; ``search.report`` then lets these runs decide the recommendation.

The runs are stored apart from the search, in a sibling study ``<study>.confirm`` of the same
storage (direction minimize), so the search's sampler and best value never see them: one COMPLETE
trial per (configuration, seed) with the configuration's params and distributions, the objective
as value, user attrs ``config`` (e.g. ``best-1 (#78)``, ``seed-1 (default)``), ``source_trial``,
``data_seed`` and everything :func:`run_trial` records, and the loss curve as intermediate values.
The sibling's user attrs record ``source_study``, ``seeds``, ``top``, ``epochs``, ``device`` (the
device kind of its runs) and ``configs``; ``seeds`` and ``configs`` are those of the latest
confirmation, which is what :func:`summarize_confirmation` reports. A (configuration, seed) pair
already stored is never run again, so an interrupted confirmation resumes and a larger
``--top``/``--seeds`` adds only what is missing; trials are written finished
(``study.add_trial``), so nothing is ever left RUNNING.

Exit codes: 0 done, 1 a storage or training failure during the runs, 2 bad input (one line on
stderr, nothing written), 130/143 interrupted by SIGINT/SIGTERM (finished runs are kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
import sqlalchemy
import sqlalchemy.exc
import sqlalchemy.pool
import torch
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm

from search import analysis
from search.config import Settings
from search.objective import run_trial
from search.optimize import device_label, resolve_device
from search.space import POW2_NAME, SEED_BASELINES, distributions, scaler_config
from search.cli import CONFIRM_SUFFIX, OneLineParser, UsageError, choose_study, fail, first_line
from search.storage import StorageError, mask_url, open_existing_storage, redact
from search.study import BASELINE_ATTR, settings_of
from search.tasks import Problem, TaskError, build_problem, resolve_task
from search.trial_writer import TrialWriter

__all__ = [
    "ALPHA",
    "DEFAULT_LABEL",
    "SUFFIX",
    "Candidate",
    "ConfirmError",
    "build_parser",
    "confirm_study_name",
    "confirmation_seeds",
    "default_candidate",
    "format_confirmation",
    "main",
    "paired_test",
    "select_candidates",
    "summarize_confirmation",
]

PROG = "search.confirm"
SUFFIX = CONFIRM_SUFFIX
DEFAULT_LABEL = "seed-1 (default)"
ALPHA = 0.05


class ConfirmError(UsageError):
    """Bad input: nothing was written. The message is one line."""


class _Interrupted(Exception):
    """SIGINT or SIGTERM during the runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Candidate:
    """One configuration to confirm.

    Attributes:
        label: ``best-<rank> (#<trial>)`` or :data:`DEFAULT_LABEL`.
        source_trial: The search trial it comes from; None for the default.
        params: Trial params in the study's space (fixed parameters are not params).
        distributions: The distributions its trials are stored with.
        baseline: The source trial's baseline tag (``seed-1`` ...), if it is one.
    """

    label: str
    source_trial: int | None
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution] = field(repr=False)
    baseline: str | None = None

    @property
    def key(self) -> str:
        """What identifies its runs in the sibling study, with the data seed."""
        return _config_key(self.source_trial, self.params)


def _config_key(source_trial: int | None, params: dict[str, Any]) -> str:
    # Keyed by source trial and params, not by label: a rank can change when the search goes on.
    canon = {k: float(v) if isinstance(v, (int, float)) else v for k, v in sorted(params.items())}
    return json.dumps([source_trial, canon], sort_keys=True)


def confirm_study_name(study_name: str) -> str:
    """The sibling study holding the confirmation runs of ``study_name``."""
    return study_name + SUFFIX


def confirmation_seeds(study_seed: int, k: int) -> list[int]:
    """The data/initialisation seeds of a confirmation: ``study_seed + 1 ... study_seed + k``."""
    return [study_seed + i for i in range(1, k + 1)]


def select_candidates(
    trials: Sequence[FrozenTrial], settings: Settings, top: int
) -> tuple[list[Candidate], list[str]]:
    """The top-``top`` configurations of a study and the default, with notes for the user.

    The top-k are the lowest-objective COMPLETE trials (ties: the earlier trial first), one per
    distinct params; baselines are not excluded, so ``best-1`` may be a seed baseline, even the
    default's own settings.
    """
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    ranked = sorted(complete, key=lambda t: (t.value, t.number))
    chosen: list[Candidate] = []
    seen: set[str] = set()
    for trial in ranked:
        key = _config_key(None, trial.params)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(
            Candidate(
                label=f"best-{len(chosen) + 1} (#{trial.number})",
                source_trial=trial.number,
                params=dict(trial.params),
                distributions=dict(trial.distributions),
                baseline=trial.user_attrs.get(BASELINE_ATTR),
            )
        )
        if len(chosen) == top:
            break
    notes = []
    if len(chosen) < top:
        notes.append(f"only {len(chosen)} distinct complete configuration(s) in the study; --top {top} asked")
    recommended = recommended_candidate(trials, settings)
    if recommended is not None and all(
        _config_key(None, recommended.params) != _config_key(None, c.params) for c in chosen
    ):
        chosen.append(recommended)
    default, note = default_candidate(settings)
    if note:
        notes.append(note)
    return chosen + [default], notes


def recommended_candidate(trials: Sequence[FrozenTrial], settings: Settings) -> Candidate | None:
    """The search's recommendation (:func:`search.analysis.recommend`) as a candidate, unless it is the default."""
    rec = analysis.recommend(trials, settings.space)
    if rec is None or rec.keep_default:
        return None
    params: dict[str, Any] = {}
    for name, dist in distributions(settings.space).items():
        value: Any = math.log2(rec.config.init_scale) if name == POW2_NAME else getattr(rec.config, name)
        params[name] = int(round(value)) if isinstance(dist, IntDistribution) else float(value)
    return Candidate(
        f"recommended (#{rec.source_trial})",
        rec.source_trial,
        params,
        dict(distributions(settings.space)),
    )


def default_candidate(settings: Settings) -> tuple[Candidate, str | None]:
    """PyTorch's default settings (the ``seed-1`` baseline) as params of the study's space.

    A parameter the space fixes keeps its fixed value (it is not a param). A default value outside
    a searched range is still run; its stored distribution is widened to contain it, with a note.
    """
    _tag, cfg = SEED_BASELINES[0]
    params: dict[str, Any] = {}
    dists: dict[str, BaseDistribution] = {}
    outside = []
    for name, dist in distributions(settings.space).items():
        value: Any = math.log2(cfg.init_scale) if name == POW2_NAME else getattr(cfg, name)
        if isinstance(dist, IntDistribution):
            value = int(value)
        params[name] = value
        if not dist.low <= value <= dist.high:
            outside.append(name)
            low, high = min(dist.low, value), max(dist.high, value)
            if isinstance(dist, IntDistribution):
                dist = IntDistribution(int(low), int(high), log=dist.log, step=dist.step)
            else:
                assert isinstance(dist, FloatDistribution)
                dist = FloatDistribution(low, high, log=dist.log, step=dist.step)
        dists[name] = dist
    note = None
    if outside:
        note = (
            f"the default's {', '.join(outside)} lies outside the study's search space; "
            "it is run all the same"
        )
    return Candidate(DEFAULT_LABEL, None, params, dists, "seed-1"), note


# -- reading the confirmation back ------------------------------------------------------------


@dataclass
class _Stats:
    """A configuration's runs on the requested seeds, for the table."""

    candidate: dict[str, Any]  # label, source_trial, params (as stored in the sibling's attrs)
    values: dict[int, float]  # data seed -> objective
    final_losses: dict[int, float | None]


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
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


def _collect(storage: optuna.storages.BaseStorage, study_name: str) -> tuple[list[int], list[_Stats]] | None:
    sibling_name = confirm_study_name(study_name)
    try:
        study_id = storage.get_study_id_from_name(sibling_name)
    except KeyError:
        return None
    attrs = storage.get_study_user_attrs(study_id)
    seeds = [int(s) for s in attrs.get("seeds", [])]
    configs = list(attrs.get("configs", []))
    runs: dict[tuple[str, int], FrozenTrial] = {}
    for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,)):
        seed = t.user_attrs.get("data_seed")
        if seed is not None and t.value is not None:
            runs.setdefault((_config_key(t.user_attrs.get("source_trial"), t.params), int(seed)), t)
    stats = []
    for config in configs:
        key = _config_key(config["source_trial"], config["params"])
        found = {s: runs[(key, s)] for s in seeds if (key, s) in runs}
        stats.append(
            _Stats(
                candidate=config,
                values={s: float(t.value) for s, t in found.items()},
                final_losses={s: t.user_attrs.get("final_loss") for s, t in found.items()},
            )
        )
    return seeds, stats


@dataclass(frozen=True)
class _Paired:
    """best-1 against the default over the seeds where both ran."""

    comparison: dict[str, Any]
    n: int
    sd_diff: float | None
    same_settings: bool
    tie: bool


def _comparison(seeds: list[int], stats: list[_Stats], label: str = "best-1 ") -> _Paired | None:
    """The paired comparison of a config (best-1 unless ``label`` says) with the default, or None."""
    best = next((s for s in stats if s.candidate["label"].startswith(label)), None)
    default = next((s for s in stats if s.candidate["label"] == DEFAULT_LABEL), None)
    if best is None or default is None:
        return None
    paired = [s for s in seeds if s in best.values and s in default.values]
    a = np.array([best.values[s] for s in paired])
    b = np.array([default.values[s] for s in paired])
    mean_diff, sd_diff = _mean_sd(a - b)
    t, p, test = paired_test(a, b)
    tie = len(paired) >= 2 and bool(np.all(a == b))
    comparison = {
        "best_label": best.candidate["label"],
        "default_label": DEFAULT_LABEL,
        "mean_diff": _finite(mean_diff),
        "t": _finite(t),
        "p": _finite(p),
        "better_beyond_noise": bool(math.isfinite(p) and p < ALPHA and mean_diff < 0),
        "worse_beyond_noise": bool(math.isfinite(p) and p < ALPHA and mean_diff > 0),
        "test": test,
    }
    same = _config_key(None, best.candidate["params"]) == _config_key(None, default.candidate["params"])
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


def _as_data(seeds: list[int], stats: list[_Stats]) -> dict[str, Any]:
    configs = []
    for s in stats:
        values = [s.values[seed] for seed in seeds if seed in s.values]
        mean, sd = _mean_sd(values)
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
    paired = _comparison(seeds, stats)
    comparison = paired.comparison if paired is not None else None
    default = next((c for c in configs if c["label"] == DEFAULT_LABEL), None)
    comparisons = []  # Every config against the default: what search.analysis.recommend reads.
    for s in stats:
        if s.candidate["label"] == DEFAULT_LABEL:
            continue
        one = _comparison(seeds, stats, s.candidate["label"])
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
    return {"seeds": list(seeds), "configs": configs, "comparison": comparison, "comparisons": comparisons}


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
        "better_beyond_noise", "test"}}``. ``sd`` is the sample standard deviation (ddof=1);
        undefined numbers (nan, inf) are None. ``values`` follow the order of ``seeds``, leaving
        out seeds not run yet. ``comparison`` is None if best-1 or the default is missing.
    """
    if isinstance(storage, str):
        opened = _open_existing(storage)
        if opened is None:
            return None
        try:
            collected = _collect(opened, study_name)
        finally:
            opened.remove_session()
            opened.engine.dispose()
    else:
        collected = _collect(storage, study_name)
    return None if collected is None else _as_data(*collected)


# -- the table ----------------------------------------------------------------------------------


def _scale(value: float) -> str:
    exponent = math.log2(value) if value > 0 else math.nan
    if not math.isfinite(exponent):
        return f"{value:g}"
    return f"2^{exponent:.0f}" if exponent == round(exponent) else f"2^{exponent:.2f}"


def _pm(mean: float, sd: float, fmt: str = ".4f") -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:{fmt}} ± {sd:{fmt}}" if math.isfinite(sd) else f"{mean:{fmt}}"


def format_confirmation(
    seeds: list[int], stats: list[_Stats], settings: Settings, baselines: dict[int, str] | None = None
) -> str:
    """The table of a confirmation and its verdict, as printed by the command."""
    baselines = baselines or {}
    label_width = max([len("config")] + [len(s.candidate["label"]) for s in stats])
    header = (
        f"  {'config':<{label_width}} {'source':>12} {'init_scale':>10} {'growth':>7} {'backoff':>7} "
        f"{'interval':>8} {'n':>3} {'objective mean ± sd':>21} {'final_loss mean ± sd':>21}"
    )
    lines = [header]
    for s in stats:
        c = s.candidate
        cfg = scaler_config(c["params"], settings.space)
        source = "-" if c["source_trial"] is None else f"#{c['source_trial']}"
        if c["source_trial"] in baselines:
            source += f" {baselines[c['source_trial']]}"
        values = [s.values[x] for x in seeds if x in s.values]
        losses = [s.final_losses[x] for x in seeds if x in s.final_losses]
        finite_losses = [v for v in losses if v is not None]
        loss_text = _pm(*_mean_sd(finite_losses))
        if len(finite_losses) < len(losses):
            loss_text += f" ({len(losses) - len(finite_losses)} nan)"
        lines.append(
            f"  {c['label']:<{label_width}} {source:>12} {_scale(cfg.init_scale):>10} "
            f"{cfg.growth_factor:>7.3g} {cfg.backoff_factor:>7.3g} {cfg.growth_interval:>8} "
            f"{len(values):>3} {_pm(*_mean_sd(values)):>21} {loss_text:>21}"
        )
    lines.append("")
    lines.extend(_verdict(seeds, stats))
    return "\n".join(lines)


def _verdict(seeds: list[int], stats: list[_Stats]) -> list[str]:
    lines = _verdict_of(seeds, stats, "best-1 ")
    recommended = next((s for s in stats if s.candidate["label"].startswith("recommended ")), None)
    if recommended is not None:
        lines += _verdict_of(seeds, stats, "recommended ")
    return lines


def _verdict_of(seeds: list[int], stats: list[_Stats], label: str) -> list[str]:
    paired = _comparison(seeds, stats, label)
    if paired is None:
        return [f"  verdict: nothing to compare ({label.strip()} or the default is missing)"]
    c = paired.comparison
    best, mean_diff, p, t = c["best_label"], c["mean_diff"], c["p"], c["t"]
    lines = []
    if paired.same_settings:
        lines.append(
            f"  note: {best} has the default's own settings: no trial of the search beat the default "
            "on its seed (ties go to the earliest trial)"
        )
    if mean_diff is None or paired.n < 2:
        return lines + [f"  verdict: not enough paired seeds yet ({paired.n}; a paired test needs 2)"]
    default = next(s for s in stats if s.candidate["label"] == DEFAULT_LABEL)
    _, spread = _mean_sd([default.values[x] for x in seeds if x in default.values])
    sd_text = f" ± {paired.sd_diff:.3g} (sd)" if paired.sd_diff is not None else ""
    spread_text = f"; the default's seed-to-seed sd is {spread:.3g}" if math.isfinite(spread) else ""
    lines.append(
        f"  {best} minus the default, paired by seed: mean {mean_diff:+.4g}{sd_text} over {paired.n} seeds"
        + spread_text
    )
    t_text = f"t = {t:.2f}, " if t is not None else ""
    if paired.tie:
        lines.append(
            f"  verdict: {best} and the default tie on every seed "
            "(identical objective; no test needed, p = 1)"
        )
    elif c["better_beyond_noise"]:
        lines.append(
            f"  verdict: {best} is better than the default beyond noise "
            f"({t_text}p={p:.3g} < {ALPHA:g}, two-sided paired t-test)"
        )
    elif c["worse_beyond_noise"]:
        lines.append(
            f"  verdict: the default is better than {best} beyond noise "
            f"({t_text}p={p:.3g} < {ALPHA:g}, two-sided paired t-test): keep the default"
        )
    else:
        p_text = f"p={p:.3g}" if p is not None else "p undefined"
        lines.append(
            f"  verdict: {best} is not distinguishable from the default "
            f"({t_text}{p_text}, two-sided paired t-test)"
        )
    return lines


# -- the command --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog="python -m search.confirm",
        description="Re-run the top configurations of a finished search and PyTorch's default "
        "GradScaler settings on new data/initialisation seeds, stored in the sibling study "
        "<study>.confirm, and test whether the best beats the default beyond seed noise.",
        allow_abbrev=False,
    )
    add = p.add_argument
    add("--storage", metavar="URL", default="sqlite:///study.db", help="Optuna storage URL [sqlite:///study.db]")
    add("--study-name", default=None, help="the search study [the storage's only search study]")
    add("--top", type=int, default=3, metavar="K", help="confirm the K best distinct configurations [3]")
    add(
        "--seeds",
        type=int,
        default=5,
        metavar="K",
        help="data/initialisation seeds: study seed + 1 ... + K (K >= 2) [5]",
    )
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N; auto = cuda if available [auto]")
    add("--json", metavar="PATH", default=None, help="write the summary (summarize_confirmation) as JSON")
    add("--quiet", action="store_true", help="no progress bar")
    return p


@dataclass
class _Plan:
    """Everything validated before anything is written."""

    storage: optuna.storages.RDBStorage
    study_name: str
    n_complete: int
    settings: Settings
    seeds: list[int]
    candidates: list[Candidate]
    notes: list[str]
    device: torch.device
    pending: dict[int, list[Candidate]]  # seed -> configurations not run on it yet
    first_problem: Problem | None
    baselines: dict[int, str]


def _plan(args: argparse.Namespace) -> _Plan:
    if args.top < 1:
        raise ConfirmError(f"--top must be >= 1, got {args.top}")
    if args.seeds < 2:
        raise ConfirmError(f"--seeds must be >= 2 (a paired test needs two seeds), got {args.seeds}")
    try:
        device = resolve_device(args.device)
    except RuntimeError as e:  # torch.device("tpu")
        raise ConfirmError(f"unknown device {args.device!r}: {first_line(e)}")
    except ValueError as e:  # search.optimize.UsageError: CUDA absent, index out of range.
        raise ConfirmError(str(e))
    if args.json:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise ConfirmError(f"--json {args.json}: directory {parent} does not exist or is not writable")

    url = args.storage
    try:
        storage = open_existing_storage(url, immediate=True)  # It writes the sibling study.
    except StorageError as e:
        raise ConfirmError(str(e))
    _OPENED.append(storage)

    name = choose_study(storage, url, args.study_name)
    study = optuna.load_study(storage=storage, study_name=name)
    if "task" not in study.user_attrs:
        raise ConfirmError(f"study {name!r} was not created by search.optimize (it records no task)")
    settings = settings_of(study)
    trials = study.get_trials(deepcopy=False)
    n_complete = sum(t.state == TrialState.COMPLETE for t in trials)
    if n_complete == 0:
        raise ConfirmError(f"study {name!r} has no COMPLETE trials to confirm")
    candidates, notes = select_candidates(trials, settings, args.top)
    baselines = {
        t.number: str(t.user_attrs[BASELINE_ATTR]) for t in trials if BASELINE_ATTR in t.user_attrs
    }
    seeds = confirmation_seeds(settings.run.seed, args.seeds)

    sibling_name = confirm_study_name(name)
    done: set[tuple[str, int]] = set()
    try:
        sibling_id = storage.get_study_id_from_name(sibling_name)
    except KeyError:
        sibling_id = None
    if sibling_id is not None:
        attrs = storage.get_study_user_attrs(sibling_id)
        if attrs.get("source_study") != name:
            raise ConfirmError(
                f"study {sibling_name!r} exists but was not created by search.confirm for {name!r}"
            )
        if attrs.get("epochs") != settings.run.epochs:
            raise ConfirmError(
                f"the runs in {sibling_name!r} used {attrs.get('epochs')} epochs, the study now records "
                f"{settings.run.epochs}; delete {sibling_name!r} to confirm again"
            )
        for t in storage.get_all_trials(sibling_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            seed = t.user_attrs.get("data_seed")
            if seed is not None:
                done.add((_config_key(t.user_attrs.get("source_trial"), t.params), int(seed)))
        kind = attrs.get("device")
        pending_any = any((c.key, s) not in done for s in seeds for c in candidates)
        if pending_any and kind is not None and kind != device.type:
            raise ConfirmError(
                f"the runs in {sibling_name!r} were made on {kind}; this run would use {device.type}, "
                f"and one comparison must not mix devices (pass --device {kind})"
            )
    pending = {s: [c for c in candidates if (c.key, s) not in done] for s in seeds}
    pending = {s: cs for s, cs in pending.items() if cs}

    first_problem = None
    if pending:
        try:
            task = resolve_task(settings.run.task)
            first_problem = build_problem(task, settings.run.task, next(iter(pending)))
        except TaskError as e:
            raise ConfirmError(str(e))
    return _Plan(
        storage, name, n_complete, settings, seeds, candidates, notes, device, pending, first_problem,
        baselines,
    )


def _fail(message: str, code: int = 2) -> int:
    return fail(PROG, message, code)


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


_OPENED: list[optuna.storages.RDBStorage] = []


def _close_all_storages() -> None:
    for storage in _OPENED:
        storage.remove_session()
        storage.engine.dispose()
    _OPENED.clear()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    url = ""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except UsageError as e:  # ConfirmError, and argparse's and choose_study's errors.
        return _fail(str(e))
    url = args.storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        try:
            plan = _plan(args)
        except UsageError as e:  # ConfirmError, and argparse's and choose_study's errors.
            return _fail(redact(str(e), url))
        except Exception as e:  # An unexpected failure while reading the study is still bad input.
            return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
        try:
            return _run(plan, args)
        except _Interrupted as e:
            _note(f"interrupted by {e}; finished runs are stored, run the same command again to resume")
            return 128 + e.signum
        except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
            return _fail(f"storage {mask_url(url)} failed: {redact(first_line(e), url)}", 1)
        except TaskError as e:
            return _fail(redact(str(e), url), 1)
        except Exception as e:  # Training failed (CUDA out of memory, a user loss that raises).
            return _fail(f"a confirmation run failed: {type(e).__name__}: {redact(first_line(e), url)}", 1)
    finally:
        _close_all_storages()


def _run(plan: _Plan, args: argparse.Namespace) -> int:
    settings, storage = plan.settings, plan.storage
    url = args.storage
    for note in plan.notes:
        _note(f"note: {note}")
    sibling = _open_sibling(plan, args)
    writer = TrialWriter(sibling)  # A run with its curve in one transaction, not one per step.
    label = device_label(plan.device)
    amp_dtype = getattr(torch, settings.run.amp_dtype)
    n_runs = sum(len(cs) for cs in plan.pending.values())
    bar = tqdm(
        total=n_runs,
        desc=sibling.study_name,
        unit="run",
        disable=args.quiet or n_runs == 0,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    start = time.perf_counter()
    done = 0
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum: int, _frame: object) -> None:
        raise _Interrupted(signum)

    for s in previous:
        signal.signal(s, stop)
    try:
        task = resolve_task(settings.run.task) if plan.pending else None
        for i, (seed, candidates) in enumerate(plan.pending.items()):
            problem = plan.first_problem if i == 0 else None  # Built while validating the input.
            if problem is None:
                assert task is not None
                problem = build_problem(task, settings.run.task, seed)
            on_device = problem.to(plan.device)  # Every configuration on this seed: same data, same weights.
            for candidate in candidates:
                bar.set_postfix_str(f"{candidate.label}, seed {seed}", refresh=True)
                outcome = run_trial(
                    on_device,
                    scaler_config(candidate.params, settings.space),
                    epochs=settings.run.epochs,
                    steps=settings.run.steps or None,  # The search's own step count.
                    amp_dtype=amp_dtype,
                    penalty=settings.penalty,
                    device_label=label,
                )
                attrs = {
                    "config": candidate.label,
                    "source_trial": candidate.source_trial,
                    "data_seed": seed,
                    **outcome.user_attrs,
                }
                writer.add(
                    optuna.trial.create_trial(
                        state=TrialState.COMPLETE,
                        value=outcome.value,
                        params=candidate.params,
                        distributions=candidate.distributions,
                        user_attrs=attrs,
                        intermediate_values=outcome.intermediate_values,
                    )
                )
                done += 1
                bar.update(1)
    finally:
        bar.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    seconds = time.perf_counter() - start

    collected = _collect(storage, plan.study_name)
    assert collected is not None
    seeds, stats = collected
    print(
        f"Confirmation of study {plan.study_name!r} ({plan.n_complete} complete trials) in {mask_url(url)}"
    )
    print(
        f"  {len(plan.candidates)} configs x {len(seeds)} seeds (data seeds {seeds[0]}..{seeds[-1]}: "
        f"new data and initial weights each), {settings.run.epochs} epochs, {settings.run.amp_dtype} "
        f"on {plan.device.type}"
    )
    stored = len(plan.candidates) * len(seeds)
    if done:
        print(f"  this run: {done} runs in {seconds:.1f} s; stored in study {sibling.study_name!r}")
    else:
        print(f"  this run: nothing to run, all {stored} runs are already in study {sibling.study_name!r}")
    print()
    print(format_confirmation(seeds, stats, settings, plan.baselines))
    if args.json:
        data = _as_data(seeds, stats)
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write("\n")
    return 0


def _open_sibling(plan: _Plan, args: argparse.Namespace) -> optuna.Study:
    """Creates or loads ``<study>.confirm`` and records what this confirmation asks for."""
    name = confirm_study_name(plan.study_name)
    study = optuna.create_study(
        storage=plan.storage, study_name=name, direction="minimize", load_if_exists=True
    )
    wanted: dict[str, Any] = {
        "source_study": plan.study_name,
        "seeds": plan.seeds,
        "top": args.top,
        "epochs": plan.settings.run.epochs,
        "configs": [
            {"label": c.label, "source_trial": c.source_trial, "params": c.params} for c in plan.candidates
        ],
    }
    if plan.pending:
        wanted["device"] = plan.device.type
    current = study.user_attrs
    for key, value in wanted.items():
        if current.get(key) != value:
            study.set_user_attr(key, value)
    return study


if __name__ == "__main__":
    sys.exit(main())
