"""Ranges safe together: a candidate box around the recommended setting, its corners, the check.

The per-setting safe ranges (:mod:`search.results._safe_ranges`) each assume the other settings
stay where the good trials were. Ranges that hold in any combination are a box in the space of
octaves (:mod:`search.results._landscape`): the candidate is the box inscribed in the ball around
the setting that holds no failed trial, cut to the span of the failure-free trials in that ball.
Sampled trials cannot vouch for its corners (a thin failing slab, say a high scale with a backoff
near 1, is easily missed), so ``search.confirm`` trains the corners of :func:`check_boxes`, box by
box, and :func:`judge_boxes` reads those runs: the first box whose every corner trained without
failure is safe together.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial

from search.core import OVERFLOW_STEPS, SCALE_CURVE, ParamRange, SpaceConfig, scale_moves
from search.results._format import format_point, format_range
from search.results._landscape import MIN_SUPPORT, Landscape, coordinates, depth_of, octave_distance
from search.results._trials import is_safe, searched_params
from search.scalers import PARAM_NAMES, ScalerConfig

CHECK_ROUNDS = 3  # After the candidate box, this many halvings (in octaves) of it are tried.


def candidate_box(
    landscape: Landscape, around: int, config: ScalerConfig, space: SpaceConfig
) -> dict[str, tuple[float, float]] | None:
    """The candidate for ranges safe together around ``config``, or None with too few trials to say.

    Args:
        landscape: The study's trials in the space of octaves.
        around: The good trial ``config`` stands for: the failure-free trials near it span the box.
        config: The setting at the box's centre.
        space: The study's search space.

    Returns:
        Per searched setting, ``(low, high)``; None when fewer than :data:`MIN_SUPPORT`
        failure-free trials lie around the setting.
    """
    failed = [(t.number, landscape.where[t.number]) for t in landscape.done if not is_safe(t)]
    centre = {p: float(getattr(config, p)) for p in PARAM_NAMES}
    centre_depth = depth_of(coordinates(centre, space), failed)[0]
    safe_near = [
        t.number
        for t in landscape.done
        if is_safe(t)
        and (
            not failed or octave_distance(landscape.where[t.number], landscape.where[around]) <= centre_depth
        )
    ]
    if len(safe_near) < MIN_SUPPORT:
        return None
    params = searched_params(space)
    seen = _span(safe_near, landscape.values, params)
    ball = _box(centre, centre_depth, space)
    # The span always holds the centre: a setting put back to its default by the minimal change
    # (growth_interval
    # 2000 where the trials near ``around`` ran 5..50) would otherwise leave an empty, inverted range.
    seen = {p: (min(seen[p][0], centre[p]), max(seen[p][1], centre[p])) for p in params}
    return {p: (max(ball[p][0], seen[p][0]), min(ball[p][1], seen[p][1])) for p in params}


def _span(
    numbers: Iterable[int], values: dict[int, dict[str, float]], params: Sequence[str]
) -> dict[str, tuple[float, float]]:
    """Per setting, the smallest and largest value among the given trials."""
    numbers = list(numbers)
    return {p: (min(values[n][p] for n in numbers), max(values[n][p] for n in numbers)) for p in params}


def _box(centre: dict[str, float], depth: float, space: SpaceConfig) -> dict[str, tuple[float, float]]:
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


def check_boxes(
    candidate: dict[str, tuple[float, float]], config: ScalerConfig
) -> list[dict[str, tuple[float, float]]]:
    """The boxes whose corners ``search.confirm`` trains, in order: the candidate, then halved.

    Each halving halves every range's distance to ``config``, in octaves (``growth_interval`` to
    whole steps inside). The first box whose every corner trains without failure is the one
    :func:`~search.results._recommendation.recommend` states as safe together.
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


def judge_boxes(
    candidate: dict[str, tuple[float, float]], config: ScalerConfig, corners_run: Sequence[dict[str, Any]]
) -> tuple[str, dict[str, tuple[float, float]], list[dict[str, Any]]]:
    """(check, the box that holds, failing corners) from the corner runs of :func:`check_boxes`.

    Args:
        candidate: The candidate box (empty when there is none).
        config: The setting at its centre.
        corners_run: Corners ``search.confirm`` trained, each ``{"point": {...}, "failure": code}``.

    Returns:
        ``"none"`` (no candidate), ``"checked"`` with the first box whose corners all trained
        without failure, ``"unchecked"`` (a box not refuted still has corners to run) or
        ``"refuted"`` (every box had a failing corner); and the distinct failing corners seen.
    """
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


