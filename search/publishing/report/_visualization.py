"""The sections :mod:`optuna.visualization` draws: history, importances, slices, contour, parallel.

Optuna's plots want a study, so they run on an in-memory copy of the snapshot
(:func:`_in_memory_study`) and never touch the storage. Axes of the rule's start scale (GradScaler's
init_scale, DeepSpeed's initial_scale_power) get powers of two as ticks (:func:`_pow2_axis`). A plot that
needs more trials than the study has becomes a message box.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import PenaltyConfig, SpaceConfig, distributions, pow2_name
from search.publishing.report._section import SECTION_TITLES, Section
from search.results import idle_settings, param_values
from search.scalers import RULES, TORCH

MIN_IMPORTANCE_TRIALS = 2  # Complete trials, with at least one searched setting varying.
MIN_CONTOUR_TRIALS = 10  # Complete trials, with at least 3 distinct values of each setting.
MIN_CONTOUR_DISTINCT = 3
POW2_TICKS = (-20, 32)  # Powers of two marked on init_scale axes.


def _importance_without_sklearn() -> Any:
    """``optuna.importance``, imported without scikit-learn when nothing has loaded it yet.

    Optuna 5.1's ``optuna/importance/__init__.py`` imports its fANOVA and mean-decrease-impurity evaluators,
    whose modules import ``sklearn.ensemble`` inside ``optuna._imports.try_import`` (about 2 s of a report's
    3); the report uses PED-ANOVA, which needs none of it. With ``sys.modules["sklearn"]`` set to None for the
    import, that import fails at once and ``try_import`` records it (those two evaluators then say that
    scikit-learn is missing); the entry is removed afterwards, so a later ``import sklearn`` works as usual.
    """
    if "optuna.importance" not in sys.modules and "sklearn" not in sys.modules:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # an import of it raises ImportError
        try:
            importlib.import_module("optuna.importance")
        finally:
            del sys.modules["sklearn"]
    return importlib.import_module("optuna.importance")


def _in_memory_study(trials: Sequence[FrozenTrial]) -> optuna.Study:
    """A copy of the snapshot for :mod:`optuna.visualization`, trial numbers kept.

    RUNNING and WAITING trials (and any gap in the numbering) become empty FAIL placeholders, so
    every plot ignores them and the other trials keep their numbers.
    """
    study = optuna.create_study(direction="minimize")
    by_number = {t.number: t for t in trials}
    for number in range(max(by_number, default=-1) + 1):
        trial = by_number.get(number)
        if trial is None or trial.state not in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL):
            trial = optuna.trial.create_trial(state=TrialState.FAIL)
        study.add_trial(trial)
    return study


def _init_param(space: SpaceConfig, scaler: str = TORCH) -> str:
    """The param of the rule's start scale: ``init_scale``, or ``init_scale_log2`` for powers of two."""
    start = RULES[scaler].start_knob
    return pow2_name(start) if space.ranges(scaler)[start].powers_of_two else start


def _exponent_axis(space: SpaceConfig, scaler: str) -> bool:
    """Whether the start knob's param is already a power of two's exponent (a log2 param, DeepSpeed's power).
    """
    rule = RULES[scaler]
    return space.ranges(scaler)[rule.start_knob].powers_of_two or rule.knob(rule.start_knob).octaves


def _pow2_axis(
    axis: Any,
    space: SpaceConfig,
    data_exponents: Sequence[float],
    max_ticks: int = 14,
    scale_values: bool = False,
    scaler: str = TORCH,
) -> None:
    """Marks powers of two (2^-20 ... 2^32) on an init_scale axis: a log axis of the scale, or the
    log2 param of a powers-of-two space (unless ``scale_values``: the axis plots the scale itself).
    Every 1st, 2nd, 4th or 8th power, at most ``max_ticks`` across the data."""
    lo, hi = POW2_TICKS
    span = max(data_exponents) - min(data_exponents) if data_exponents else hi - lo
    step = next((s for s in (1, 2, 4, 8) if span / s <= max_ticks), 16)
    exponents = list(range(lo - lo % step, hi + 1, step))
    text = [f"2<sup>{k}</sup>" for k in exponents]
    if _exponent_axis(space, scaler) and not scale_values:
        axis.update(
            tickvals=exponents,
            ticktext=text,
            title_text=f"{RULES[scaler].start_knob} (log2 exponent searched)",
        )
    else:
        axis.update(type="log", tickvals=[2.0**k for k in exponents], ticktext=text)


def _exponents(trials: Sequence[FrozenTrial], space: SpaceConfig, scaler: str = TORCH) -> list[float]:
    rule = RULES[scaler]
    return [math.log2(rule.start_scale(param_values(t, space, scaler))) for t in trials]


