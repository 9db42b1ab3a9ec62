"""The recommendation: one robust GradScaler setting from a study, and why.

Not the argmin, which among many near-equal trials is noise, and not the middle of a box of ties, which can
sit next to a failure edge. The choice is every rule's (:mod:`search.results._choice`): the deepest good trial
in the space of octaves (:mod:`search.results._landscape`) among those with enough good trials within their
depth (so it is judged on the trials around it, not on one lucky point), or PyTorch's default (baseline
``seed-1``) when it is good, supported and at least :data:`DEFAULT_MARGIN` octaves deep. Its line is rounded
only where a trial of the study ran the rounding and measured it the same
(:mod:`search.results._answer_rounding`; on a rough objective such as deep-mlp's an unmeasured rounding can
land well outside the tolerance); the answer is then that trial. When confirmation runs on new seeds exist
(``search.confirm``), they decide (:mod:`search.results._verdict`): a default that is significantly better
than the recommended setting overturns it, and a recommended setting that is not significantly better than a
good default is not worth a change. The setting is the *minimal change* (:mod:`search.results._minimal`): the
trial's settings that did not act in its run are PyTorch's defaults, which run it step for step the same; a
trial that differs from the default only in such settings means "keep the default". The verdict is one of
:data:`VERDICTS`. Last come the ranges safe together around the answer (:mod:`search.results._together`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from optuna.trial import FrozenTrial

from search.core import SEED_BASELINES, SpaceConfig, default_trial, device_kind, scaler_config
from search.results._answer_rounding import Rounding, measured_rounding
from search.results._choice import DEFAULT_MARGIN, choose, unseparated
from search.results._landscape import Landscape
from search.results._minimal import changed_settings, minimal_change
from search.results._paste import scaler_line
from search.results._reasons import (
    below_one_sentence,
    deepest_reasons,
    keep_default_reason,
    limit_sentences,
    nearest_reason,
    nothing_safe_reason,
    reset_sentence,
    rounding_sentence,
)
from search.results._together import box_limits, safe_together
from search.results._tolerance import DEFAULT_TOLERANCE
from search.results._trials import as_config, best_trial, completed, param_values_of, searched_params
from search.results._verdict import weigh_confirmation
from search.scalers import PARAM_NAMES, ScalerConfig

VERDICTS = ("keep-default", "change", "none-safe")  # The answer's one word, in every output.
_SEED_DEFAULT = SEED_BASELINES[0][1]  # PyTorch's default GradScaler settings (baseline seed-1).


@dataclass(frozen=True)
class Recommendation:
    """A robust GradScaler setting and why it was chosen.

    Attributes:
        config: The settings to use: PyTorch's default when ``keep_default``, else the minimal change
            (``source_trial``'s settings, those that did not act in its run at their defaults).
        source_trial: The measured trial whose values it is, or the default's trial. When
            confirmation runs turn the answer to the default (``keep_default`` with ``confirmed``),
            the trial they tested against it; ``depth``, ``nearest_bad``, ``edge`` and
            ``neighbours`` then describe that trial, ``default_depth`` the default.
        depth: Distance from ``source_trial`` to the nearest trial that is not good, in searched
            ranges (see :mod:`search.results._landscape`); ``inf`` when every trial is good.
        nearest_bad: That nearest trial's number, or None.
        edge: Per searched setting, the nearest bad trial's value (None without one).
        neighbours: Numbers of the good trials within ``depth`` of ``source_trial`` (itself included).
        keep_default: Whether the answer is "keep PyTorch's default".
        default_trial: The default's (``seed-1``) trial number, or None if it has not run.
        default_depth: The default's depth (None when it is not good or has not run).
        best_trial: Number of the trial with the lowest objective.
        confirmed: ``"confirmed"``, ``"overturned"``, ``"not better"`` (from confirmation runs), or
            None when there are none for this setting.
        confirmed_seeds: How many new seeds those runs paired (None without them).
        candidate: Per searched setting, ``(low, high)``: the candidate for ranges that are safe
            *together*, in any combination (the per-setting safe ranges each assume the others stay
            where the good trials were): the box inscribed in the ball around ``config`` that holds
            no failed trial, cut to the span of the failure-free trials in that ball (``MIN_SUPPORT``
            at least; empty otherwise). Sampled trials cannot vouch for its corners (a thin failing
            slab, say a high scale with a backoff near 1, is easily missed), so it is only a candidate
            until its corners are trained (:func:`~search.results._together.check_boxes`, run by
            ``search.confirm``).
        together: The box that *is* safe together: the first of
            :func:`~search.results._together.check_boxes` whose every corner trained without
            failure; empty until such a check exists.
        together_check: ``"checked"`` (``together`` holds), ``"unchecked"`` (corners not all run
            yet), ``"refuted"`` (every box tried had a failing corner) or ``"none"`` (no candidate).
        together_failed: The failing corners seen, as ``{"point": {...}, "failure": code}``.
        together_trials: Numbers of the study's trials inside ``together`` (or the candidate).
        device_type: The device type of the ``GradScaler`` line.
        reasons: The explanation, sentence by sentence.
        reset: Per setting of ``source_trial`` put back to PyTorch's default because it did not act
            in its run, why (:func:`~search.results._minimal.minimal_change`).
        safe: False when no trial is good: ``config`` is then only the lowest objective found.
        rounding: What the study measured of the line rounded (:mod:`search.results._answer_rounding`);
            when it holds a trial, that trial is ``source_trial`` and its line is ``config``.
        rounded_from: The deepest good trial, whose line was rounded (None when nothing was).
        nearest_offsets: Per searched setting, the octaves from ``source_trial`` to ``nearest_bad``
            (+: higher); how people read a distance, one setting at a time.
        default_nearest: The default's nearest trial that is not good (None when the default is not
            good, has not run, or nothing is bad), and ``default_offsets`` the octaves to it.
        held_back: The change the search found and held back, the study's own evidence not separating it
            from the default (:func:`~search.results._choice.unseparated`; ``keep_default`` is then set and
            ``search.confirm`` trains it); None otherwise.
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
    confirmed_seeds: int | None
    device_type: str
    reasons: tuple[str, ...] = field(default=())
    candidate: dict[str, tuple[float, float]] = field(default_factory=dict)
    together: dict[str, tuple[float, float]] = field(default_factory=dict)
    together_check: str = "none"
    together_failed: tuple[dict[str, Any], ...] = field(default=())
    together_trials: tuple[int, ...] = field(default=())
    reset: dict[str, str] = field(default_factory=dict)
    safe: bool = True
    together_idle: tuple[str, ...] = field(default=())
    default_outside: bool = False
    rounding: Rounding | None = None
    rounded_from: int | None = None
    nearest_offsets: dict[str, float] = field(default_factory=dict)
    default_nearest: int | None = None
    held_back: ScalerConfig | None = None
    default_offsets: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``keep-default``, ``change`` or ``none-safe`` (:data:`VERDICTS`)."""
        return "none-safe" if not self.safe else "keep-default" if self.keep_default else "change"

    @property
    def changed(self) -> tuple[str, ...]:
        """The settings the answer changes from PyTorch's defaults (none for keep-default and none-safe)."""
        return changed_settings(self.config) if self.verdict == "change" else ()

    @property
    def code(self) -> str:
        """The ready ``torch.amp.GradScaler(...)`` expression, naming only the settings that differ from the
        defaults."""
        return scaler_line(self.config, self.device_type)

    @property
    def text(self) -> str:
        """The explanation as one paragraph."""
        return " ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return {
            "verdict": self.verdict,
            "changed": list(self.changed),
            "reset": dict(self.reset),
            "rounded_from": self.rounded_from,
            "rounding_pending": (
                dict(self.rounding.pending) if self.rounding and self.rounding.pending else None
            ),
            "nearest_offsets": dict(self.nearest_offsets),
            "default_nearest": self.default_nearest,
            "default_offsets": dict(self.default_offsets),
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
            "confirmed_seeds": self.confirmed_seeds,
            "candidate": {p: list(r) for p, r in self.candidate.items()},
            "together": {p: list(r) for p, r in self.together.items()},
            "together_check": self.together_check,
            "together_failed": [dict(f) for f in self.together_failed],
            "together_trials": list(self.together_trials),
            "together_idle": list(self.together_idle),
            "default_outside_together": self.default_outside,
            "held_back": None if self.held_back is None else dict(self.held_back.values),
            "text": self.text,
        }


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
    trials = list(trials)
    done = completed(trials)
    best = best_trial(done)
    if best is None:
        return None
    device = device_type or device_kind(best, default="cuda")
    params = searched_params(space)
    default = default_trial(done)
    landscape = Landscape.of(done, space, tolerance)

    def edge_of(number: int | None) -> dict[str, float | None]:
        return {p: landscape.values[number][p] if number is not None else None for p in params}

    if not landscape.good:
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
            confirmed_seeds=None,
            device_type=device,
            reasons=(nothing_safe_reason(best, done),),
            safe=False,
        )

    choice = choose(landscape, default)
    reset: dict[str, str] = {}
    rounding: Rounding | None = None
    if choice.keep_default:
        assert default is not None
        reasons = [keep_default_reason(default, best, landscape, choice.deepest, DEFAULT_MARGIN, tolerance)]
        config = _SEED_DEFAULT
    else:
        reasons = deepest_reasons(
            landscape, best, choice.deepest, default, choice.default_depth, DEFAULT_MARGIN, tolerance
        )
        measured = _measured_config(landscape.values[choice.deepest.number], space)
        config, reset = minimal_change(choice.deepest, measured)
        if reset:
            reasons.append(reset_sentence(choice.deepest, reset))
        if changed_settings(config):
            rounding = measured_rounding(choice.deepest, config, landscape, space, list(trials))
            reasons.append(rounding_sentence(choice.deepest, config, rounding, tolerance))
            if rounding.trial is not None and rounding.config is not None:
                own = _measured_config(landscape.values[rounding.trial.number], space)
                config, reset = rounding.config, minimal_change(rounding.trial, own)[1]
                choice = replace(choice, source=rounding.trial)
        if not changed_settings(config):
            reasons.append(
                f"Trial #{choice.deepest.number} is PyTorch's default"
                + ("" if choice.deepest is default else " in every setting that acted in its run")
                + ": keep the default."
            )
            choice = replace(choice, keep_default=True)
    depth, nearest = landscape.depths[choice.source.number]
    if nearest is not None:
        reasons.append(nearest_reason(landscape, nearest, params))

    keep_default, confirmed, held_back, seeds = choice.keep_default, None, None, None
    if confirmation is not None and not keep_default:
        confirmed, to_default, sentences, seeds = weigh_confirmation(
            confirmation, lambda params: as_config(param_values_of(params, space)) == config
        )
        reasons += sentences
        if to_default:
            keep_default, config = True, _SEED_DEFAULT
    unsettled = "" if keep_default or confirmed else unseparated(landscape, choice.source, default)
    if unsettled:  # No confirmation runs settle it: the default stays, the change is named.
        reasons.append(unsettled)
        held_back, keep_default, config = config, True, _SEED_DEFAULT

    if not keep_default and config.init_scale < 1:
        reasons.append(below_one_sentence(config.init_scale))
    around = default if keep_default else choice.source
    together = safe_together(landscape, around, config, space, confirmation)
    idle, outside = box_limits(
        together.together or together.candidate,
        landscape,
        together.inside,
        default.number if default else None,
    )
    return Recommendation(
        config=config,
        source_trial=choice.source.number,
        depth=depth,
        nearest_bad=nearest,
        edge=edge_of(nearest),
        neighbours=landscape.support(choice.source.number),
        keep_default=keep_default,
        default_trial=default.number if default else None,
        default_depth=choice.default_depth,
        best_trial=best.number,
        confirmed=confirmed,
        confirmed_seeds=seeds,
        device_type=device,
        reasons=tuple(reasons + together.reasons + limit_sentences(idle, outside)),
        candidate=together.candidate,
        together=together.together,
        together_check=together.check,
        together_failed=tuple(together.failed),
        together_trials=together.inside,
        reset=reset if not keep_default else {},
        rounding=rounding,
        rounded_from=choice.deepest.number if rounding is not None and rounding.tried else None,
        nearest_offsets=landscape.offsets(choice.source.number),
        default_nearest=landscape.depths[default.number][1] if choice.default_depth is not None else None,
        default_offsets=landscape.offsets(default.number) if choice.default_depth is not None else {},
        together_idle=idle,
        default_outside=outside,
        held_back=held_back,
    )


def _measured_config(values: dict[str, float], space: SpaceConfig) -> ScalerConfig:
    """A trial's own settings as a config, the space's fixed settings at their fixed values."""
    full = dict(values)
    for p in PARAM_NAMES:
        if getattr(space, p).fixed is not None:
            full[p] = float(getattr(space, p).fixed)
    return as_config(full)
