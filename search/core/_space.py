"""The search space: a rule's knobs as Optuna distributions, one trial's setting, and the baselines.

Every rule (:mod:`search.scalers`) is searched the same way: each of its knobs that the config does not fix
becomes an Optuna distribution under the knob's own name (an integer one for a whole number or a flag; an
integer exponent ``NAME_log2`` for a knob the config searches as powers of two), and a trial's params plus
the fixed values make the rule's setting. The baselines are the rule's own (GradScaler's five, or a
framework's defaults).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

from search.core._record import AS_RUN_BASELINE, DIAGNOSIS_BASELINE
from search.core._settings import ParamRange, SpaceConfig
from search.scalers import (
    BOOL,
    GRADSCALER,
    INT,
    RULES,
    TORCH,
    RuleSetting,
    ScalerConfig,
)
from search.scalers import format_scale as format_scale  # Named by core's face too.

POW2_NAME = "init_scale_log2"

# GradScaler's baselines as settings: PyTorch's default first (baseline seed-1).
SEED_BASELINES: tuple[tuple[str, ScalerConfig], ...] = tuple(
    (tag, GRADSCALER.setting(values)) for tag, values in GRADSCALER.baselines
)
PYTORCH_DEFAULT: ScalerConfig = GRADSCALER.setting(GRADSCALER.default)


def pow2_name(name: str) -> str:
    """The param of a knob searched as powers of two: its exponent (``init_scale_log2``)."""
    return f"{name}_log2"


def distributions(space: SpaceConfig, scaler: str = TORCH) -> dict[str, BaseDistribution]:
    """The Optuna distributions of the searched (not fixed) knobs of ``scaler``'s rule, by param name."""
    out: dict[str, BaseDistribution] = {}
    ranges = space.ranges(scaler)
    for knob in RULES[scaler].knobs:
        p: ParamRange = ranges[knob.name]
        if p.fixed is not None:
            continue
        if p.powers_of_two:
            out[pow2_name(knob.name)] = IntDistribution(
                math.ceil(math.log2(p.low)), math.floor(math.log2(p.high))
            )
        elif knob.kind in (INT, BOOL):  # A flag is searched as 0/1.
            out[knob.name] = IntDistribution(int(p.low), int(p.high), log=p.log)
        else:
            out[knob.name] = FloatDistribution(p.low, p.high, log=p.log)
    return out


def holding(
    params: Mapping[str, Any], dists: Mapping[str, BaseDistribution]
) -> dict[str, BaseDistribution]:
    """``dists`` with each one widened to hold its param's value: a baseline trained outside a narrowed range
    (the rule's default, :func:`baseline_trials`) is stored with a distribution that contains it, as Optuna
    requires; the others are returned as they are."""
    out = dict(dists)
    for name, value in params.items():
        dist = out.get(name)
        if not isinstance(dist, (IntDistribution, FloatDistribution)) or dist.low <= value <= dist.high:
            continue
        if isinstance(dist, IntDistribution):
            out[name] = IntDistribution(
                int(min(dist.low, value)), int(max(dist.high, value)), log=dist.log, step=dist.step
            )
        else:
            out[name] = FloatDistribution(
                min(dist.low, value), max(dist.high, value), log=dist.log, step=dist.step
            )
    return out