def _history_section(
    study: optuna.Study, done: list[FrozenTrial], penalty: PenaltyConfig
) -> tuple[Section, list[dict[str, Any]]]:
    section = Section(
        "history",
        SECTION_TITLES["history"],
        "Objective of every complete trial (dots) and the best objective so far (line), by trial number."
        " Lower is better; a run that went non-finite scores"
        f" {penalty.nonfinite:g}-{2 * penalty.nonfinite:g}, a silent failure gets {penalty.silent:g} on top"
        " of its loss.",
    )
    rows, best = [], math.inf
    for t in done:
        best = min(best, t.value)
        rows.append({"number": t.number, "value": t.value, "best": best})
    if not done:
        section.message = "Not enough trials for this plot: the study has no complete trial yet."
        return section, rows
    figure = optuna.visualization.plot_optimization_history(study)
    values = [t.value for t in done]
    if min(values) > 0 and max(values) / min(values) > 10:
        figure.update_yaxes(type="log", title_text="Objective Value (log axis)")
    section.figure = figure
    return section, rows


def _importance_section(
    study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig, scaler: str = TORCH
) -> tuple[Section, dict[str, float] | None, float | None]:
    section = Section("importances", SECTION_TITLES["importances"])
    params = list(distributions(space, scaler))
    varying = [p for p in params if len({t.params.get(p) for t in done}) > 1]
    reason = None
    if len(done) < MIN_IMPORTANCE_TRIALS:
        reason = (
            f"importances need at least {MIN_IMPORTANCE_TRIALS} complete trials; the study has {len(done)}."
        )
    elif not varying:
        reason = "importances need a searched setting that varies between complete trials; none does."
    elif len({t.value for t in done}) < 2:
        reason = "importances need trials with different objectives; every complete trial has the same."
    importance = _importance_without_sklearn()
    PedAnovaImportanceEvaluator, get_param_importances = (
        importance.PedAnovaImportanceEvaluator,
        importance.get_param_importances,
    )

    # optuna-dashboard's own evaluator (PED-ANOVA, Optuna's default quantile, every searched
    # setting): the report and the dashboard then show the same bars for the same study.
    evaluator = PedAnovaImportanceEvaluator()
    quantile = float(inspect.signature(PedAnovaImportanceEvaluator).parameters["target_quantile"].default)
    section.intro = (
        "PED-ANOVA (Optuna's PedAnovaImportanceEvaluator with its defaults, the evaluator "
        "optuna-dashboard uses, so both pages show the same bars): how much each setting decides "
        f"whether a trial reaches the best {quantile:.0%} of the study. A setting that does not vary "
        "between complete trials gets no bar."
    )
    if reason:
        section.message = "Not enough trials for this plot: " + reason
        return section, None, quantile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importances = get_param_importances(study, evaluator=evaluator)
        figure = optuna.visualization.plot_param_importances(study, evaluator=evaluator)
    figure.update_layout(
        title=f"Importance for reaching the best {quantile:.0%} (PED-ANOVA, as in optuna-dashboard)"
    )
    section.figure = figure
    notes = []
    if len(done) < 20:
        notes.append(
            f"Only {len(done)} complete trials: importances from so few trials are rough; "
            "PED-ANOVA wants at least 5 trials in the top group."
        )
    never = _never_acted(
        done, space, [p for p in params if p in importances], scaler
    )  # In the space's order.
    if never:
        skips = set(never) & set(RULES[scaler].skips_with)
        notes.append(
            f"{', '.join(never[:-1]) + ' and ' if len(never) > 1 else ''}{never[-1]} acted in no complete"
            " trial's run (read from each scale curve: the scale never"
            f" grew{', nor was a step skipped' if skips else ''}), so"
            f" {'its bar measures' if len(never) == 1 else 'their bars measure'} only how the sampled values"
            " happened to fall, not the setting."
        )
    section.message = " ".join(notes) or None
    return section, {k: float(v) for k, v in importances.items()}, quantile


def _never_acted(
    done: list[FrozenTrial], space: SpaceConfig, settings: list[str], scaler: str = TORCH
) -> list[str]:
    """The settings among ``settings`` idle in every complete trial's run
    (:func:`search.results.idle_settings`, with no range to reach: growth_interval is idle wherever the scale
    never grew)."""
    idle = [idle_settings(t, param_values(t, space, scaler), {}, scaler) for t in done]
    return [s for s in settings if idle and all(s in i for i in idle)]


