"""Safe ranges: per setting, the values the good trials used, and the bad trials inside them.

**Safe range** of a parameter: from the smallest to the largest value of that parameter among
the good trials (:mod:`search.results._trials`). The good set need not be an interval in one
parameter alone, so each range also lists the bad trials whose value lies inside it, and splits
them: those with another setting outside *its* safe range that acted in the trial's run
(:func:`idle_settings`: a growth_factor acts only if the scale grew, a backoff_factor only if a
step was skipped) do not count against this range; the rest (*holes*: every setting inside its
good range or idle, and still bad) show that the good set is not an interval (not a box). With
holes, the *clean* stretch is the widest interval of good values around the best trial with no
hole in it. A setting idle in every good trial gets a range that is only what was tried, and says so.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from search.core import OVERFLOW_STEPS, SCALE_CURVE, ParamRange, SpaceConfig, scale_moves
from search.results._format import format_ends, format_value, trial_list
from search.results._trials import (
    DEFAULT_TOLERANCE,
    best_trial,
    completed,
    good_trials,
    param_values,
    searched_params,
)
from search.scalers import RULES, TORCH, ScalerRule


@dataclass(frozen=True)
class SafeRange:
    """The range of one parameter over the good trials.

    Attributes:
        param: The GradScaler setting (``init_scale``, ...).
        low: Smallest value among the good trials (None when there is no good trial).
        high: Largest value among the good trials.
        fixed: The value the study fixed this setting at (then it was not searched).
        n_good: Number of good trials.
        n_trials: Number of COMPLETE trials considered.
        bad_inside: Numbers of the bad trials whose value lies in ``[low, high]``.
        holes: Those of ``bad_inside`` whose other settings all lie inside their safe ranges
            too: the good set is then not an interval (not even given the other ranges).
        clean_low: Lower end of the widest stretch of good values around the best trial
            with no hole inside.
        clean_high: Upper end of that stretch.
        text: The range in words.
        blamed: For each of ``bad_inside`` that is not a hole, ``(trial, settings)``: its other
            settings outside their safe ranges that could have changed its run (see
            :func:`idle_settings`); a setting that could not is never blamed.
        idle_in_good: Whether this setting could not act in any good trial (growth_factor: no good
            trial's scale grew; backoff_factor: none skipped a step; growth_interval: no scale
            grew, so any larger interval runs the same): the range is then only what was tried.
    """

    param: str
    low: float | None
    high: float | None
    fixed: float | None
    n_good: int
    n_trials: int
    bad_inside: tuple[int, ...]
    holes: tuple[int, ...]
    clean_low: float | None
    clean_high: float | None
    text: str
    blamed: tuple[tuple[int, tuple[str, ...]], ...] = ()
    idle_in_good: bool = False

    @property
    def is_interval(self) -> bool:
        """Whether no hole lies inside the range (given the other settings' ranges, an interval)."""
        return not self.holes

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "param": self.param,
            "low": self.low,
            "high": self.high,
            "fixed": self.fixed,
            "n_good": self.n_good,
            "n_trials": self.n_trials,
            "is_interval": self.is_interval,
            "bad_inside": list(self.bad_inside),
            "holes": list(self.holes),
            "clean_low": self.clean_low,
            "clean_high": self.clean_high,
            "blamed": [{"trial": n, "settings": list(q)} for n, q in self.blamed],
            "idle_in_good": self.idle_in_good,
            "text": self.text,
        }