def together_text(
    check: str,
    candidate: dict[str, tuple[float, float]],
    together: dict[str, tuple[float, float]],
    failed: list[dict[str, Any]],
    config: ScalerConfig,
) -> str:
    """What :func:`judge_boxes` found, in words, for the recommendation's reasons."""

    def ranges(box: dict[str, tuple[float, float]]) -> str:
        return ", ".join(f"{p} {format_range(p, lo, hi)}" for p, (lo, hi) in box.items())

    n = len(box_corners(candidate, config))
    failing = ""
    if failed:
        first = failed[0]
        failing = (
            f" {len(failed)} corner{'s' if len(failed) != 1 else ''} of larger boxes failed (e.g. "
            f"{format_point(first['point'], candidate)}: {first['failure']})."
        )
    if check == "checked":
        return (
            f"Ranges that are safe together, in any combination ({ranges(together)}): checked, all "
            f"{len(box_corners(together, config))} corners trained without failure on the search's data "
            "(search.confirm). Churn grows with the scale, the growth factor and the backoff factor and with "
            "shorter intervals, underflow the other way round, so a box whose corners are safe holds neither "
            "inside."
            + failing
        )
    if check == "refuted":
        return (
            "No ranges that are safe together: every box tried around the setting had a corner that failed "
            f"(search.confirm).{failing} The safe ranges hold one setting at a time, around the good trials."
        )
    return (
        f"Ranges that may be safe together (a candidate, not checked: {ranges(candidate)}): no trial inside"
        " ended in a failure code (non-finite, or a silent failure), but sampled trials cannot vouch for"
        f" every combination; python -m search.confirm trains its {n} corners."
        + failing
    )


def box_limits(
    box: dict[str, tuple[float, float]],
    landscape: Landscape,
    inside: Sequence[int],
    default_number: int | None,
) -> tuple[tuple[str, ...], bool]:
    """What a box of ranges safe together cannot say: ``(idle, default_outside)``.

    ``idle``: the box's settings whose range says nothing, since no run inside could have used them
    at any value of the box (read from each run's scale curve): ``backoff_factor`` when no run inside
    skipped a step; ``growth_factor`` and ``growth_interval`` when no run inside grew its scale and
    none had as many unskipped steps in a row as the box's shortest interval (so no interval of the
    box would have grown it either). ``default_outside``: PyTorch's default lies outside the box
    although it ran without failure, so the box marks where the answer can move, not the edge of
    what is safe.
    """
    done = {t.number: t for t in landscape.done}
    values = landscape.values
    trials = [done[n] for n in inside if n in done]
    used: set[str] = set()
    for t in trials:
        curve = t.user_attrs.get(SCALE_CURVE)
        if not curve or not all(isinstance(v, (int, float)) and 0 < v < math.inf for v in curve):
            used |= set(box)  # Unreadable: it may have used anything.
            continue
        moves = scale_moves(curve, values[t.number]["init_scale"], t.user_attrs.get(OVERFLOW_STEPS))
        longest = stretch = 0
        for move in moves:
            stretch = stretch + 1 if move == 0 else 0
            longest = max(longest, stretch)
        shortest = (
            box["growth_interval"][0] if "growth_interval" in box else values[t.number]["growth_interval"]
        )
        if -1 in moves:
            used.add("backoff_factor")
        if 1 in moves or longest >= shortest:
            used |= {"growth_factor", "growth_interval"}
    idle = tuple(p for p in box if p != "init_scale" and trials and p not in used)
    default = done.get(default_number) if default_number is not None else None
    default_outside = bool(
        box
        and default is not None
        and is_safe(default)
        and not all(lo <= values[default.number][p] <= hi for p, (lo, hi) in box.items())
    )
    return idle, default_outside


@dataclass(frozen=True)
class Together:
    """Ranges safe together around the answer: the candidate, what its corner runs said, its sentences."""

    candidate: dict[str, tuple[float, float]]
    check: str
    together: dict[str, tuple[float, float]]
    failed: list[dict[str, Any]]
    inside: tuple[int, ...]
    reasons: list[str]


def safe_together(
    landscape: Landscape,
    around: FrozenTrial | None,
    config: ScalerConfig,
    space: SpaceConfig,
    confirmation: dict[str, Any] | None,
) -> Together:
    """Ranges safe together around ``config``: a candidate from the trials around ``around`` (the
    good trial it stands for), then what training its corners said (``search.confirm``), which
    alone can vouch for a combination."""
    reasons = []
    candidate: dict[str, tuple[float, float]] = {}
    if around is not None and around.number in landscape.good_ids and searched_params(space):
        found = candidate_box(landscape, around.number, config, space)
        if found is None:
            reasons.append(
                f"No ranges that are safe together: fewer than {MIN_SUPPORT} failure-free trials around the "
                "setting, too few to say how far it can move."
            )
        else:
            candidate = found
    corners_run = (confirmation or {}).get("corners", [])
    check, together, failed = judge_boxes(candidate, config, corners_run)
    box = together or candidate
    values = landscape.values
    inside = tuple(
        t.number
        for t in landscape.done
        if box and all(lo <= values[t.number][p] <= hi for p, (lo, hi) in box.items())
    )
    if candidate:
        reasons.append(together_text(check, candidate, together, failed, config))
    return Together(candidate, check, together, failed, inside, reasons)