def _slice_section(
    study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig, scaler: str = TORCH
) -> Section:
    section = Section(
        "slices",
        SECTION_TITLES["slices"],
        "The objective against each searched setting (one panel per setting; colour: trial number). "
        f"{RULES[scaler].start_knob} is on a log axis with powers of two marked.",
    )
    params = list(distributions(space, scaler))
    if not done or not params:
        section.message = (
            "Not enough trials for this plot: the study has no complete trial yet."
            if not done
            else "Every setting is fixed in this study: nothing to slice."
        )
        return section
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_slice(study, params=params)
    init = _init_param(space, scaler)
    for key in figure.layout:
        if key.startswith("xaxis") and figure.layout[key].title.text == init:
            _pow2_axis(figure.layout[key], space, _exponents(done, space, scaler), max_ticks=7, scaler=scaler)
    figure.update_layout(width=None, height=420)  # Optuna fixes 1200 px; follow the page instead.
    if len(done) > 0:
        values = [t.value for t in done]
        if min(values) > 0 and max(values) / min(values) > 10:
            figure.update_yaxes(type="log")
    section.figure = figure
    return section


def _contour_section(
    study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig, scaler: str = TORCH
) -> Section:
    rule = RULES[scaler]
    other = rule.contour_with
    section = Section(
        "contour",
        SECTION_TITLES["contour"],
        f"The objective interpolated over {rule.start_knob} (log axis, powers of two marked) and {other}, "
        "complete trials as dots. Dark is low (good).",
    )
    init = _init_param(space, scaler)
    params = distributions(space, scaler)
    if init not in params or other not in params:
        fixed = [n for n, p in ((rule.start_knob, init), (other, other)) if p not in params]
        section.message = f"No contour: {' and '.join(fixed)} fixed in this study."
        return section
    distinct = min(len({t.params.get(p) for t in done}) for p in (init, other))
    if len(done) < MIN_CONTOUR_TRIALS or distinct < MIN_CONTOUR_DISTINCT:
        section.message = (
            f"Not enough trials for this plot: a contour needs at least {MIN_CONTOUR_TRIALS} complete "
            f"trials with {MIN_CONTOUR_DISTINCT} distinct values of each setting; the study has "
            f"{len(done)} complete trials."
        )
        return section
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_contour(study, params=[init, other])
    for key in figure.layout:
        if key.startswith(("xaxis", "yaxis")) and figure.layout[key].title.text == init:
            _pow2_axis(figure.layout[key], space, _exponents(done, space, scaler), scaler=scaler)
    figure.update_layout(height=520)
    section.figure = figure
    return section


def _parallel_section(
    study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig, scaler: str = TORCH
) -> Section:
    section = Section(
        "parallel",
        SECTION_TITLES["parallel"],
        "Each line is a complete trial through its settings (log settings on log10 scales) and its "
        "objective; colour: objective.",
    )
    params = list(distributions(space, scaler))
    if len(done) < 2 or not params:
        section.message = (
            "Not enough trials for this plot: parallel coordinates need at least 2 complete trials; "
            f"the study has {len(done)}."
            if params
            else "Every setting is fixed in this study: nothing to draw."
        )
        return section
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_parallel_coordinate(study, params=params)
    section.figure = tidy_parallel_ticks(figure)
    return section


# Optuna's parallel coordinates label a log axis at every decade and at both ends of the data:
# on init_scale 2^-12..2^31 that is 15 labels, and an end label lands on top of the decade next to
# it ("1.82e+09" over "1e+09"). At most this many labels per axis, this far apart (of its height):
PARALLEL_MAX_LABELS = 7
PARALLEL_MIN_GAP = 0.1


def tidy_parallel_ticks(figure: Any) -> Any:
    """Thins the axis labels of :func:`optuna.visualization.plot_parallel_coordinate` (Optuna 5
    draws them as annotations at x = the axis, y in [0, 1]): both ends stay, then every k-th label
    between them, none nearer than :data:`PARALLEL_MIN_GAP` to another; taller, with room for the
    colour bar's title."""
    labels = [
        a
        for a in figure.layout.annotations
        if isinstance(a.x, (int, float)) and isinstance(a.y, (int, float))
    ]
    others = [a for a in figure.layout.annotations if a not in labels]
    kept = []
    for x in sorted({a.x for a in labels}):
        axis = sorted((a for a in labels if a.x == x), key=lambda a: a.y)
        ends = [axis[0], axis[-1]] if len(axis) > 1 else axis
        inner = axis[1:-1]
        step = max(1, math.ceil(len(inner) / max(1, PARALLEL_MAX_LABELS - 2)))
        chosen = list(ends)
        for a in inner[step // 2 :: step]:
            if all(abs(a.y - b.y) >= PARALLEL_MIN_GAP for b in chosen):
                chosen.append(a)
        kept += sorted(chosen, key=lambda a: a.y)
    figure.layout.annotations = others + kept
    for trace in figure.data:
        colorbar = getattr(getattr(trace, "marker", None), "colorbar", None)
        if colorbar is not None and colorbar.title.text:
            colorbar.title.update(text="objective", side="right")
    figure.update_layout(height=520, title=None, margin={"t": 30, "r": 110})
    return figure
