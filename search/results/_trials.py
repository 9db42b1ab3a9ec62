"""Which trials count and what they hold: completed, safe, good, best; a trial's four settings.

Pure functions over a list of :class:`~optuna.trial.FrozenTrial` and the study's
:class:`~search.core._settings.SpaceConfig`; nothing here plots or touches a storage. Only COMPLETE
trials with a finite objective count; RUNNING, WAITING, PRUNED and FAIL trials are ignored, so a
study that is still running can be analysed at any moment.

**Safe trials.** A trial is *good* when it did not go non-finite (user attr ``nonfinite``), has
no silent failure (``failure == "none"``) and its objective is within ``tolerance`` (default 1%)
of the study's best objective: ``value <= best + tolerance * |best|``. Every other COMPLETE trial
is *bad*.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.core import EVAL_MEDIAN, FAIL_REASON, SpaceConfig, baseline_of, setting_of
from search.results._tolerance import DEFAULT_TOLERANCE
from search.scalers import RULES, TORCH, ScalerConfig

# Every FAIL this service writes has a reason; one without was failed by Optuna's stale-trial check: its
# worker stopped sending heartbeats (killed, host lost).
STALE_REASON = "worker stopped (no heartbeat)"


def completed(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The COMPLETE trials with a finite objective, by trial number (everything else is ignored)."""
    done = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    return sorted(done, key=lambda t: t.number)


def fail_reasons(trials: Iterable[FrozenTrial]) -> dict[str, int]:
    """How many FAIL trials failed for each reason (what the summaries list as not counted)."""
    return dict(
        Counter(t.user_attrs.get(FAIL_REASON, STALE_REASON) for t in trials if t.state == TrialState.FAIL)
    )


def best_trial(trials: Iterable[FrozenTrial]) -> FrozenTrial | None:
    """The COMPLETE trial with the lowest objective (the lowest number among equals), or None."""
    done = completed(trials)
    return min(done, key=lambda t: (t.value, t.number)) if done else None


def is_safe(trial: FrozenTrial) -> bool:
    """No non-finite loss or weights and no silent failure (failure code ``none``)."""
    attrs = trial.user_attrs
    return not attrs.get("nonfinite", False) and attrs.get("failure", "none") == "none"


def _threshold(best: float, tolerance: float) -> float:
    return best + tolerance * abs(best)


def good_trials(trials: Iterable[FrozenTrial], tolerance: float = DEFAULT_TOLERANCE) -> list[FrozenTrial]:
    """Safe trials whose objective is within ``tolerance`` (relative) of the best objective."""
    done = completed(trials)
    if not done:
        return []
    limit = _threshold(min(t.value for t in done), tolerance)
    return [t for t in done if is_safe(t) and t.value <= limit]


def searched_params(space: SpaceConfig, scaler: str = TORCH) -> list[str]:
    """The knobs of ``scaler``'s rule the space searches (not fixed), in the rule's order."""
    ranges = space.ranges(scaler)
    return [name for name in RULES[scaler].names if ranges[name].fixed is None]


def param_values(trial: FrozenTrial, space: SpaceConfig, scaler: str = TORCH) -> dict[str, float]:
    """Every knob of a trial's setting (GradScaler's ``init_scale`` as a scale even for powers of two)."""
    return param_values_of(trial.params, space, scaler)


def param_values_of(params: dict[str, Any], space: SpaceConfig, scaler: str = TORCH) -> dict[str, float]:
    """Every knob of a params dict in ``space`` (like :func:`param_values` for a trial)."""
    return {name: float(value) for name, value in setting_of(params, space, scaler).values.items()}


def as_config(values: dict[str, float]) -> ScalerConfig:
    """The :class:`ScalerConfig` of four settings (``growth_interval`` rounded to whole steps, at least 1)."""
    return ScalerConfig(
        init_scale=values["init_scale"],
        growth_factor=values["growth_factor"],
        backoff_factor=values["backoff_factor"],
        growth_interval=max(1, round(values["growth_interval"])),
    )


def trial_row(trial: FrozenTrial, space: SpaceConfig, scaler: str = TORCH) -> dict[str, Any]:
    """One trial as a table row: its number, tag, value, every knob of its setting and run attrs."""
    attrs = trial.user_attrs
    return {
        "number": trial.number,
        "baseline": baseline_of(trial),
        "value": trial.value,
        **setting_of(trial.params, space, scaler).values,
        "final_loss": attrs.get("final_loss"),
        "eval_loss": attrs.get("eval_loss"),
        "eval_median": attrs.get(EVAL_MEDIAN),
        "final_loss_fp32": attrs.get("final_loss_fp32"),
        "skipped_steps": attrs.get("skipped_steps"),
        "learned": attrs.get("learned"),
        "failure": attrs.get("failure"),
        "device": attrs.get("device"),
    }
