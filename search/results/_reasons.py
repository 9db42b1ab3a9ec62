"""The recommendation's reasons: the sentences that say why a setting was chosen.

:func:`~search.results._recommendation.recommend` decides; these functions only put its decision
into words, one sentence (or a few, in order) per situation, so the decision reads as steps and
the wording stays in one place.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from optuna.trial import FrozenTrial

from search.core import FAILURE
from search.results._answer_rounding import Rounding
from search.results._format import format_point, offsets_text
from search.results._landscape import MIN_SUPPORT, Landscape
from search.results._minimal import changed_settings
from search.scalers import ScalerConfig


def _nearest_text(landscape: Landscape, number: int) -> str:
    """Where trial ``number``'s nearest trial that is not good lies, a setting at a time."""
    nearest = landscape.depths[number][1]
    if nearest is None:
        return "no trial is not good"
    return f"the nearest trial that is not good, #{nearest}, has {offsets_text(landscape.offsets(number))}"


def nothing_safe_reason(best: FrozenTrial, done: list[FrozenTrial]) -> str:
    """Why no setting is safe: how the completed trials failed, and what the best one is worth."""
    codes = Counter(t.user_attrs.get(FAILURE) or "no failure code" for t in done)
    how = ", ".join(f"{n} {code}" for code, n in codes.most_common())
    return (
        f"No setting is safe here: no trial is good ({how}). The lowest objective, trial #{best.number} "
        f"({best.user_attrs.get(FAILURE)}), is shown only as the best found, not as a setting to use; "
        "look at where the failures lie before using anything."
    )


def keep_default_reason(
    default: FrozenTrial,
    best: FrozenTrial,
    landscape: Landscape,
    deepest: FrozenTrial,
    margin: float,
    tolerance: float,
) -> str:
    """Why PyTorch's default is kept: good, and at least ``margin`` octaves deep."""
    pct = f"{tolerance * 100:g}%"
    return (
        f"Keep the default: PyTorch's default (seed-1, trial #{default.number}, objective"
        f" {default.value:.4f}) is within {pct} of the best ({best.value:.4f}) without failure, and it lies"
        f" well inside the good region: {_nearest_text(landscape, default.number)}. At least {margin:g}"
        f" octaves (a factor of {2 ** margin:g}, in the four settings' log2 combined) from anything not good"
        " is margin enough to keep what you have."
    )


def deepest_reasons(
    landscape: Landscape,
    best: FrozenTrial,
    deepest: FrozenTrial,
    default: FrozenTrial | None,
    default_depth: float | None,
    margin: float,
    tolerance: float,
) -> list[str]:
    """Why the deepest good trial is recommended: its support, its depth, the default's state, its own values.
    """
    pct = f"{tolerance * 100:g}%"
    neighbours = landscape.support(deepest.number)
    reasons = []
    if len(neighbours) < MIN_SUPPORT:
        reasons.append(
            f"Only {len(neighbours)} good trial{'s' if len(neighbours) != 1 else ''} around any good "
            f"trial (fewer than {MIN_SUPPORT}): the good region is barely sampled, so this is a weak "
            "recommendation; more trials would show how wide it is."
        )
    reasons.append(
        f"{len(landscape.good)} of {len(landscape.done)} trials {'is' if len(landscape.good) == 1 else 'are'}"
        f" good (within {pct} of the best objective {best.value:.4f}, no failure). Trial #{deepest.number}"
        f" (objective {deepest.value:.4f}) is the deepest inside that region (the farthest, in the four"
        f" settings' log2 combined, from anything not good): {_nearest_text(landscape, deepest.number)}, and "
        + (
            "no other trial lies nearer than it."
            if len(neighbours) == 1  # Its support is itself alone.
            else f"all {len(neighbours)} trials nearer than it are good."
        )
    )
    if default is None:
        reasons.append("PyTorch's default (seed-1) has not run in this study.")
    elif default_depth is None:
        failure = default.user_attrs.get(FAILURE) or "none"
        behind = (default.value - best.value) / abs(best.value) * 100 if best.value else math.inf
        why = (
            f"failure {failure}"
            if failure != "none"
            else f"no failure, but {behind:.2f}% behind the best (good: within {tolerance * 100:g}%)"
        )
        reasons.append(
            f"PyTorch's default (seed-1, #{default.number}) is not good here: objective {default.value:.4f},"
            f" {why}."
        )
    else:
        reasons.append(
            f"PyTorch's default (seed-1, #{default.number}) is good but close to an edge: "
            f"{_nearest_text(landscape, default.number)} (less than {margin:g} octaves in all)."
        )
    return reasons