def safe_ranges(
    trials: Iterable[FrozenTrial],
    space: SpaceConfig,
    tolerance: float = DEFAULT_TOLERANCE,
    scaler: str = TORCH,
) -> list[SafeRange]:
    """The safe range of every knob of ``scaler``'s rule (fixed ones say so), see the module docstring.

    Args:
        trials: The study's trials, any states (only COMPLETE ones count).
        space: The study's search space.
        tolerance: A good trial's objective is at most ``best + tolerance * |best|``.
        scaler: The study's rule.
    """
    rule = RULES[scaler]
    done = completed(trials)
    good = good_trials(done, tolerance)
    good_ids = {t.number for t in good}
    bad = [t for t in done if t.number not in good_ids]
    best = best_trial(done)
    values = {t.number: param_values(t, space, scaler) for t in done}
    searched = searched_params(space, scaler)
    bounds = {
        name: (min(values[t.number][name] for t in good), max(values[t.number][name] for t in good))
        for name in searched
        if good
    }
    pct = f"{tolerance * 100:g}%"
    idle = {t.number: idle_settings(t, values[t.number], bounds, scaler) for t in done}
    out = []
    for name in rule.names:
        p: ParamRange = space.ranges(scaler)[name]
        if p.fixed is not None:
            text = f"{name} was fixed at {format_value(name, float(p.fixed))} in this study, not searched."
            out.append(
                SafeRange(name, None, None, float(p.fixed), len(good), len(done), (), (), None, None, text)
            )
            continue
        if not good:
            text = (
                f"{name}: no good range, no trial came within {pct} of the best objective "
                "without a non-finite value or a silent failure."
                if done
                else f"{name}: no completed trial yet."
            )
            out.append(SafeRange(name, None, None, None, 0, len(done), (), (), None, None, text))
            continue
        low, high = bounds[name]
        inside = [t for t in bad if low <= values[t.number][name] <= high]
        # Only a setting that could have changed the trial's run can explain its failure.
        culprits_of = {
            t.number: [q for q in _outside(values[t.number], name, bounds) if q not in idle[t.number]]
            for t in inside
        }
        holes = [t for t in inside if not culprits_of[t.number]]
        idle_in_good = name != rule.start_knob and all(name in idle[t.number] for t in good)
        clean_low, clean_high = _clean_stretch(name, good, holes, best, values)
        text = _range_text(
            name,
            low,
            high,
            pct,
            len(good),
            len(done),
            inside,
            holes,
            culprits_of,
            idle_in_good,
            clean_low,
            clean_high,
            rule,
        )
        out.append(
            SafeRange(
                name,
                low,
                high,
                None,
                len(good),
                len(done),
                tuple(t.number for t in inside),
                tuple(t.number for t in holes),
                clean_low,
                clean_high,
                text,
                tuple((t.number, tuple(culprits_of[t.number])) for t in inside if culprits_of[t.number]),
                idle_in_good,
            )
        )
    return out


def _range_text(
    name: str,
    low: float,
    high: float,
    pct: str,
    n_good: int,
    n_done: int,
    inside: list[FrozenTrial],
    holes: list[FrozenTrial],
    culprits_of: dict[int, list[str]],
    idle_in_good: bool,
    clean_low: float | None,
    clean_high: float | None,
    rule: ScalerRule,
) -> str:
    """A searched setting's safe range in words: the range, then what the bad trials inside it show."""
    lo_txt, hi_txt = format_ends(name, low, high)
    span = f"{name} from {lo_txt} to {hi_txt}" if lo_txt != hi_txt else f"{name} = {lo_txt}"
    text = (
        f"{span} is good for this task: {n_good} of {n_done} trials stayed within {pct} "
        "of the best objective without non-finite values or silent failures"
    )
    if idle_in_good:
        why = "a step was skipped" if name in rule.skips_with else "the scale grew"  # what would make it act
        text += (
            f" ({why} in none of the good trials, so any {name}"
            + (f" above {hi_txt}" if name == rule.window_knob else "")
            + " would have run them the same: the range is only what was tried)"
        )
    if not inside:
        return text + ", and every other trial lies outside this range."
    n = len(inside)
    text += (
        f"; {n} other trial{'s' if n > 1 else ''} inside it did not"
        f" ({trial_list([t.number for t in inside])})"
    )
    explained = n - len(holes)
    if not holes:
        culprits = Counter(q for t in inside for q in culprits_of[t.number])
        # "backoff_factor in 5 of them": a count of trials ("5x" read as five times something).
        which = ", ".join(q if n == 1 else f"{q} in {c} of them" for q, c in culprits.most_common())
        return (
            text
            + f", but {'each of them has' if n > 1 else 'it has'} another setting outside its good range that"
            f" acted in its run ({which}), so {'none of them shows' if n > 1 else 'it does not show'} this"
            " range failing with every other setting inside its own."
        )
    text += (
        f"; {len(holes)} of them ({trial_list([t.number for t in holes])}) "
        f"{'have' if len(holes) > 1 else 'has'} every other setting inside its good range "
        f"or idle in {'their runs' if len(holes) > 1 else 'its run'}"
        f"{f' (the other {explained} do not)' if explained else ''}, so the good set is "
        "not an interval: here it depends on the combination of settings."
    )
    if clean_low is not None:
        first, last = format_ends(name, clean_low, clean_high)
        text += f" Around the best trial, from {first} to {last}, no such trial was seen."
    return text