def suggest(
    trial: optuna.Trial,
    space: SpaceConfig,
    scaler: str = TORCH,
    fixed: Mapping[str, Any] | None = None,
) -> ScalerConfig | RuleSetting:
    """Asks ``trial`` for every searched parameter and returns the full scaler settings.

    ``fixed`` are the params a queued trial was enqueued with: a baseline outside a narrowed range (the rule's
    default, :func:`baseline_trials`) is asked over a range widened to hold it (:func:`holding`), so it is
    trained and stored as it is.
    """
    params: dict[str, Any] = {}
    for name, dist in holding(fixed or {}, distributions(space, scaler)).items():
        if isinstance(dist, IntDistribution):
            params[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log)
        else:
            assert isinstance(dist, FloatDistribution)
            params[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    return setting_of(params, space, scaler)


def setting_of(
    params: Mapping[str, Any], space: SpaceConfig, scaler: str = TORCH
) -> ScalerConfig | RuleSetting:
    """A trial's full setting from its params and the fixed values of ``space``: every knob of the rule."""
    rule = RULES[scaler]
    ranges = space.ranges(scaler)
    values = {}
    for knob in rule.knobs:
        p = ranges[knob.name]
        if p.fixed is not None:
            value = p.fixed
        elif p.powers_of_two:
            value = 2.0 ** params[pow2_name(knob.name)]
        else:
            value = params[knob.name]
        values[knob.name] = knob.cast(value)
    return rule.setting(values)


def scaler_config(params: Mapping[str, Any], space: SpaceConfig) -> ScalerConfig:
    """GradScaler's four settings of a trial: its params with the fixed values of ``space``."""
    return ScalerConfig(**setting_of(params, space, TORCH).values)


def baseline_trials(
    space: SpaceConfig, scaler: str = TORCH
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The rule's baselines as params of ``space``, and a note for each one left out or trained outside.

    A baseline is a setting: it is trained as it is or not at all. One that differs from a value the config
    fixes is left out with a note (a row named after the default that trained the config's fixed values would
    claim a default that never ran). One whose value lies outside a searched range is left out too, except
    the rule's default: every study trains it, outside a narrowed range if need be (its params then lie
    outside their distributions), so the answer is always seen beside it.
    """
    rule = RULES[scaler]
    return _points(rule.baselines, space, scaler, keep_outside=rule.default_tag)


def diagnosis_trial(
    setting: dict[str, float],
    space: SpaceConfig,
    seeds: Iterable[tuple[str, dict[str, Any]]] = (),
    scaler: str = TORCH,
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The setting a diagnosis suggests (``suggested_setting``, every knob of ``scaler``'s rule by name) as
    the params of ``space``, tagged :data:`DIAGNOSIS_BASELINE`, as :func:`baseline_trials` gives the
    baselines: left out with a note when it lies outside the space, and not added when one of ``seeds`` (the
    study's baselines) has its params.
    """
    values = {name: setting[name] for name in RULES[scaler].names}
    kept, notes = _points(((DIAGNOSIS_BASELINE, values),), space, scaler, "the diagnosis suggests")
    same = [tag for tag, params in seeds for _, wanted in kept if params == wanted]
    if same:  # A baseline already measures it: not a trial spent twice on one point.
        return [], [
            f"baseline {DIAGNOSIS_BASELINE} not added: the setting the diagnosis suggests is baseline "
            f"{same[0]}'s, measured once as that"
        ]
    return kept, notes


def as_run_trial(
    setting: dict[str, float], space: SpaceConfig, scaler: str = TORCH
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The checkpoint's own scaler setting (its saved scale as ``init_scale``) as the params of ``space``,
    tagged :data:`AS_RUN_BASELINE`: trained even outside a searched range, as the default is, so that what a
    restart costs is seen; left out with a note where the config fixes or rounds a knob otherwise."""
    values = {name: setting[name] for name in RULES[scaler].names}
    point = ((AS_RUN_BASELINE, values),)
    return _points(point, space, scaler, "the checkpoint's scaler has", AS_RUN_BASELINE)


def _points(
    points: Iterable[tuple[str, Mapping[str, Any]]],
    space: SpaceConfig,
    scaler: str,
    source: str = "",
    keep_outside: str = "",
) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Each ``(tag, values)`` as the params of ``space``, or left out with a note where ``space`` would train
    another setting: a value the config fixes otherwise, a start the config rounds to a power of two, or a
    value outside a searched range (except for the tag ``keep_outside``, trained there with a note)."""
    rule = RULES[scaler]
    ranges, dists = space.ranges(scaler), distributions(space, scaler)
    kept, notes = [], []
    for tag, values in points:
        why = _not_trainable(rule, ranges, values, source or "the baseline has")
        if why:
            notes.append(f"baseline {tag} left out: {why}")
            continue
        params: dict[str, Any] = {}
        for name, dist in dists.items():
            knob = name.removesuffix("_log2") if name not in values else name
            value = math.log2(values[knob]) if name != knob else values[name]
            params[name] = int(value) if isinstance(dist, IntDistribution) else value
        outside = [n for n, v in params.items() if not dists[n].low <= v <= dists[n].high]
        if outside and tag == keep_outside:
            what, beside = (f"{rule.maker}'s default", "the default")
            if tag == AS_RUN_BASELINE:
                what, beside = "the run as it was", "it"
            notes.append(
                f"baseline {tag} ({what}): {', '.join(outside)} outside the search space, trained there all"
                f" the same, so the answer is seen beside {beside}"
            )
        elif outside:
            notes.append(f"baseline {tag} left out: {', '.join(outside)} outside the search space")
        if not outside or tag == keep_outside:
            kept.append((tag, params))
    return kept, notes


def _not_trainable(
    rule: Any, ranges: Mapping[str, ParamRange], values: Mapping[str, Any], source: str
) -> str:
    for knob in rule.knobs:
        p, value = ranges[knob.name], values[knob.name]
        if knob.kind in (INT, BOOL) and not float(value).is_integer():
            return f"{knob.name} takes a whole number, {source} {float(value):g}"
        if p.fixed is not None and float(p.fixed) != float(value):
            return f"the config fixes {knob.name} at {p.fixed:g}, {source} {float(value):g}"
        if p.fixed is None and p.powers_of_two and not math.log2(value).is_integer():
            return f"the config samples powers of two of {knob.name}, and {source} 2^{math.log2(value):.2f}"
    return ""


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