def nearest_reason(landscape: Landscape, nearest: int, params: Sequence[str]) -> str:
    """Which trial that is not good lies nearest the setting, with its searched settings and objective."""
    objective = next(t.value for t in landscape.done if t.number == nearest)
    return (
        f"The nearest trial that is not good is #{nearest} ("
        + format_point(landscape.values[nearest], params)
        + f"; objective {objective:.4f})."
    )


def limit_sentences(idle: tuple[str, ...], default_outside: bool) -> list[str]:
    """What the ranges safe together cannot say (:func:`~search.results._together.box_limits`)."""
    out = []
    if idle:
        out.append(
            f"In those ranges {' and '.join(idle)} acted in no run inside, so their ranges say nothing."
        )
    if default_outside:
        out.append(
            "PyTorch's default lies outside them and ran without failure: they mark where the answer can"
            " move."
        )
    return out


def reset_sentence(trial: FrozenTrial, reset: dict[str, str]) -> str:
    """Which of the trial's settings the answer leaves at PyTorch's defaults, and why they did not act."""
    by_reason: dict[str, list[str]] = {}
    for param, reason in reset.items():
        by_reason.setdefault(reason, []).append(param)
    parts = "; ".join(f"{' and '.join(params)}: {reason}" for reason, params in by_reason.items())
    return (
        f"Settings that did not act in trial #{trial.number}'s run stay at PyTorch's defaults, which run it "
        f"the same, step for step ({parts})."
    )


def rounding_sentence(source: FrozenTrial, line: ScalerConfig, rounding: Rounding, tolerance: float) -> str:
    """What the study measured of ``source``'s line rounded (:mod:`search.results._answer_rounding`)."""
    tried = "; ".join(f"#{number}: {why}" for number, why in rounding.rejected)
    if rounding.trial is not None and rounding.config is not None:
        moved = [p for p in changed_settings(line) if getattr(line, p) != getattr(rounding.config, p)]
        change = ", ".join(f"{p} {getattr(line, p):.6g} to {getattr(rounding.config, p):g}" for p in moved)
        return (
            f"The line is trial #{rounding.trial.number}'s: trial #{source.number}'s rounded ({change}) and"
            f" trained as a trial of this study, objective {rounding.trial.value:.4f}: good (no failure,"
            f" within {tolerance * 100:g}% of the best), the same settings acting in its run"
            + (f"; coarser roundings did not measure the same ({tried})." if tried else ".")
        )
    if rounding.pending is not None:
        return (
            f"The values are trial #{source.number}'s own"
            + (f" (rounded lines that did not measure the same: {tried})" if tried else "")
            + "; a rounding of its line has not been trained yet (a run of search.optimize that adds "
            "trials to this study trains it before it stops)."
        )
    if tried:
        return (
            f"Rounded, the line did not measure the same ({tried}): it keeps trial #{source.number}'s own "
            "values, with the digits that reproduce them."
        )
    return f"The values are trial #{source.number}'s own, as measured."


def below_one_sentence(init_scale: float) -> str:
    """What an answer's init_scale below 1 does: it scales the loss, and so every gradient, down."""
    return (
        f"Its init_scale, {init_scale:.4g}, is below 1: GradScaler multiplies the loss, and so every"
        " gradient, by less than 1, scaling them down rather than up; it still grows and backs off from"
        " there."
    )
