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

from search.core import OVERFLOW_STEPS, PARAM_NAMES, SCALE_CURVE, ParamRange, SpaceConfig, scale_moves
from search.results._format import format_ends, format_value, trial_list
from search.results._trials import (
    DEFAULT_TOLERANCE,
    best_trial,
    completed,
    good_trials,
    param_values,
    searched_params,
)

_IDLE_WHY = {  # What would have to happen in a run for the setting to act in it.
    "growth_factor": "the scale grew",
    "backoff_factor": "a step was skipped",
    "growth_interval": "the scale grew",
}


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
    trials: Iterable[FrozenTrial], space: SpaceConfig, tolerance: float = DEFAULT_TOLERANCE
) -> list[SafeRange]:
    """The safe range of every GradScaler setting (fixed ones say so), see the module docstring.

    Args:
        trials: The study's trials, any states (only COMPLETE ones count).
        space: The study's search space.
        tolerance: A good trial's objective is at most ``best + tolerance * |best|``.
    """
    done = completed(trials)
    good = good_trials(done, tolerance)
    good_ids = {t.number for t in good}
    bad = [t for t in done if t.number not in good_ids]
    best = best_trial(done)
    values = {t.number: param_values(t, space) for t in done}
    searched = searched_params(space)
    bounds = {
        name: (min(values[t.number][name] for t in good), max(values[t.number][name] for t in good))
        for name in searched
        if good
    }
    pct = f"{tolerance * 100:g}%"
    idle = {t.number: idle_settings(t, values[t.number], bounds) for t in done}
    out = []
    for name in PARAM_NAMES:
        p: ParamRange = getattr(space, name)
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
        idle_in_good = name != "init_scale" and all(name in idle[t.number] for t in good)
        clean_low, clean_high = _clean_stretch(name, good, holes, best, values)
        text = _range_text(
            name, low, high, pct, len(good), len(done), inside, holes, culprits_of, idle_in_good, clean_low, clean_high
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
) -> str:
    """A searched setting's safe range in words: the range, then what the bad trials inside it show."""
    lo_txt, hi_txt = format_ends(name, low, high)
    span = f"{name} from {lo_txt} to {hi_txt}" if lo_txt != hi_txt else f"{name} = {lo_txt}"
    text = (
        f"{span} is good for this task: {n_good} of {n_done} trials stayed within {pct} "
        "of the best objective without non-finite values or silent failures"
    )
    if idle_in_good:
        text += (
            f" ({_IDLE_WHY[name]} in none of the good trials, so any {name}"
            + (f" above {hi_txt}" if name == "growth_interval" else "")
            + " would have run them the same: the range is only what was tried)"
        )
    if not inside:
        return text + ", and every other trial lies outside this range."
    n = len(inside)
    text += f"; {n} other trial{'s' if n > 1 else ''} inside it did not ({trial_list([t.number for t in inside])})"
    explained = n - len(holes)
    if not holes:
        culprits = Counter(q for t in inside for q in culprits_of[t.number])
        # "backoff_factor in 5 of them": a count of trials ("5x" read as five times something).
        which = ", ".join(q if n == 1 else f"{q} in {c} of them" for q, c in culprits.most_common())
        return text + (
            f", but {'each of them has' if n > 1 else 'it has'} another setting outside its good "
            f"range that acted in its run ({which}), so {'none of them shows' if n > 1 else 'it does not show'} "
            "this range failing with every other setting inside its own."
        )
    text += (
        f"; {len(holes)} of them ({trial_list([t.number for t in holes])}) "
        f"{'have' if len(holes) > 1 else 'has'} every other setting inside its good range "
        f"or idle in {'their runs' if len(holes) > 1 else 'its run'}"
        f"{f' (the other {explained} do not)' if explained else ''}, so the good set is "
        f"not an interval: here it depends on the combination of settings."
    )
    if clean_low is not None:
        first, last = format_ends(name, clean_low, clean_high)
        text += f" Around the best trial, from {first} to {last}, no such trial was seen."
    return text


def _outside(values: dict[str, float], param: str, bounds: dict[str, tuple[float, float]]) -> list[str]:
    """The settings other than ``param`` that lie outside their safe ranges."""
    return [p for p, (lo, hi) in bounds.items() if p != param and not lo <= values[p] <= hi]


def idle_settings(
    trial: FrozenTrial, values: dict[str, float], bounds: dict[str, tuple[float, float]]
) -> frozenset[str]:
    """The settings that could not have changed this trial's run, read from its scale curve.

    GradScaler multiplies the scale by ``growth_factor`` only when it grows and by
    ``backoff_factor`` only on a skipped step, and it grows only after ``growth_interval``
    unskipped steps in a row. So when the scale never grew, ``growth_factor`` did not act, nor
    would any ``growth_interval`` longer than the longest unskipped stretch (that stretch is
    shorter than the trial's own interval); when no step was skipped, ``backoff_factor`` did not
    act. ``init_scale`` always acts. A trial without a readable scale curve gets no idle setting.

    Args:
        trial: A COMPLETE trial.
        values: Its four settings (:func:`~search.results._trials.param_values`).
        bounds: The safe ranges, ``{setting: (low, high)}``: ``growth_interval`` is idle when the
            whole stretch above the longest unskipped run is out of reach, i.e. when the range
            holds an interval that would run the same.
    """
    curve = trial.user_attrs.get(SCALE_CURVE)
    if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
        return frozenset()
    moves = scale_moves(curve, values["init_scale"], trial.user_attrs.get(OVERFLOW_STEPS))
    grew, skipped = 1 in moves, -1 in moves
    longest = stretch = 0  # The longest run of steps that neither skipped nor grew.
    for move in moves:
        stretch = stretch + 1 if move == 0 else 0
        longest = max(longest, stretch)
    idle = set()
    if not grew:
        idle.add("growth_factor")
        if "growth_interval" not in bounds or bounds["growth_interval"][1] > longest:
            idle.add("growth_interval")
    if not skipped:
        idle.add("backoff_factor")
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
