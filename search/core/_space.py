"""The search space: GradScaler settings (or a framework's knobs) as Optuna distributions, and the baselines.

Under ``--scaler torch`` the params are GradScaler's four settings and the baselines the seed script's
five; under a framework's rule (:mod:`search.scalers`) they are that framework's own knobs, under its
own names, and the baselines its defaults.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from search.core._config import ParamRange, SpaceConfig
from search.core._record import DEFAULT_BASELINE, DIAGNOSIS_BASELINE
from search.core._scaler_config import ScalerConfig
from search.scalers import BOOL, INT, RULES, TORCH, RuleSetting

PARAM_NAMES = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
POW2_NAME = "init_scale_log2"

# The seed script's table, with PyTorch's default growth_interval, which the seed left implicit.
SEED_BASELINES: tuple[tuple[str, ScalerConfig], ...] = (
    (DEFAULT_BASELINE, ScalerConfig(2.0**16, 2.0, 0.5, 2000)),  # PyTorch's default
    ("seed-2", ScalerConfig(2.0**8, 2.0, 0.5, 2000)),  # low init_scale
    ("seed-3", ScalerConfig(2.0**24, 2.0, 0.5, 2000)),  # high init_scale
    ("seed-4", ScalerConfig(2.0**16, 1.5, 0.5, 2000)),  # slow growth
    ("seed-5", ScalerConfig(2.0**16, 4.0, 0.25, 2000)),  # fast growth, deep backoff
)


def distributions(space: SpaceConfig, scaler: str = TORCH) -> dict[str, BaseDistribution]:
    """The Optuna distributions of the searched (not fixed) parameters, by param name."""
    if scaler != TORCH:
        return _rule_distributions(space, scaler)
    out: dict[str, BaseDistribution] = {}
    for name in PARAM_NAMES:
        p: ParamRange = getattr(space, name)
        if p.fixed is not None:
            continue
        if name == "init_scale" and p.powers_of_two:
            low, high = math.ceil(math.log2(p.low)), math.floor(math.log2(p.high))
            out[POW2_NAME] = IntDistribution(low, high)
        elif name == "growth_interval":
            out[name] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[name] = FloatDistribution(p.low, p.high, log=p.log)
    return out


def suggest(trial: optuna.Trial, space: SpaceConfig, scaler: str = TORCH) -> ScalerConfig | RuleSetting:
    """Asks ``trial`` for every searched parameter and returns the full scaler settings."""
    params: dict[str, Any] = {}
    for name, dist in distributions(space, scaler).items():
        if isinstance(dist, IntDistribution):
            params[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log)
        else:
            assert isinstance(dist, FloatDistribution)
            params[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    return setting_of(params, space, scaler)


def setting_of(params: dict[str, Any], space: SpaceConfig, scaler: str = TORCH) -> ScalerConfig | RuleSetting:
    """A trial's full setting from its params and the fixed values of ``space``: GradScaler's four
    settings, or every knob of the framework's rule."""
    if scaler == TORCH:
        return scaler_config(params, space)
    rule = RULES[scaler]
    ranges = space.ranges(scaler)
    values = {
        knob.name: knob.cast(ranges[knob.name].fixed if ranges[knob.name].fixed is not None else params[knob.name])
        for knob in rule.knobs
    }
    return RuleSetting(scaler, values)


def _rule_distributions(space: SpaceConfig, scaler: str) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for knob in RULES[scaler].knobs:
        p = space.ranges(scaler)[knob.name]
        if p.fixed is not None:
            continue
        if knob.kind in (INT, BOOL):  # A flag is searched as 0/1.
            out[knob.name] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[knob.name] = FloatDistribution(p.low, p.high, log=p.log)
    return out


def scaler_config(params: dict[str, Any], space: SpaceConfig) -> ScalerConfig:
    """Combines a trial's params with the fixed values of ``space``."""
    values: dict[str, Any] = {}
    for name in PARAM_NAMES:
        p: ParamRange = getattr(space, name)
        if p.fixed is not None:
            values[name] = p.fixed
        elif name == "init_scale" and p.powers_of_two:
            values[name] = 2.0 ** params[POW2_NAME]
        else:
            values[name] = params[name]
    return ScalerConfig(
        init_scale=float(values["init_scale"]),
        growth_factor=float(values["growth_factor"]),
        backoff_factor=float(values["backoff_factor"]),
        growth_interval=int(values["growth_interval"]),
    )


