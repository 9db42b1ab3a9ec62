"""What a finished study says about the scaler settings: safe ranges and a robust recommendation.

Pure functions over a list of :class:`~optuna.trial.FrozenTrial` and the study's
:class:`~search.core._config.SpaceConfig`; nothing here plots or touches a storage. Only COMPLETE
trials with a finite objective count; RUNNING, WAITING, PRUNED and FAIL trials are ignored, so a
study that is still running can be analysed at any moment.

**Safe trials.** A trial is *good* when it did not go non-finite (user attr ``nonfinite``), has
no silent failure (``failure == "none"``) and its objective is within ``tolerance`` (default 1%)
of the study's best objective: ``value <= best + tolerance * |best|``. Every other COMPLETE trial
is *bad*.

**Safe range** of a parameter: from the smallest to the largest value of that parameter among
the good trials. The good set need not be an interval in one parameter alone, so each range also
lists the bad trials whose value lies inside it, and splits them: those with another setting
outside *its* safe range that acted in the trial's run (:func:`idle_settings`: a growth_factor
acts only if the scale grew, a backoff_factor only if a step was skipped) do not count against
this range; the rest (*holes*: every setting inside its safe range or idle, and still bad) show
that the safe set is not an interval (not a box). With holes, the *clean* stretch is the widest
interval of good values around the best trial with no hole in it. A setting idle in every good
trial gets a range that is only what was tried, and says so.

**Recommendation.** Not the argmin, which among many near-equal trials is noise, and not the
middle of a box of ties, which can sit next to a failure edge. Every trial is placed in a space of
octaves: log2 of each searched setting (all four act multiplicatively on the scale: init_scale
sets it, growth and backoff multiply it, growth_interval divides the rate of growth). A good
trial's *depth* is its distance in that space to the nearest trial that is not good (failed,
churned, underflowed, diverged, or more than ``tolerance`` from the best): how far one can move
from it, in any combination of the four settings, before the study saw something go wrong. The
recommendation is the deepest good trial among those with at least :data:`MIN_SUPPORT` good
trials within their depth (so it is judged on the trials around it, not on one lucky point), with
that trial's own values (a rounded neighbour would be a setting no trial measured; on a rough
objective such as deep-mlp's it can land well outside the tolerance). When PyTorch's default (baseline
``seed-1``) is good and at least :data:`DEFAULT_MARGIN` octaves deep, the answer is "keep the
default". When confirmation runs on new seeds exist (``search.confirm``), they decide: a default
that is significantly better than the recommended setting overturns it, and a recommended setting
that is not significantly better than a good default is not worth a change.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.core import (
    FAILURE,
    PARAM_NAMES,
    SCALE_CURVE,
    SEED_BASELINES,
    ParamRange,
    ScalerConfig,
    SpaceConfig,
    default_trial,
    device_kind,
    format_scale,
    scale_moves,
    scaler_config,
)

__all__ = [
    "DEFAULT_TIE_TOLERANCE",
    "DEFAULT_TOLERANCE",
    "DEFAULT_MARGIN",
    "MIN_SUPPORT",
    "Recommendation",
    "SafeRange",
    "best_trial",
    "completed",
    "box_corners",
    "check_boxes",
    "confirmation_verdict",
    "coordinates",
    "format_range",
    "format_value",
    "good_trials",
    "idle_settings",
    "is_safe",
    "param_values",
    "recommend",
    "safe_ranges",
    "searched_params",
]

DEFAULT_TOLERANCE = 0.01  # Safe: within 1% of the best objective.
DEFAULT_TIE_TOLERANCE = 0.001  # A tie with the best: within 0.1% (the summary's "within 0.1%").
MIN_SUPPORT = 3  # A recommendation needs this many good trials (itself included) within its depth.
DEFAULT_MARGIN = 2.0  # Keep the default when it is good and this many octaves from the nearest bad trial.
SEED_DEFAULT = SEED_BASELINES[0][1]  # PyTorch's default GradScaler settings (baseline seed-1).


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
            too: the safe set is then not an interval (not even given the other ranges).
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


@dataclass(frozen=True)
class Recommendation:
    """A robust GradScaler setting and why it was chosen.

    Attributes:
        config: The recommended settings (PyTorch's default when ``keep_default``).
        source_trial: The measured trial whose values it is, or the default's trial. When
            confirmation runs turn the answer to the default (``keep_default`` with ``confirmed``),
            the trial they tested against it; ``depth``, ``nearest_bad``, ``edge`` and
            ``neighbours`` then describe that trial, ``default_depth`` the default.
        depth: Distance from ``source_trial`` to the nearest trial that is not good, in searched
            ranges (see the module docstring); ``inf`` when every trial is good.
        nearest_bad: That nearest trial's number, or None.
        edge: Per searched setting, the nearest bad trial's value (None without one).
        neighbours: Numbers of the good trials within ``depth`` of ``source_trial`` (itself included).
        keep_default: Whether the answer is "keep PyTorch's default".
        default_trial: The default's (``seed-1``) trial number, or None if it has not run.
        default_depth: The default's depth (None when it is not good or has not run).
        best_trial: Number of the trial with the lowest objective.
        confirmed: ``"confirmed"``, ``"overturned"``, ``"not better"`` (from confirmation runs), or
            None when there are none for this setting.
        candidate: Per searched setting, ``(low, high)``: the candidate for ranges that are safe
            *together*, in any combination (the per-setting safe ranges each assume the others stay
            where the good trials were): the box inscribed in the ball around ``config`` that holds
            no failed trial, cut to the span of the failure-free trials in that ball (``MIN_SUPPORT``
            at least; empty otherwise). Sampled trials cannot vouch for its corners (a thin failing
            slab, say a high scale with a backoff near 1, is easily missed), so it is only a candidate
            until its corners are trained (:func:`check_boxes`, run by ``search.confirm``).
        together: The box that *is* safe together: the first of :func:`check_boxes` whose every
            corner trained without failure; empty until such a check exists.
        together_check: ``"checked"`` (``together`` holds), ``"unchecked"`` (corners not all run
            yet), ``"refuted"`` (every box tried had a failing corner) or ``"none"`` (no candidate).
        together_failed: The failing corners seen, as ``{"point": {...}, "failure": code}``.
        together_trials: Numbers of the study's trials inside ``together`` (or the candidate).
        device_type: The device type of the ``GradScaler`` line.
        reasons: The explanation, sentence by sentence.
    """

    config: ScalerConfig
    source_trial: int
    depth: float
    nearest_bad: int | None
    edge: dict[str, float | None]
    neighbours: tuple[int, ...]
    keep_default: bool
    default_trial: int | None
    default_depth: float | None
    best_trial: int
    confirmed: str | None
    device_type: str
    reasons: tuple[str, ...] = field(default=())
    candidate: dict[str, tuple[float, float]] = field(default_factory=dict)
    together: dict[str, tuple[float, float]] = field(default_factory=dict)
    together_check: str = "none"
    together_failed: tuple[dict[str, Any], ...] = field(default=())
    together_trials: tuple[int, ...] = field(default=())

    @property
    def code(self) -> str:
        """The ready ``torch.amp.GradScaler(...)`` line."""
        return self.config.as_code(self.device_type)

    @property
    def text(self) -> str:
        """The explanation as one paragraph."""
        return " ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "init_scale": self.config.init_scale,
            "growth_factor": self.config.growth_factor,
            "backoff_factor": self.config.backoff_factor,
            "growth_interval": self.config.growth_interval,
            "code": self.code,
            "source_trial": self.source_trial,
            "depth": self.depth if math.isfinite(self.depth) else None,
            "nearest_bad": self.nearest_bad,
            "edge": dict(self.edge),
            "neighbours": list(self.neighbours),
            "keep_default": self.keep_default,
            "default_trial": self.default_trial,
            "default_depth": self.default_depth,
            "best_trial": self.best_trial,
            "confirmed": self.confirmed,
            "candidate": {p: list(r) for p, r in self.candidate.items()},
            "together": {p: list(r) for p, r in self.together.items()},
            "together_check": self.together_check,
            "together_failed": [dict(f) for f in self.together_failed],
            "together_trials": list(self.together_trials),
            "text": self.text,
        }


def completed(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The COMPLETE trials with a finite objective, by trial number (everything else is ignored)."""
    done = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    return sorted(done, key=lambda t: t.number)


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


def searched_params(space: SpaceConfig) -> list[str]:
    """The GradScaler settings the space searches (not fixed), in the usual order."""
    return [name for name in PARAM_NAMES if getattr(space, name).fixed is None]


def param_values(trial: FrozenTrial, space: SpaceConfig) -> dict[str, float]:
    """The four GradScaler settings of a trial (``init_scale`` as a scale even for powers of two)."""
    cfg = scaler_config(trial.params, space)
    return {name: float(getattr(cfg, name)) for name in PARAM_NAMES}


def format_value(param: str, value: float) -> str:
    """A setting as people read it: ``2^7.74`` for init_scale, ``1.93``, ``0.469``, ``662``."""
    if param == "init_scale":
        return format_scale(value)
    if param == "growth_interval":
        return str(round(value))
    return f"{value:.3g}"


def _trial_list(numbers: Sequence[int], limit: int = 5) -> str:
    shown = ", ".join(f"#{n}" for n in numbers[:limit])
    return shown + (f" and {len(numbers) - limit} more" if len(numbers) > limit else "")


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
                f"{name}: no safe range, no trial came within {pct} of the best objective "
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
        lo_txt, hi_txt = format_value(name, low), format_value(name, high)
        span = f"{name} from {lo_txt} to {hi_txt}" if lo_txt != hi_txt else f"{name} = {lo_txt}"
        text = (
            f"{span} is safe for this task: {len(good)} of {len(done)} trials stayed within {pct} "
            "of the best objective without non-finite values or silent failures"
        )
        if idle_in_good:
            text += (
                f" ({_IDLE_WHY[name]} in none of the good trials, so any {name}"
                + (f" above {hi_txt}" if name == "growth_interval" else "")
                + " would have run them the same: the range is only what was tried)"
            )
        if not inside:
            text += ", and every other trial lies outside this range."
        else:
            n = len(inside)
            text += f"; {n} other trial{'s' if n > 1 else ''} inside it did not ({_trial_list([t.number for t in inside])})"
            explained = n - len(holes)
            if not holes:
                culprits = Counter(q for t in inside for q in culprits_of[t.number])
                which = ", ".join(f"{q} {c}x" for q, c in culprits.most_common())
                text += (
                    f", but {'each of them has' if n > 1 else 'it has'} another setting outside its safe "
                    f"range that acted in its run ({which}), so {'none of them shows' if n > 1 else 'it does not show'} "
                    "this range failing with every other setting inside its own."
                )
            else:
                text += (
                    f"; {len(holes)} of them ({_trial_list([t.number for t in holes])}) "
                    f"{'have' if len(holes) > 1 else 'has'} every other setting inside its safe range "
                    f"or idle in {'their runs' if len(holes) > 1 else 'its run'}"
                    f"{f' (the other {explained} do not)' if explained else ''}, so the safe set is "
                    f"not an interval: safety here depends on the combination of settings."
                )
                if clean_low is not None:
                    text += (
                        f" Around the best trial, from {format_value(name, clean_low)} to "
                        f"{format_value(name, clean_high)}, no such trial was seen."
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


def _outside(values: dict[str, float], param: str, bounds: dict[str, tuple[float, float]]) -> list[str]:
    """The settings other than ``param`` that lie outside their safe ranges."""
    return [p for p, (lo, hi) in bounds.items() if p != param and not lo <= values[p] <= hi]


_IDLE_WHY = {  # What would have to happen in a run for the setting to act in it.
    "growth_factor": "the scale grew",
    "backoff_factor": "a step was skipped",
    "growth_interval": "the scale grew",
}


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
        values: Its four settings (:func:`param_values`).
        bounds: The safe ranges, ``{setting: (low, high)}``: ``growth_interval`` is idle when the
            whole stretch above the longest unskipped run is out of reach, i.e. when the range
            holds an interval that would run the same.
    """
    curve = trial.user_attrs.get(SCALE_CURVE)
    if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
        return frozenset()
    moves = scale_moves(curve, values["init_scale"])
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


def coordinates(values: dict[str, float], space: SpaceConfig) -> dict[str, float]:
    """A setting's place in the space of the module docstring: log2 of each searched setting (octaves)."""
    return {name: math.log2(values[name]) for name in searched_params(space)}


def _distance(a: dict[str, float], b: dict[str, float]) -> float:
    return math.sqrt(sum((a[k] - b[k]) ** 2 for k in a))


def _depth(point: dict[str, float], bad: list[tuple[int, dict[str, float]]]) -> tuple[float, int | None]:
    """Distance to the nearest bad trial and its number (inf and None without bad trials)."""
    if not bad:
        return math.inf, None
    distance, number = min((_distance(point, where), n) for n, where in bad)
    return distance, number


def _as_config(values: dict[str, float]) -> ScalerConfig:
    return ScalerConfig(
        init_scale=values["init_scale"],
        growth_factor=values["growth_factor"],
        backoff_factor=values["backoff_factor"],
        growth_interval=max(1, round(values["growth_interval"])),
    )


def _span(
    numbers: Iterable[int], values: dict[int, dict[str, float]], params: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """Per setting, the smallest and largest value among the given trials."""
    numbers = list(numbers)
    return {p: (min(values[n][p] for n in numbers), max(values[n][p] for n in numbers)) for p in params}


def _box(
    centre: dict[str, float], depth: float, space: SpaceConfig
) -> dict[str, tuple[float, float]]:
    """The ranges that are safe together around ``centre``: the box inscribed in its ball of ``depth``.

    A point of the box is at most ``depth`` octaves (log2 distance, all searched settings
    combined) from ``centre``, so a box around a point whose nearest bad trial is ``depth`` away
    holds no bad trial, whatever combination of its ranges is picked: half-width ``depth / sqrt(k)``
    octaves in each of the ``k`` searched settings (a hair less, so a bad trial on the ball is outside).
    """
    params = searched_params(space)
    half = depth / math.sqrt(len(params)) * (1 - 1e-9) if math.isfinite(depth) else math.inf
    out = {}
    for p in params:
        r: ParamRange = getattr(space, p)
        low = max(float(r.low), centre[p] * 2.0**-half) if math.isfinite(half) else float(r.low)
        high = min(float(r.high), centre[p] * 2.0**half) if math.isfinite(half) else float(r.high)
        if p == "growth_interval":  # Whole steps inside the box; at least the centre itself.
            low, high = float(math.ceil(low)), float(math.floor(high))
            if low > high:
                low = high = float(round(centre[p]))
        out[p] = (low, high)
    return out


CHECK_ROUNDS = 3  # After the candidate box, this many halvings (in octaves) of it are tried.


def check_boxes(candidate: dict[str, tuple[float, float]], config: ScalerConfig) -> list[dict[str, tuple[float, float]]]:
    """The boxes whose corners ``search.confirm`` trains, in order: the candidate, then halved.

    Each halving halves every range's distance to ``config``, in octaves (``growth_interval`` to
    whole steps inside). The first box whose every corner trains without failure is the one
    :func:`recommend` states as safe together.
    """
    centre = {p: float(getattr(config, p)) for p in candidate}
    boxes = []
    for k in range(CHECK_ROUNDS + 1):
        f = 0.5**k
        box = {}
        for p, (lo, hi) in candidate.items():
            c = centre[p]
            low, high = c * (lo / c) ** f, c * (hi / c) ** f
            if p == "growth_interval":
                low, high = float(math.ceil(low - 1e-9)), float(math.floor(high + 1e-9))
                if low > high:
                    low = high = c
            box[p] = (lo if k == 0 else low, hi if k == 0 else high)
        boxes.append(box)
    return boxes


def box_corners(box: dict[str, tuple[float, float]], config: ScalerConfig) -> list[dict[str, float]]:
    """The corners of ``box``: every searched setting at one of its ends, the others at ``config``'s."""
    names = list(box)
    corners = []
    for ends in itertools.product(*(sorted({box[p][0], box[p][1]}) for p in names)):
        point = {p: float(getattr(config, p)) for p in PARAM_NAMES}
        point.update(zip(names, ends))
        corners.append(point)
    return corners


def _same_point(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(math.isclose(a[p], b[p], rel_tol=1e-9) for p in PARAM_NAMES)


def _judge(
    candidate: dict[str, tuple[float, float]], config: ScalerConfig, corners_run: Sequence[dict[str, Any]]
) -> tuple[str, dict[str, tuple[float, float]], list[dict[str, Any]]]:
    """(check, the box that holds, failing corners) from the corner runs of :func:`check_boxes`."""
    if not candidate:
        return "none", {}, []
    failed: list[dict[str, Any]] = []
    for box in check_boxes(candidate, config):
        results = []
        for point in box_corners(box, config):
            run = next((r for r in corners_run if _same_point(r["point"], point)), None)
            results.append(run)
        bad = [r for r in results if r is not None and r["failure"] != "none"]
        for r in bad:
            if not any(_same_point(f["point"], r["point"]) for f in failed):
                failed.append({"point": dict(r["point"]), "failure": r["failure"]})
        if bad:
            continue  # Refuted: the next, smaller box.
        if any(r is None for r in results):
            return "unchecked", {}, failed
        return "checked", box, failed
    return "refuted", {}, failed


def _point_text(point: dict[str, float], names: Iterable[str]) -> str:
    return ", ".join(f"{p} {format_value(p, point[p])}" for p in names)


def _together_text(
    check: str,
    candidate: dict[str, tuple[float, float]],
    together: dict[str, tuple[float, float]],
    failed: list[dict[str, Any]],
    config: ScalerConfig,
) -> str:
    def ranges(box: dict[str, tuple[float, float]]) -> str:
        return ", ".join(f"{p} {format_range(p, lo, hi)}" for p, (lo, hi) in box.items())

    n = len(box_corners(candidate, config))
    failing = ""
    if failed:
        first = failed[0]
        failing = (
            f" {len(failed)} corner{'s' if len(failed) != 1 else ''} of larger boxes failed (e.g. "
            f"{_point_text(first['point'], candidate)}: {first['failure']})."
        )
    if check == "checked":
        return (
            f"Ranges that are safe together, in any combination ({ranges(together)}): checked, all "
            f"{len(box_corners(together, config))} corners trained without failure on the search's data "
            "(search.confirm). Churn grows with the scale, the growth factor and the backoff factor and with "
            "shorter intervals, underflow the other way round, so a box whose corners are safe holds neither "
            "inside." + failing
        )
    if check == "refuted":
        return (
            f"No ranges that are safe together: every box tried around the setting had a corner that failed "
            f"(search.confirm).{failing} The safe ranges hold one setting at a time, around the good trials."
        )
    return (
        f"Ranges that may be safe together (a candidate, not checked: {ranges(candidate)}): no trial inside "
        f"failed, but sampled trials cannot vouch for every combination; python -m search.confirm trains its "
        f"{n} corners." + failing
    )


def _depth_text(depth: float) -> str:
    return "unbounded (no trial failed)" if not math.isfinite(depth) else f"{depth:.2f} octaves"


def recommend(
    trials: Iterable[FrozenTrial],
    space: SpaceConfig,
    tolerance: float = DEFAULT_TOLERANCE,
    device_type: str | None = None,
    confirmation: dict[str, Any] | None = None,
) -> Recommendation | None:
    """A robust setting: the deepest good trial, or PyTorch's default when it is deep enough.

    Args:
        trials: The study's trials, any states (only COMPLETE ones count).
        space: The study's search space.
        tolerance: A good trial is safe and within ``best + tolerance * |best|``.
        device_type: For the ``GradScaler`` line; None takes the best trial's device type.
        confirmation: :func:`search.results._confirmations.summarize_confirmation` data, if any: its
            comparison of the recommended setting with the default decides (module docstring).

    Returns:
        None when the study has no COMPLETE trial yet.
    """
    done = completed(trials)
    best = best_trial(done)
    if best is None:
        return None
    device = device_type or device_kind(best, default="cuda")
    good = good_trials(done, tolerance)
    good_ids = {t.number for t in good}
    values = {t.number: param_values(t, space) for t in done}
    where = {n: coordinates(v, space) for n, v in values.items()}
    bad = [(t.number, where[t.number]) for t in done if t.number not in good_ids]
    params = searched_params(space)
    pct = f"{tolerance * 100:g}%"
    default = default_trial(done)

    def edge_of(number: int | None) -> dict[str, float | None]:
        return {p: (values[number][p] if number is not None else None) for p in params}

    if not good:
        return Recommendation(
            config=scaler_config(best.params, space),
            source_trial=best.number,
            depth=0.0,
            nearest_bad=None,
            edge=edge_of(None),
            neighbours=(),
            keep_default=False,
            default_trial=default.number if default else None,
            default_depth=None,
            best_trial=best.number,
            confirmed=None,
            device_type=device,
            reasons=(
                f"The best trial (#{best.number}) failed ({best.user_attrs.get(FAILURE)}) and no trial is "
                "safe: it is shown only as the best found; look at the safe ranges before using anything.",
            ),
        )

    depths = {t.number: _depth(where[t.number], bad) for t in good}

    def support(number: int) -> tuple[int, ...]:
        radius = depths[number][0]
        return tuple(
            t.number for t in good if _distance(where[t.number], where[number]) <= radius or not bad
        )

    supported = [t for t in good if len(support(t.number)) >= MIN_SUPPORT]
    pool = supported or good
    deepest = max(pool, key=lambda t: (depths[t.number][0], -t.value, -t.number))
    depth, nearest = depths[deepest.number]
    neighbours = support(deepest.number)
    default_depth = depths[default.number][0] if default is not None and default.number in good_ids else None
    # Deep enough, and judged on the trials around it (as any recommendation), not on itself alone.
    keep_default = (
        default_depth is not None and default_depth >= DEFAULT_MARGIN and len(support(default.number)) >= MIN_SUPPORT
    )

    reasons: list[str] = []
    if keep_default:
        assert default is not None
        source, chosen = default, values[default.number]
        _, nearest = depths[default.number]
        depth = default_depth
        neighbours = support(default.number)
        reasons.append(
            f"Keep the default: PyTorch's default (seed-1, trial #{default.number}, objective "
            f"{default.value:.4f}) is within {pct} of the best ({best.value:.4f}) without failure, and it "
            f"lies well inside the good region: depth {_depth_text(depth)}, against {_depth_text(depths[deepest.number][0])} "
            f"for the deepest good trial (#{deepest.number}); {DEFAULT_MARGIN:g} octaves (a factor of "
            f"{2 ** DEFAULT_MARGIN:g} in any combination of the settings) is margin enough to keep what you have."
        )
    else:
        source = deepest
        chosen = dict(values[deepest.number])
        if len(neighbours) < MIN_SUPPORT:
            reasons.append(
                f"Only {len(neighbours)} good trial{'s' if len(neighbours) != 1 else ''} around any good "
                f"trial (fewer than {MIN_SUPPORT}): the good region is barely sampled, so this is a weak "
                "recommendation; more trials would show how wide it is."
            )
        reasons.append(
            f"{len(good)} of {len(done)} trials are good (within {pct} of the best objective "
            f"{best.value:.4f}, no failure). Trial #{deepest.number} (objective {deepest.value:.4f}) is the "
            f"deepest inside that region: the nearest trial that is not good is {_depth_text(depth)} away "
            "(the four settings' log2 distances combined), and all "
            f"{len(neighbours)} trials within that distance are good."
        )
        if default is None:
            reasons.append("PyTorch's default (seed-1) has not run in this study.")
        elif default_depth is None:
            reasons.append(
                f"PyTorch's default (seed-1, #{default.number}) is not good here: objective {default.value:.4f}, "
                f"failure {default.user_attrs.get(FAILURE, '-')}."
            )
        else:
            reasons.append(
                f"PyTorch's default (seed-1, #{default.number}) is good but close to an edge: a trial that "
                f"is not good lies {default_depth:.2f} octaves from it (less than {DEFAULT_MARGIN:g})."
            )
        reasons.append(
            f"The values are trial #{deepest.number}'s own, as measured (a rounded neighbour would be a setting "
            "no trial ran; the line is written with the digits that reproduce it)."
        )
    if nearest is not None:
        reasons.append(
            f"The nearest trial that is not good is #{nearest} ("
            + ", ".join(f"{p} {format_value(p, values[nearest][p])}" for p in params)
            + f"; objective {next(t.value for t in done if t.number == nearest):.4f})."
        )
    full = dict(chosen)
    for p in PARAM_NAMES:
        if getattr(space, p).fixed is not None:
            full[p] = float(getattr(space, p).fixed)
    config = _as_config(full) if not keep_default else SEED_DEFAULT
    confirmed = None
    if confirmation is not None and not keep_default:
        verdict = confirmation_verdict(confirmation, config, space)
        if verdict is not None:
            confirmed, sentence = verdict
            reasons.append(sentence)
            if confirmed == "overturned" or (confirmed == "not better" and default_depth is not None):
                keep_default = True
                config = SEED_DEFAULT
                if confirmed == "not better":
                    reasons.append("The default is good in the search too: keep the default.")
            elif confirmed == "not better":
                reasons.append(
                    "The default failed or fell behind in the search, so the recommendation stands, unconfirmed."
                )
    # Ranges that are safe together: a candidate from the trials around the setting given, then
    # what training its corners said (search.confirm), which alone can vouch for a combination.
    around = default if keep_default else source
    candidate: dict[str, tuple[float, float]] = {}
    if around is not None and around.number in good_ids and params:
        failed = [(t.number, where[t.number]) for t in done if not is_safe(t)]
        centre = {p: float(getattr(config, p)) for p in PARAM_NAMES}
        centre_depth = _depth(coordinates(centre, space), failed)[0]
        safe_near = [
            t.number
            for t in done
            if is_safe(t) and (not failed or _distance(where[t.number], where[around.number]) <= centre_depth)
        ]
        if len(safe_near) >= MIN_SUPPORT:
            seen = _span(safe_near, values, params)
            ball = _box(centre, centre_depth, space)
            candidate = {p: (max(ball[p][0], seen[p][0]), min(ball[p][1], seen[p][1])) for p in params}
        else:
            reasons.append(
                f"No ranges that are safe together: fewer than {MIN_SUPPORT} failure-free trials around the "
                "setting, too few to say how far it can move."
            )
    corners_run = (confirmation or {}).get("corners", [])
    check, together, failed_corners = _judge(candidate, config, corners_run)
    box = together or candidate
    inside = tuple(
        t.number for t in done if box and all(lo <= values[t.number][p] <= hi for p, (lo, hi) in box.items())
    )
    if candidate:
        reasons.append(_together_text(check, candidate, together, failed_corners, config))
    return Recommendation(
        config=config,
        source_trial=source.number,
        depth=depth,
        nearest_bad=nearest,
        edge=edge_of(nearest),
        neighbours=neighbours,
        keep_default=keep_default,
        default_trial=default.number if default else None,
        default_depth=default_depth,
        best_trial=best.number,
        confirmed=confirmed,
        device_type=device,
        reasons=tuple(reasons),
        candidate=candidate,
        together=together,
        together_check=check,
        together_failed=tuple(failed_corners),
        together_trials=inside,
    )


def format_range(param: str, low: float, high: float) -> str:
    """A range as people read it: ``2^14..2^18``, or one value when both ends read the same."""
    lo, hi = format_value(param, low), format_value(param, high)
    return lo if lo == hi else f"{lo}..{hi}"


def confirmation_verdict(
    confirmation: dict[str, Any], config: ScalerConfig, space: SpaceConfig
) -> tuple[str, str] | None:
    """What confirmation runs say of ``config`` against the default, or None if they did not run it.

    Returns:
        ``(verdict, sentence)``: ``"confirmed"`` (significantly better than the default on new
        seeds), ``"overturned"`` (the default significantly better) or ``"not better"``.
    """
    entry = next(
        (
            c
            for c in confirmation.get("comparisons", [])
            if _as_config(param_values_of(c["params"], space)) == config
        ),
        None,
    )
    if entry is None or entry.get("p") is None:
        return None
    diff, sd, n, p = entry["mean_diff"], entry.get("sd_diff"), entry["n"], entry["p"]
    spread = entry.get("default_sd")
    stats = (
        f"mean difference {diff:+.4g} (recommended minus default) over {n} new seeds, sd of the "
        f"difference {sd:.3g}" + (f", seed-to-seed sd of the default {spread:.3g}" if spread is not None else "")
        + f", two-sided paired t-test p = {p:.3g}"
    ) if sd is not None else f"mean difference {diff:+.4g} over {n} seeds, p = {p:.3g}"
    if entry.get("significant") and diff < 0:
        return "confirmed", f"Confirmed on new seeds: it is significantly better than the default ({stats})."
    if entry.get("significant") and diff > 0:
        return (
            "overturned",
            f"Overturned on new seeds: the default is significantly better ({stats}), so keep the default.",
        )
    return (
        "not better",
        f"On new seeds it is not significantly different from the default ({stats}): not worth a change.",
    )


def param_values_of(params: dict[str, Any], space: SpaceConfig) -> dict[str, float]:
    """The four settings of a params dict in ``space`` (like :func:`param_values` for a trial)."""
    cfg = scaler_config(params, space)
    return {name: float(getattr(cfg, name)) for name in PARAM_NAMES}
