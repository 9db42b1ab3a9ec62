"""What a finished study says about the scaler settings: safe ranges and a robust recommendation.

Pure functions over a list of :class:`~optuna.trial.FrozenTrial` and the study's
:class:`~search.config.SpaceConfig`; nothing here plots or touches a storage. Only COMPLETE
trials with a finite objective count; RUNNING, WAITING, PRUNED and FAIL trials are ignored, so a
study that is still running can be analysed at any moment.

**Safe trials.** A trial is *good* when it did not go non-finite (user attr ``nonfinite``), has
no silent failure (``failure == "none"``) and its objective is within ``tolerance`` (default 1%)
of the study's best objective: ``value <= best + tolerance * |best|``. Every other COMPLETE trial
is *bad*.

**Safe range** of a parameter: from the smallest to the largest value of that parameter among
the good trials. The good set need not be an interval in one parameter alone, so each range also
lists the bad trials whose value lies inside it, and splits them: those with another setting
outside *its* safe range fail through that setting; the rest (*holes*: every setting inside its
safe range, and still bad) show that the safe set is not an interval (not a box). With holes, the
*clean* stretch is the widest interval of good values around the best trial with no hole in it.

**Recommendation.** The trials that *tie* with the best (good, and within ``tie_tolerance``,
default 0.1%, of the best objective) form a plateau: any of them is as good as the best on this
task, and which one is the argmin is noise. With at least :data:`MIN_PLATEAU` such trials the
recommendation is the middle of the plateau in each parameter — the geometric mean of its ends
for ``init_scale``, ``growth_factor`` and ``growth_interval`` (the middle in log space), the
arithmetic mean for ``backoff_factor`` — the point farthest from the edges where trials start to
skip steps, underflow or diverge. It is rounded to a value people write (``init_scale`` to a power
of two, the others to two significant digits) when that stays on the plateau. With fewer ties
the best trial itself is recommended.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.config import ParamRange, SpaceConfig
from search.space import PARAM_NAMES, scaler_config
from search.trainer import ScalerConfig

__all__ = [
    "DEFAULT_TIE_TOLERANCE",
    "DEFAULT_TOLERANCE",
    "MIDDLE_SCALES",
    "MIN_PLATEAU",
    "Recommendation",
    "SafeRange",
    "best_trial",
    "completed",
    "format_value",
    "good_trials",
    "is_safe",
    "param_values",
    "recommend",
    "safe_ranges",
    "searched_params",
]

DEFAULT_TOLERANCE = 0.01  # Safe: within 1% of the best objective.
DEFAULT_TIE_TOLERANCE = 0.001  # A tie with the best: within 0.1% (the summary's "within 0.1%").
MIN_PLATEAU = 3  # Fewer tied trials than this are no plateau: the best trial is recommended.
# Where the middle of a plateau is taken: log space for the multiplicative settings.
MIDDLE_SCALES = {
    "init_scale": "log",
    "growth_factor": "log",
    "backoff_factor": "linear",
    "growth_interval": "log",
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
            too: the safe set is then not an interval (not even given the other ranges).
        clean_low: Lower end of the widest stretch of good values around the best trial
            with no hole inside.
        clean_high: Upper end of that stretch.
        text: The range in words.
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
            "text": self.text,
        }


@dataclass(frozen=True)
class Recommendation:
    """A robust GradScaler setting and why it was chosen.

    Attributes:
        config: The recommended settings.
        centre: The unrounded middle of the plateau per searched parameter.
        plateau: (low, high) of each searched parameter over the tied trials.
        plateau_trials: Numbers of the trials that tie with the best.
        from_plateau: False when there was no plateau and the best trial is recommended.
        best_trial: Number of the best trial.
        nearest_trial: The tied trial closest to the recommendation (plateau-normalised distance).
        default_ties: Whether PyTorch's default (baseline ``seed-1``) is among the tied trials.
        device_type: The device type of the ``GradScaler`` line.
        reasons: The explanation, sentence by sentence.
    """

    config: ScalerConfig
    centre: dict[str, float]
    plateau: dict[str, tuple[float, float]]
    plateau_trials: tuple[int, ...]
    from_plateau: bool
    best_trial: int
    nearest_trial: int
    default_ties: bool
    device_type: str
    reasons: tuple[str, ...] = field(default=())

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
            "centre": self.centre,
            "plateau": {k: list(v) for k, v in self.plateau.items()},
            "plateau_trials": list(self.plateau_trials),
            "from_plateau": self.from_plateau,
            "best_trial": self.best_trial,
            "nearest_trial": self.nearest_trial,
            "default_ties": self.default_ties,
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
        exponent = math.log2(value)
        return f"2^{round(exponent)}" if abs(exponent - round(exponent)) < 5e-3 else f"2^{exponent:.2f}"
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
        holes = [t for t in inside if not _outside_elsewhere(values[t.number], name, bounds)]
        clean_low, clean_high = _clean_stretch(name, good, holes, best, values)
        lo_txt, hi_txt = format_value(name, low), format_value(name, high)
        span = f"{name} from {lo_txt} to {hi_txt}" if lo_txt != hi_txt else f"{name} = {lo_txt}"
        text = (
            f"{span} is safe for this task: {len(good)} of {len(done)} trials stayed within {pct} "
            "of the best objective without non-finite values or silent failures"
        )
        if not inside:
            text += ", and every other trial lies outside this range."
        else:
            n = len(inside)
            text += f"; {n} other trial{'s' if n > 1 else ''} inside it did not ({_trial_list([t.number for t in inside])})"
            explained = n - len(holes)
            if not holes:
                culprits = Counter(
                    q
                    for t in inside
                    for q, (lo, hi) in bounds.items()
                    if q != name and not lo <= values[t.number][q] <= hi
                )
                which = ", ".join(f"{q} {c}x" for q, c in culprits.most_common())
                text += (
                    f", but {'each of them has' if n > 1 else 'it has'} another setting outside its safe "
                    f"range ({which}), so {'they fail' if n > 1 else 'it fails'} through that setting, "
                    "not through this one."
                )
            else:
                text += (
                    f"; {len(holes)} of them ({_trial_list([t.number for t in holes])}) "
                    f"{'have' if len(holes) > 1 else 'has'} every other setting inside its safe range "
                    f"too{f' (the other {explained} do not)' if explained else ''}, so the safe set is "
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
            )
        )
    return out


def _outside_elsewhere(values: dict[str, float], param: str, bounds: dict[str, tuple[float, float]]) -> bool:
    """Whether a setting other than ``param`` lies outside its safe range."""
    return any(not lo <= values[p] <= hi for p, (lo, hi) in bounds.items() if p != param)


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


def _middle(param: str, low: float, high: float) -> float:
    if MIDDLE_SCALES[param] == "log" and low > 0:
        return math.sqrt(low * high)
    return (low + high) / 2


def _round_nicely(param: str, value: float, low: float, high: float, space: SpaceConfig) -> float:
    """A value people write, if it stays inside [low, high]; else ``value`` itself."""
    p: ParamRange = getattr(space, param)
    if param == "init_scale":
        candidate = 2.0 ** round(math.log2(value))
    elif param == "growth_interval":
        candidate = float(round(round(value, 1 - math.floor(math.log10(value))))) if value >= 1 else 1.0
    else:
        candidate = float(f"{value:.2g}")
    if low <= candidate <= high and p.low <= candidate <= p.high:
        return candidate
    if param == "init_scale" and p.powers_of_two:
        return 2.0 ** round(math.log2(value))
    return value


def _device_type(trial: FrozenTrial) -> str:
    kind = str(trial.user_attrs.get("device", "cuda")).split(":")[0].split(" ")[0]
    return kind or "cuda"


def recommend(
    trials: Iterable[FrozenTrial],
    space: SpaceConfig,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    device_type: str | None = None,
) -> Recommendation | None:
    """A robust setting: the middle of the plateau of trials that tie with the best.

    Args:
        trials: The study's trials, any states (only COMPLETE ones count).
        space: The study's search space.
        tie_tolerance: A trial ties with the best when it is safe and its objective is at most
            ``best + tie_tolerance * |best|``.
        device_type: For the ``GradScaler`` line; None takes the best trial's device type.

    Returns:
        None when the study has no COMPLETE trial yet.
    """
    done = completed(trials)
    best = best_trial(done)
    if best is None:
        return None
    device = device_type or _device_type(best)
    ties = good_trials(done, tie_tolerance)
    if best.number not in {t.number for t in ties}:
        ties = []  # The best itself failed: there is nothing safe to centre on.
    params = searched_params(space)
    values = {t.number: param_values(t, space) for t in done}
    best_values = values[best.number]
    default_ties = any(t.user_attrs.get("baseline") == "seed-1" for t in ties)
    best_desc = ", ".join(f"{p} {format_value(p, best_values[p])}" for p in params)
    pct = f"{tie_tolerance * 100:g}%"

    if len(ties) < MIN_PLATEAU:
        why = (
            f"The best trial (#{best.number}) failed ({best.user_attrs.get('failure')}); "
            "no safe trial ties with it, so it is recommended only as the best found: "
            "look at the safe ranges before using it."
            if not is_safe(best)
            else f"Only {len(ties)} trial{'s' if len(ties) != 1 else ''} (fewer than {MIN_PLATEAU}) "
            f"came within {pct} of the best objective: there is no plateau to centre on, so the "
            f"best trial itself (#{best.number}: {best_desc}) is recommended. More trials would show "
            "how wide the good region is."
        )
        plateau = {p: (best_values[p], best_values[p]) for p in params}
        return Recommendation(
            config=scaler_config(best.params, space),
            centre={p: best_values[p] for p in params},
            plateau=plateau,
            plateau_trials=tuple(t.number for t in ties),
            from_plateau=False,
            best_trial=best.number,
            nearest_trial=best.number,
            default_ties=default_ties,
            device_type=device,
            reasons=(why,),
        )

    plateau = {
        p: (min(values[t.number][p] for t in ties), max(values[t.number][p] for t in ties)) for p in params
    }
    centre = {p: _middle(p, *plateau[p]) for p in params}
    chosen = {p: _round_nicely(p, centre[p], *plateau[p], space) for p in params}
    full = dict(best_values)
    full.update(chosen)
    for p in PARAM_NAMES:
        if getattr(space, p).fixed is not None:
            full[p] = float(getattr(space, p).fixed)
    config = ScalerConfig(
        init_scale=full["init_scale"],
        growth_factor=full["growth_factor"],
        backoff_factor=full["backoff_factor"],
        growth_interval=max(1, round(full["growth_interval"])),
    )
    nearest = min(ties, key=lambda t: (_distance(values[t.number], chosen, plateau), t.number))
    spans = "; ".join(
        f"{p} {format_value(p, lo)} to {format_value(p, hi)}" for p, (lo, hi) in plateau.items()
    )
    where = ", ".join(f"{p} {'in log space' if MIDDLE_SCALES[p] == 'log' else 'linearly'}" for p in params)
    reasons = [
        (
            f"{len(ties)} trials tie with the best (objective within {pct} of {best.value:.4f}, "
            f"no silent failure, no divergence); they span {spans}."
        ),
        (
            f"Any point of that plateau is as good as the best on this task, and which trial happens to "
            f"be the argmin (#{best.number}: {best_desc}) is noise, so the recommendation takes the "
            f"middle of the plateau ({where}): the setting farthest from the edges where trials start "
            "to skip steps, underflow or diverge, rounded to a value people write."
        ),
        f"The closest measured trial is #{nearest.number} (objective {nearest.value:.4f}).",
    ]
    if default_ties:
        reasons.append(
            "PyTorch's default (seed-1) is on the plateau too: keeping the default is just as good here."
        )
    return Recommendation(
        config=config,
        centre=centre,
        plateau=plateau,
        plateau_trials=tuple(t.number for t in ties),
        from_plateau=True,
        best_trial=best.number,
        nearest_trial=nearest.number,
        default_ties=default_ties,
        device_type=device,
        reasons=tuple(reasons),
    )


def _distance(
    values: dict[str, float], target: dict[str, float], plateau: dict[str, tuple[float, float]]
) -> float:
    """Distance in plateau widths (log space where the middle is taken in log space)."""
    total = 0.0
    for p, (lo, hi) in plateau.items():
        a, b = values[p], target[p]
        if MIDDLE_SCALES[p] == "log" and lo > 0:
            a, b, lo, hi = math.log(a), math.log(b), math.log(lo), math.log(hi)
        width = hi - lo
        total += ((a - b) / width) ** 2 if width > 0 else 0.0
    return math.sqrt(total)