def baseline_trials(space: SpaceConfig, scaler: str = TORCH) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The baselines as params of ``space``, and a note for each one left out: the seed script's five
    (``--scaler torch``) or the framework's defaults.

    A parameter fixed in the config keeps its fixed value in the baselines too. A baseline
    whose value lies outside a searched range is left out: it is not a point of this space.
    """
    return _points(SEED_BASELINES if scaler == TORCH else RULES[scaler].baselines, space, scaler)


def diagnosis_trial(
    setting: dict[str, float], space: SpaceConfig, seeds: Iterable[tuple[str, dict[str, Any]]] = ()
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The setting a diagnosis suggests (``suggested_setting``, GradScaler's four by name) as the params of
    ``space``, tagged :data:`DIAGNOSIS_BASELINE`, as :func:`baseline_trials` gives the seed's: left out with a note
    when it lies outside the space, and not added when one of ``seeds`` (the study's baselines) has its params."""
    config = ScalerConfig(float(setting["init_scale"]), float(setting["growth_factor"]),
                          float(setting["backoff_factor"]), int(setting["growth_interval"]))  # fmt: skip
    # Not the suggestion if the space would train another setting: a fixed value, or a start rounded to 2^k.
    for name in PARAM_NAMES:
        fixed = getattr(space, name).fixed
        if fixed is not None and float(fixed) != float(getattr(config, name)):
            return [], [f"baseline {DIAGNOSIS_BASELINE} left out: the config fixes {name} at {fixed:g}, the diagnosis "
                        f"suggests {getattr(config, name):g}"]  # fmt: skip
    if space.init_scale.powers_of_two and not math.log2(config.init_scale).is_integer():
        return [], [f"baseline {DIAGNOSIS_BASELINE} left out: the config samples powers of two of init_scale, and the "
                    f"diagnosis suggests 2^{math.log2(config.init_scale):.2f}"]  # fmt: skip
    kept, notes = _points(((DIAGNOSIS_BASELINE, config),), space, TORCH)
    same = [tag for tag, params in seeds for _, wanted in kept if params == wanted]
    if same:  # A seed baseline already measures it: not a trial spent twice on one point.
        return [], [f"baseline {DIAGNOSIS_BASELINE} not added: the setting the diagnosis suggests is baseline "
                    f"{same[0]}'s, measured once as that"]  # fmt: skip
    return kept, notes


def _points(
    points: Iterable[tuple[str, Any]], space: SpaceConfig, scaler: str
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    dists = distributions(space, scaler)
    kept, notes = [], []
    for tag, cfg in points:
        params: dict[str, Any] = {}
        for name, dist in dists.items():
            if isinstance(cfg, dict):
                value = cfg[name]
            else:
                value = math.log2(cfg.init_scale) if name == POW2_NAME else getattr(cfg, name)
            if isinstance(dist, IntDistribution):
                value = int(value)
            params[name] = value
        outside = [n for n, v in params.items() if not dists[n].low <= v <= dists[n].high]
        if outside:
            notes.append(f"baseline {tag} left out: {', '.join(outside)} outside the search space")
        else:
            kept.append((tag, params))
    return kept, notes


def growth_note(space: SpaceConfig, epochs: int) -> str | None:
    """Says when growth_factor cannot act within ``epochs`` optimizer steps."""
    gi = space.growth_interval
    smallest = gi.fixed if gi.fixed is not None else gi.low
    if smallest >= epochs:
        return (
            f"growth_interval >= {int(smallest)} with only {epochs} optimizer steps: the scale "
            "never grows, so growth_factor cannot matter"
        )
    return None


def format_scale(value: float) -> str:
    """A loss scale as people read it: ``2^16`` for an exact power of two, else ``2^16.37``."""
    exponent = math.log2(value) if value > 0 else math.nan
    if not math.isfinite(exponent):
        return f"{value:g}"
    return f"2^{exponent:.0f}" if exponent == round(exponent) else f"2^{exponent:.2f}"
