"""The answer of a study under a framework's rule (``--scaler deepspeed|megatron|fairseq``), in its own form.

The verdicts are GradScaler's (:data:`~search.results._recommendation.VERDICTS`), judged the same way,
with the framework's knobs in place of GradScaler's four settings:

* each trial is placed on the knobs' axes (:class:`~search.results._landscape.Landscape`: octaves for a
  scale, a window or a count searched on a log scale, the value for an exponent, a share or a flag); a good
  trial's *depth* is its distance to the nearest trial that is not good;
* the choice is every rule's (:func:`~search.results._choice.choose`): the framework's default (its first
  baseline) when it is good, supported and deep enough, else the deepest supported good trial; ``none-safe``:
  no trial is good.

**The minimal change, by replay** (every rule's, :mod:`search.results._minimal`): a knob of the chosen trial
is put back to the framework's default when the rule, run again on the trial's own overflow sequence with that
knob at its default, gives the same scale before every step and ends (or not) at the same step. The answer
then carries only the knobs that made a difference, and what it prints is what was measured.

**Rounding, by the same replay.** A float knob that stays is rounded, coarse to fine (a power of two for a
knob searched on a log scale, then 2 and 3 significant digits), to the coarsest value whose replay is the
same: ``fp16_scale_tolerance`` 0.272073606094419 becomes 0.27 when no overflow ratio of the run lies
between the two. A starting scale changes every scale after it, so no rounding of it replays the same; it
keeps the digits that give back the number the framework holds (:func:`~search.scalers.shortest`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from optuna.trial import FrozenTrial

from search.core import SpaceConfig, baseline_of
from search.results._choice import choose, unseparated
from search.results._landscape import Landscape
from search.results._minimal import minimal_values, replays_the_same
from search.results._tolerance import DEFAULT_TOLERANCE
from search.results._trials import completed, param_values_of
from search.results._verdict import weigh_confirmation
from search.scalers import FLOAT, RULES, ScalerRule


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
        confirmed_seeds: How many new seeds they paired (None when they did not run it).
        confirmation: Their sentences.
        held_back: The change the search found and held back, the study's own evidence not separating it from
            the default (:func:`~search.results._choice.unseparated`: ``keep-default``, ``search.confirm``
            trains it), with ``held_back_reason``; None otherwise.
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
    confirmed_seeds: int | None = None
    confirmation: tuple[str, ...] = ()
    held_back: dict[str, Any] | None = None
    held_back_reason: str = ""

    def to_default(self, **why: Any) -> RuleAnswer:
        """This answer turned to the framework's default, with ``why`` (the fields that say why) set."""
        default = dict(self.rule.default)
        return replace(self, verdict="keep-default", values=default, changed=(), reset={}, rounded={}, **why)

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
            "held_back": self.held_back,
            "held_back_reason": self.held_back_reason,
            "n_good": self.n_good,
            "nearest_offsets": {k: round(v, 3) for k, v in self.nearest_offsets.items()},
            "rounded": {k: list(v) for k, v in self.rounded.items()},
            "confirmed": self.confirmed,
            "confirmed_seeds": self.confirmed_seeds,
            "confirmation": list(self.confirmation),
            "paste": {self.rule.name: self.rule.paste(self.values)} if self.verdict != "none-safe" else {},
            "notes": self.rule.notes(self.values) if self.verdict != "none-safe" else [],
        }


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
    default = next((t for t in done if baseline_of(t) == rule.default_tag), None)
    default_number = None if default is None else default.number
    landscape = Landscape.of(done, space, tolerance, scaler)
    if not landscape.good:
        return RuleAnswer(rule, "none-safe", rule.default, None, default_trial=default_number)

    chosen = choose(landscape, default).source
    minimal, reset = minimal_values(chosen, landscape.values[chosen.number], rule)
    minimal, rounded = rounded_values(chosen, minimal, rule)
    changed = tuple(k.name for k in rule.knobs if minimal[k.name] != rule.default[k.name])
    depth, nearest = landscape.depths[chosen.number]
    answer = RuleAnswer(
        rule,
        "change" if changed else "keep-default",
        minimal,
        chosen.number,
        changed,
        reset,
        depth,
        nearest,
        landscape.support(chosen.number),
        default_number,
        len(landscape.good),
        {k: v for k, v in landscape.offsets(chosen.number).items() if v},
        rounded,
    )
    if changed and confirmation is not None:
        answer = _weighed(answer, confirmation, space)
    settled = answer.verdict != "change" or answer.confirmed
    unsettled = "" if settled else unseparated(landscape, chosen, default)
    if not unsettled:
        return answer
    # No confirmation runs settle it: the default stays, the change is named.
    return answer.to_default(held_back=dict(answer.values), held_back_reason=unsettled)


def _weighed(answer: RuleAnswer, confirmation: dict[str, Any], space: SpaceConfig) -> RuleAnswer:
    """``answer`` as the confirmation runs of its values leave it (unchanged when they did not run them)."""
    rule = answer.rule
    confirmed, to_default, sentences, seeds = weigh_confirmation(
        confirmation, lambda params: param_values_of(params, space, rule.name) == answer.values
    )
    if confirmed is None:
        return answer
    weighed = {"confirmed": confirmed, "confirmed_seeds": seeds, "confirmation": tuple(sentences)}
    return answer.to_default(**weighed) if to_default else replace(answer, **weighed)


def rounded_values(
    trial: FrozenTrial, values: Mapping[str, Any], rule: ScalerRule
) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """``values`` with each float knob rounded to the coarsest candidate whose replay is the same (module
    docstring)."""
    current = dict(values)
    same = replays_the_same(trial, current, rule)
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
