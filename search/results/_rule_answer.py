"""The answer of a study under a framework's rule (``--scaler deepspeed|megatron|fairseq``), in its own form.

The verdicts are GradScaler's (:data:`~search.results._recommendation.VERDICTS`), judged the same way,
with the framework's knobs in place of GradScaler's four settings:

* each trial is placed on the knobs' axes (:meth:`~search.scalers.Knob.coordinate`: octaves for a scale,
  a window or a count searched on a log scale, the value for an exponent, a share or a flag); a good
  trial's *depth* is its distance to the nearest trial that is not good;
* ``keep-default``: the framework's default (its first baseline) is good and at least
  :data:`~search.results._recommendation.DEFAULT_MARGIN` deep; ``change``: else the deepest good trial
  among those with :data:`~search.results._landscape.MIN_SUPPORT` good trials within their depth;
  ``none-safe``: no trial is good.

**The minimal change, by replay.** A knob of the chosen trial is put back to the framework's default
when the rule, run again on the trial's own overflow sequence with that knob at its default, gives the
same scale before every step and ends (or not) at the same step: the same scales make the same
gradients, so the run is the same step for step (induction over the steps). The answer then carries only
the knobs that made a difference, and what it prints is what was measured.

**Rounding, by the same replay.** A float knob that stays is rounded, coarse to fine (a power of two for a
knob searched on a log scale, then 2 and 3 significant digits), to the coarsest value whose replay is the
same: ``fp16_scale_tolerance`` 0.272073606094419 becomes 0.27 when no overflow ratio of the run lies
between the two. A starting scale changes every scale after it, so no rounding of it replays the same; it
keeps the digits that give back the number the framework holds (:func:`~search.scalers.shortest`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from search.core import OVERFLOW_STEPS, SCALE_CURVE, SpaceConfig, baseline_of, setting_of
from search.results._landscape import MIN_SUPPORT, depth_of, octave_distance
from search.results._tolerance import DEFAULT_TOLERANCE
from search.results._trials import completed, good_trials
from search.results._verdict import comparison_verdict
from search.scalers import FLOAT, RULES, RuleSetting, ScaleAtMinimum, ScalerRule

DEFAULT_MARGIN = 2.0  # As GradScaler's answer: keep the default when it is good and this deep.


@dataclass(frozen=True)
class RuleAnswer:
    """The answer of a framework study.

    Attributes:
        verdict: ``keep-default``, ``change`` or ``none-safe``.
        values: Every knob's value to use (the default's when ``keep-default``).
        source_trial: The measured trial the values come from (the default's trial when kept), or None.
        changed: The knobs that differ from the framework's default, in its order.
        reset: Per knob of ``source_trial`` put back to the default by replay, why.
        depth: ``source_trial``'s distance to the nearest trial that is not good (inf: none is).
        nearest_bad: That trial's number, or None.
        neighbours: The good trials within ``depth`` of ``source_trial``.
        nearest_offsets: Per searched knob, how far ``nearest_bad`` lies from ``source_trial`` on its axis.
        rounded: Per knob rounded by replay, ``(the trial's value, the value written)``.
        default_trial: The framework default's trial, or None when it has not run.
        n_good: How many trials are good.
        confirmed: What confirmation runs on new seeds said of the change (``"confirmed"``, ``"overturned"``,
            ``"not better"``), or None when they did not run it; the last two turn the answer to the default.
        confirmation: Their sentences.
    """

    rule: ScalerRule
    verdict: str
    values: dict[str, Any]
    source_trial: int | None
    changed: tuple[str, ...] = ()
    reset: dict[str, str] = field(default_factory=dict)
    depth: float = math.inf
    nearest_bad: int | None = None
    neighbours: tuple[int, ...] = ()
    default_trial: int | None = None
    n_good: int = 0
    nearest_offsets: dict[str, float] = field(default_factory=dict)
    rounded: dict[str, tuple[float, float]] = field(default_factory=dict)
    confirmed: str | None = None
    confirmation: tuple[str, ...] = ()

    def block(self) -> str:
        """The values in the framework's own config form."""
        return self.rule.block(self.values)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--best-out`` (under ``paste``, keyed by the framework's name, the block: as a JSON
        object where the framework's config is JSON)."""
        return {
            "verdict": self.verdict,
            "scaler": self.rule.name,
            "values": dict(self.values),
            "source_trial": self.source_trial,
            "changed": list(self.changed),
            "reset": dict(self.reset),
            "depth": None if math.isinf(self.depth) else round(self.depth, 3),
            "nearest_bad": self.nearest_bad,
            "neighbours": list(self.neighbours),
            "default_trial": self.default_trial,
            "n_good": self.n_good,
            "nearest_offsets": {k: round(v, 3) for k, v in self.nearest_offsets.items()},
            "rounded": {k: list(v) for k, v in self.rounded.items()},
            "confirmed": self.confirmed,
            "confirmation": list(self.confirmation),
            "paste": {self.rule.name: self.rule.paste(self.values)} if self.verdict != "none-safe" else {},
            "notes": self.rule.notes(self.values) if self.verdict != "none-safe" else [],
        }


def rule_values(trial: FrozenTrial, space: SpaceConfig, scaler: str) -> dict[str, Any]:
    """Every knob's value a trial of a framework study ran (fixed knobs included)."""
    setting = setting_of(trial.params, space, scaler)
    assert isinstance(setting, RuleSetting)
    return dict(setting.values)


def answer_rule_study(
    trials: list[FrozenTrial],
    space: SpaceConfig,
    scaler: str,
    tolerance: float = DEFAULT_TOLERANCE,
    confirmation: dict[str, Any] | None = None,
) -> RuleAnswer | None:
    """The answer of a framework study's trials (module docstring); None without a COMPLETE trial.

    With ``confirmation`` (:func:`search.results.summarize_confirmation`) that ran the change on new seeds,
    paired with the framework's default, the runs decide as for GradScaler: a change the default beats, or
    does not lose to beyond noise, gives way to the default (:func:`search.results.comparison_verdict`).
    """
    rule = RULES[scaler]
    done = completed(trials)
    if not done:
        return None
    searched = [k for k in rule.knobs if space.ranges(scaler)[k.name].fixed is None]
    values = {t.number: rule_values(t, space, scaler) for t in done}
    where = {n: {k.name: k.coordinate(v[k.name]) for k in searched} for n, v in values.items()}
    good = good_trials(done, tolerance)
    good_ids = {t.number for t in good}
    bad = [(t.number, where[t.number]) for t in done if t.number not in good_ids]
    default = next((t for t in done if baseline_of(t) == rule.default_tag), None)
    default_number = None if default is None else default.number
    if not good:
        return RuleAnswer(rule, "none-safe", rule.default, None, default_trial=default_number)

    depths = {t.number: depth_of(where[t.number], bad) for t in good}

    def support(number: int) -> tuple[int, ...]:
        radius = depths[number][0]
        return tuple(
            n for n in sorted(good_ids) if not bad or octave_distance(where[n], where[number]) <= radius
        )

    if default is not None and default.number in good_ids and depths[default.number][0] >= DEFAULT_MARGIN:
        chosen = default
    else:
        supported = [t for t in good if len(support(t.number)) >= MIN_SUPPORT] or good
        chosen = max(supported, key=lambda t: (depths[t.number][0], -t.value, -t.number))
    minimal, reset = minimal_values(chosen, values[chosen.number], rule)
    minimal, rounded = rounded_values(chosen, minimal, rule)
    changed = tuple(k.name for k in rule.knobs if minimal[k.name] != rule.default[k.name])
    nearest = depths[chosen.number][1]
    offsets = (
        {} if nearest is None else {k: where[nearest][k] - where[chosen.number][k] for k in where[nearest]}
    )
    answer = RuleAnswer(
        rule,
        "change" if changed else "keep-default",
        minimal,
        chosen.number,
        changed,
        reset,
        depths[chosen.number][0],
        depths[chosen.number][1],
        support(chosen.number),
        default_number,
        len(good),
        {k: v for k, v in offsets.items() if v},
        rounded,
    )
    return answer if confirmation is None or not changed else _weighed(answer, confirmation, space)


def _weighed(answer: RuleAnswer, confirmation: dict[str, Any], space: SpaceConfig) -> RuleAnswer:
    """``answer`` as the confirmation runs of its values leave it (unchanged when they did not run them)."""
    rule = answer.rule
    entry = next(
        (
            c
            for c in confirmation.get("comparisons", [])
            if dict(setting_of(c["params"], space, rule.name).values) == answer.values  # type: ignore[union-attr]
        ),
        None,
    )
    verdict = comparison_verdict(entry)
    if verdict is None:
        return answer
    confirmed, sentence = verdict
    if confirmed == "confirmed":
        return replace(answer, confirmed=confirmed, confirmation=(sentence,))
    sentences = (sentence,) if confirmed == "overturned" else (sentence, "Keep the default.")
    return replace(
        answer,
        verdict="keep-default",
        values=dict(rule.default),
        changed=(),
        reset={},
        rounded={},
        confirmed=confirmed,
        confirmation=sentences,
    )


def minimal_values(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` with every knob put back to the framework's default where replay shows it did not act."""
    current = dict(values)
    same = _replays_the_same(trial, current, rule)
    if same is None:
        return current, {}
    reset: dict[str, str] = {}
    for knob in rule.knobs:
        if current[knob.name] == knob.default:
            continue
        trying = {**current, knob.name: knob.default}
        if same(trying):
            current = trying
            reset[knob.name] = (
                f"at the default {knob.default:g} the rule gives the same scale at every one of the"
                f" {len(trial.user_attrs[SCALE_CURVE])} steps on this run's"
                f" {len(trial.user_attrs[OVERFLOW_STEPS])} overflows"
            )
    return current, reset


def _replays_the_same(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether other values replay ``trial``'s recorded run (its overflow steps) as ``values`` do; None when
    the trial recorded no whole run to replay."""
    overflows = trial.user_attrs.get(OVERFLOW_STEPS)
    curve = trial.user_attrs.get(SCALE_CURVE)
    if overflows is None or not curve or any(v is None for v in curve):
        return None
    steps, overflowed = len(curve), set(overflows)
    measured = replay(rule, values, overflowed, steps)
    return lambda other: replay(rule, other, overflowed, steps) == measured


def rounded_values(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """``values`` with each float knob rounded to the coarsest candidate whose replay is the same (module
    docstring)."""
    current = dict(values)
    same = _replays_the_same(trial, current, rule)
    if same is None:
        return current, {}
    rounded: dict[str, tuple[float, float]] = {}
    for knob in rule.knobs:
        value = current[knob.name]
        if knob.kind != FLOAT or value == knob.default or value == 0:
            continue
        for candidate in _roundings(float(value), knob.log):
            if knob.valid(candidate) and same({**current, knob.name: candidate}):
                current[knob.name] = candidate
                rounded[knob.name] = (float(value), candidate)
                break
    return current, rounded


def _roundings(value: float, log: bool) -> list[float]:
    """Coarse to fine: a power of two (a log-searched knob), then 2 and 3 significant digits; none as round as
    ``value``."""
    candidates = [2.0 ** round(math.log2(value))] if log else []
    candidates += [float(f"{value:.2g}"), float(f"{value:.3g}")]
    out: list[float] = []
    for c in candidates:
        if c != value and c not in out:
            out.append(c)
    return out


def replay(rule: ScalerRule, values: Mapping[str, Any], overflows: set[int], steps: int) -> tuple[Any, ...]:
    """The scale before each step (float32, as GradScaler holds it) and the step the rule ends the run at,
    running ``rule`` with ``values`` on a recorded overflow sequence."""
    machine = rule.build(values)
    scales = []
    for step in range(steps):
        scales.append(float(np.float32(machine.scale)))
        try:
            machine.update(step in overflows)
        except ScaleAtMinimum:
            return (*scales, "ended", step)
    return (*scales, float(np.float32(machine.scale)))