def _outside(values: dict[str, float], param: str, bounds: dict[str, tuple[float, float]]) -> list[str]:
    """The settings other than ``param`` that lie outside their safe ranges."""
    return [p for p, (lo, hi) in bounds.items() if p != param and not lo <= values[p] <= hi]


def idle_settings(
    trial: FrozenTrial, values: dict[str, float], bounds: dict[str, tuple[float, float]], scaler: str = TORCH
) -> frozenset[str]:
    """The knobs that could not have changed this trial's run, read from its scale curve and skipped steps.

    Every rule grows the scale only after its window (GradScaler's ``growth_interval``) of steps without an
    overflow, by a factor only a growth uses (GradScaler's ``growth_factor``); its back-off, hysteresis and
    floor act only after an overflow (GradScaler's ``backoff_factor``). So when the scale never grew, the
    growth knobs did not act, nor would any window longer than the longest clean stretch (that stretch is
    shorter than the trial's own window); when no step was skipped, the overflow knobs did not act. The start
    scale always acts. A trial without a readable scale curve gets no idle knob.

    Args:
        trial: A COMPLETE trial.
        values: Every knob of its setting (:func:`~search.results._trials.param_values`).
        bounds: The safe ranges, ``{knob: (low, high)}``: the window is idle when the whole stretch above the
            longest clean run is out of reach, i.e. when the range holds a window that would run the same.
        scaler: The study's rule.
    """
    rule = RULES[scaler]
    curve = trial.user_attrs.get(SCALE_CURVE)
    if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
        return frozenset()
    moves = scale_moves(curve, rule.start_scale(values), trial.user_attrs.get(OVERFLOW_STEPS))
    grew, skipped = 1 in moves, -1 in moves
    longest = stretch = 0  # The longest run of steps that neither skipped nor grew.
    for move in moves:
        stretch = stretch + 1 if move == 0 else 0
        longest = max(longest, stretch)
    idle = set()
    if not grew:
        idle.update(rule.grows_with)
        window = rule.window_knob
        if window not in bounds or bounds[window][1] > longest:
            idle.add(window)
    if not skipped:
        idle.update(rule.skips_with)
    return frozenset(idle)


def _clean_stretch(
    name: str,
    good: list[FrozenTrial],
    holes: list[FrozenTrial],
    best: FrozenTrial | None,
    values: dict[int, dict[str, float]],
) -> tuple[float | None, float | None]:
    """The widest run of good values around the best trial's value with no hole inside."""
    if best is None or best.number not in {t.number for t in good}:
        return None, None
    centre = values[best.number][name]
    hole_values = [values[t.number][name] for t in holes]
    if any(v == centre for v in hole_values):
        return centre, centre
    lo_bound = max((v for v in hole_values if v < centre), default=-math.inf)
    hi_bound = min((v for v in hole_values if v > centre), default=math.inf)
    stretch = [values[t.number][name] for t in good if lo_bound < values[t.number][name] < hi_bound]
    return min(stretch), max(stretch)
