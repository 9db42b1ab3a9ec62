"""The trials in the space of octaves: where each one lies, how deep each good one sits.

Every trial is placed in a space of octaves, one axis per searched knob of its rule
(:meth:`~search.scalers.Knob.coordinate`): log2 of a knob that acts multiplicatively on the scale
(GradScaler's four: init_scale sets it, growth and backoff multiply it, growth_interval divides the rate of
growth; a framework's starting scale and window), the value itself for an exponent, a share or a flag. A good
trial's *depth* is its distance in that space to the nearest
trial that is not good (failed, churned, underflowed, diverged, or more than ``tolerance`` from the
best): how far one can move from it, in any combination of the four settings, before the study saw
something go wrong. Its *support* is the good trials within its depth: a trial is judged on the
trials around it, and needs :data:`MIN_SUPPORT` of them, itself included, not on one lucky point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optuna.trial import FrozenTrial

from search.core import SpaceConfig
from search.results._trials import good_trials, param_values, searched_params
from search.scalers import RULES, TORCH

MIN_SUPPORT = 3  # A recommendation needs this many good trials (itself included) within its depth.


def coordinates(values: dict[str, float], space: SpaceConfig, scaler: str = TORCH) -> dict[str, float]:
    """A setting's place in the space of the module docstring: each searched knob on its axis."""
    rule = RULES[scaler]
    return {name: rule.knob(name).coordinate(values[name]) for name in searched_params(space, scaler)}


def octave_distance(a: dict[str, float], b: dict[str, float]) -> float:
    """The distance between two places (:func:`coordinates`), in octaves: the settings' log2 distances
    combined."""
    return math.sqrt(sum((a[k] - b[k]) ** 2 for k in a))


def depth_of(point: dict[str, float], bad: list[tuple[int, dict[str, float]]]) -> tuple[float, int | None]:
    """Distance to the nearest bad trial and its number (inf and None without bad trials).

    Args:
        point: A place (:func:`coordinates`).
        bad: ``(number, place)`` of each trial that counts as bad here.
    """
    if not bad:
        return math.inf, None
    distance, number = min((octave_distance(point, where), n) for n, where in bad)
    return distance, number


@dataclass(frozen=True)
class Landscape:
    """A study's COMPLETE trials placed in the space of octaves, with each good trial's depth.

    Attributes:
        done: The COMPLETE trials, by number (:func:`~search.results._trials.completed`).
        good: The good ones among them.
        good_ids: Their numbers.
        values: Trial number -> every knob of its setting.
        where: Trial number -> its place (:func:`coordinates`).
        bad: ``(number, place)`` of every trial that is not good.
        depths: Good trial number -> its depth and the number of its nearest bad trial.
    """

    done: list[FrozenTrial]
    good: list[FrozenTrial]
    good_ids: frozenset[int]
    values: dict[int, dict[str, float]]
    where: dict[int, dict[str, float]]
    bad: list[tuple[int, dict[str, float]]]
    depths: dict[int, tuple[float, int | None]]

    @classmethod
    def of(
        cls, done: list[FrozenTrial], space: SpaceConfig, tolerance: float, scaler: str = TORCH
    ) -> Landscape:
        """The landscape of ``done`` (COMPLETE trials of a ``scaler`` study, by number), good meaning within
        ``tolerance``."""
        good = good_trials(done, tolerance)
        good_ids = frozenset(t.number for t in good)
        values = {t.number: param_values(t, space, scaler) for t in done}
        where = {n: coordinates(v, space, scaler) for n, v in values.items()}
        bad = [(t.number, where[t.number]) for t in done if t.number not in good_ids]
        depths = {t.number: depth_of(where[t.number], bad) for t in good}
        return cls(done, good, good_ids, values, where, bad, depths)

    def depth(self, number: int) -> float:
        """A good trial's depth, in octaves (``inf`` when no trial is bad)."""
        return self.depths[number][0]

    def offsets(self, number: int) -> dict[str, float]:
        """Per searched setting, how many octaves a good trial's nearest bad trial lies from it (+: higher).

        The depth ranks trials by all settings at once; people read a distance one setting at a time.
        Empty when no trial is bad.
        """
        nearest = self.depths[number][1]
        if nearest is None:
            return {}
        return {p: self.where[nearest][p] - self.where[number][p] for p in self.where[number]}

    def support(self, number: int) -> tuple[int, ...]:
        """The good trials within a good trial's depth of it (itself included), by number."""
        radius = self.depths[number][0]
        return tuple(
            t.number
            for t in self.good
            if octave_distance(self.where[t.number], self.where[number]) <= radius or not self.bad
        )
