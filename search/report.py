"""``python -m search.report``: one self-contained HTML page (or JSON) about a study.

``python -m search.report [--storage URL] [--study-name NAME] [--out report.html] [--format html|json]``
reads the study once (a consistent snapshot, so a study that is still running can be reported at
any time: RUNNING and WAITING trials are ignored, PRUNED and FAIL trials only counted) and writes:

1. the optimisation history; 2. parameter importances; 3. slice plots and a contour plot of
init_scale × backoff_factor (log axis, powers of two as ticks); 4. parallel coordinates; 5. loss
and scale curves of the best trial, the seed's default (``seed-1``) and the worst finite trial;
6. a histogram of skipped steps; 7. the seed's five configurations next to the best; 8. the safe
range of every setting; 9. a recommended, robust setting as a ``torch.amp.GradScaler(...)`` line;
10. the confirmation runs of ``search.confirm``, when there are any.

Plots come from :mod:`optuna.visualization` where it has one, run on an in-memory copy of the
snapshot; the numbers (safe ranges, recommendation) from :mod:`search.analysis`. A plot that needs
more trials than the study has is replaced by a visible message box. plotly.js is embedded once,
so the page opens from disk without a network. ``--format json`` writes the same numbers.

Exit codes: 0 written, 2 bad input (unknown flag, unreachable storage, missing study, several
studies and no ``--study-name``, unwritable ``--out``): one line on stderr, nothing written.
Passwords in URLs are masked in every message.
"""

from __future__ import annotations

import argparse
import datetime
import html
import inspect
import json
import math
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import plotly.graph_objects as go
import plotly.io as pio
from optuna.importance import PedAnovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState

from search import analysis
from search.cli import CONFIRM_SUFFIX, OneLineParser, UsageError, choose_study, fail, first_line, percent
from search.config import PenaltyConfig, Settings, SpaceConfig
from search.confirmations import summarize_confirmation
from search.figures import curves_figure
from search.record import FAILURE, LOSS_CURVE, SKIPPED_STEPS, baseline_of, showcase
from search.space import POW2_NAME, distributions
from search.storage import StorageError, mask_url, open_existing_storage, redact
from search.study import settings_of
from search.summary import trial_row

__all__ = [
    "MIN_CONTOUR_TRIALS",
    "MIN_IMPORTANCE_TRIALS",
    "Report",
    "ReportError",
    "Section",
    "StudySnapshot",
    "build_parser",
    "build_report",
    "load_snapshot",
    "main",
    "render_html",
    "write_report",
]

PROG = "search.report"
MIN_IMPORTANCE_TRIALS = 2  # Complete trials, with at least one searched setting varying.
MIN_CONTOUR_TRIALS = 10  # Complete trials, with at least 3 distinct values of each setting.
MIN_CONTOUR_DISTINCT = 3
POW2_TICKS = (-20, 32)  # Powers of two marked on init_scale axes.
SECTION_TITLES = {
    "history": "Optimisation history",
    "importances": "Parameter importances",
    "slices": "Slice plots",
    "contour": "Contour: init_scale × backoff_factor",
    "parallel": "Parallel coordinates",
    "curves": "Loss and scale curves: best, default, worst finite",
    "skipped": "Skipped steps",
    "baselines": "The seed's configurations next to the best",
    "safe_ranges": "Safe ranges",
    "recommendation": "Recommended setting",
    "confirmation": "Confirmation runs",
}


class ReportError(UsageError):
    """Bad input: nothing was written. The message is one line and password-free."""


@dataclass(frozen=True)
class StudySnapshot:
    """One read of a study: everything the report needs, no storage access afterwards.

    Attributes:
        study_name: The study.
        storage: Its storage URL, password masked.
        trials: All its trials, by number (any state).
        settings: The settings the study recorded (its space, epochs, penalty, ...).
        confirmation: :func:`search.confirmations.summarize_confirmation` of the study, or None.
        confirmation_note: Why there is no confirmation (no sibling study, module missing, ...).
    """

    study_name: str
    storage: str
    trials: tuple[FrozenTrial, ...]
    settings: Settings
    confirmation: dict[str, Any] | None = None
    confirmation_note: str = ""


@dataclass
class Section:
    """One numbered part of the page.

    Attributes:
        key: Its id (``history``, ``importances``, ...), also the HTML anchor.
        title: The heading.
        intro: What it shows, in words (plain text).
        figure: The plotly figure, or None.
        message: Shown in a message box (instead of the figure when there is none).
        body: Extra HTML (tables, text), already escaped.
    """

    key: str
    title: str
    intro: str = ""
    figure: go.Figure | None = None
    message: str | None = None
    body: str = ""


@dataclass
class Report:
    """The report: its sections for the page and its numbers for JSON (``data``)."""

    study_name: str
    storage: str
    generated: str
    sections: list[Section] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def section(self, key: str) -> Section:
        """The section with ``key``."""
        return next(s for s in self.sections if s.key == key)

    @property
    def figures(self) -> dict[str, go.Figure]:
        """The figures by section key (sections without one left out)."""
        return {s.key: s.figure for s in self.sections if s.figure is not None}


# -- reading the study ------------------------------------------------------------------------


def _read_confirmation(
    storage: optuna.storages.BaseStorage, study_name: str
) -> tuple[dict[str, Any] | None, str]:
    try:
        data = summarize_confirmation(storage, study_name)
    except Exception as e:  # The report stands without it; say why.
        return None, f"could not read the confirmation runs: {first_line(e)}"
    return data, "" if data is not None else "no sibling study"


def load_snapshot(url: str, study_name: str | None = None) -> StudySnapshot:
    """Reads a study once (trials, settings, confirmation) from any Optuna RDB storage.

    Raises:
        ReportError: Unreachable storage, no Optuna schema, missing or ambiguous study, or a
            study not made by ``search.optimize``. Nothing is written to the storage.
    """
    try:
        storage = open_existing_storage(url)
    except StorageError as e:
        raise ReportError(str(e))
    try:
        name = choose_study(storage, url, study_name)
        study_id = storage.get_study_id_from_name(name)
        attrs = storage.get_study_user_attrs(study_id)
        if "task" not in attrs or "space" not in attrs:
            raise ReportError(f"study {name!r} was not created by search.optimize (it records no task/space)")
        if len(storage.get_study_directions(study_id)) != 1:
            raise ReportError(f"study {name!r} is multi-objective; search.optimize studies are not")
        study = optuna.load_study(storage=storage, study_name=name)
        settings = settings_of(study)
        trials = tuple(sorted(storage.get_all_trials(study_id, deepcopy=False), key=lambda t: t.number))
        confirmation, note = _read_confirmation(storage, name)
    finally:
        storage.remove_session()
        storage.engine.dispose()
    return StudySnapshot(name, mask_url(url), trials, settings, confirmation, note)


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


# -- the sections -------------------------------------------------------------------------------


def _init_param(space: SpaceConfig) -> str:
    """The init_scale param name: ``init_scale``, or ``init_scale_log2`` for powers of two."""
    return POW2_NAME if space.init_scale.powers_of_two else "init_scale"


def _pow2_axis(axis: Any, space: SpaceConfig, data_exponents: Sequence[float], max_ticks: int = 14) -> None:
    """Marks powers of two (2^-20 ... 2^32) on an init_scale axis: a log axis of the scale, or the
    log2 param of a powers-of-two space. Every 1st, 2nd, 4th or 8th power, at most ``max_ticks``
    across the data."""
    lo, hi = POW2_TICKS
    span = max(data_exponents) - min(data_exponents) if data_exponents else hi - lo
    step = next((s for s in (1, 2, 4, 8) if span / s <= max_ticks), 16)
    exponents = list(range(lo - lo % step, hi + 1, step))
    text = [f"2<sup>{k}</sup>" for k in exponents]
    if space.init_scale.powers_of_two:
        axis.update(tickvals=exponents, ticktext=text, title_text="init_scale (log2 exponent searched)")
    else:
        axis.update(type="log", tickvals=[2.0**k for k in exponents], ticktext=text)


def _exponents(trials: Sequence[FrozenTrial], space: SpaceConfig) -> list[float]:
    return [math.log2(analysis.param_values(t, space)["init_scale"]) for t in trials]


def _history_section(
    study: optuna.Study, done: list[FrozenTrial], penalty: PenaltyConfig
) -> tuple[Section, list[dict[str, Any]]]:
    section = Section(
        "history",
        SECTION_TITLES["history"],
        "Objective of every complete trial (dots) and the best objective so far (line), by trial number. "
        f"Lower is better; a run that went non-finite scores {penalty.nonfinite:g}-{2 * penalty.nonfinite:g}, "
        f"a silent failure gets {penalty.silent:g} on top of its loss.",
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
    study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig
) -> tuple[Section, dict[str, float] | None, float | None]:
    section = Section("importances", SECTION_TITLES["importances"])
    params = list(distributions(space))
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
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
        figure = optuna.visualization.plot_param_importances(study, evaluator=evaluator)
    figure.update_layout(title=f"Importance for reaching the best {quantile:.0%} (PED-ANOVA, as in optuna-dashboard)")
    section.figure = figure
    if len(done) < 20:
        section.message = (
            f"Only {len(done)} complete trials: importances from so few trials are rough; "
            "PED-ANOVA wants at least 5 trials in the top group."
        )
    return section, {k: float(v) for k, v in importances.items()}, quantile


def _slice_section(study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig) -> Section:
    section = Section(
        "slices",
        SECTION_TITLES["slices"],
        "The objective against each searched setting (one panel per setting; colour: trial number). "
        "init_scale is on a log axis with powers of two marked.",
    )
    params = list(distributions(space))
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
    init = _init_param(space)
    for key in figure.layout:
        if key.startswith("xaxis") and figure.layout[key].title.text == init:
            _pow2_axis(figure.layout[key], space, _exponents(done, space), max_ticks=7)
    figure.update_layout(width=None, height=420)  # Optuna fixes 1200 px; follow the page instead.
    if len(done) > 0:
        values = [t.value for t in done]
        if min(values) > 0 and max(values) / min(values) > 10:
            figure.update_yaxes(type="log")
    section.figure = figure
    return section


def _contour_section(study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig) -> Section:
    section = Section(
        "contour",
        SECTION_TITLES["contour"],
        "The objective interpolated over init_scale (log axis, powers of two marked) and backoff_factor, "
        "complete trials as dots. Dark is low (good).",
    )
    init = _init_param(space)
    params = distributions(space)
    if init not in params or "backoff_factor" not in params:
        fixed = [
            n for n, p in (("init_scale", init), ("backoff_factor", "backoff_factor")) if p not in params
        ]
        section.message = f"No contour: {' and '.join(fixed)} fixed in this study."
        return section
    distinct = min(len({t.params.get(p) for t in done}) for p in (init, "backoff_factor"))
    if len(done) < MIN_CONTOUR_TRIALS or distinct < MIN_CONTOUR_DISTINCT:
        section.message = (
            f"Not enough trials for this plot: a contour needs at least {MIN_CONTOUR_TRIALS} complete "
            f"trials with {MIN_CONTOUR_DISTINCT} distinct values of each setting; the study has "
            f"{len(done)} complete trials."
        )
        return section
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = optuna.visualization.plot_contour(study, params=[init, "backoff_factor"])
    for key in figure.layout:
        if key.startswith(("xaxis", "yaxis")) and figure.layout[key].title.text == init:
            _pow2_axis(figure.layout[key], space, _exponents(done, space))
    figure.update_layout(height=520)
    section.figure = figure
    return section


def _parallel_section(study: optuna.Study, done: list[FrozenTrial], space: SpaceConfig) -> Section:
    section = Section(
        "parallel",
        SECTION_TITLES["parallel"],
        "Each line is a complete trial through its settings (log settings on log10 scales) and its "
        "objective; colour: objective.",
    )
    params = list(distributions(space))
    if len(done) < 2 or not params:
        section.message = (
            f"Not enough trials for this plot: parallel coordinates need at least 2 complete trials; "
            f"the study has {len(done)}."
            if params
            else "Every setting is fixed in this study: nothing to draw."
        )
        return section
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        section.figure = optuna.visualization.plot_parallel_coordinate(study, params=params)
    return section


def _has_curves(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(LOSS_CURVE))


def _curves_section(
    done: list[FrozenTrial], space: SpaceConfig, best: FrozenTrial | None
) -> tuple[Section, dict[str, int | None]]:
    section = Section(
        "curves",
        SECTION_TITLES["curves"],
        "Loss per epoch (top) and GradScaler's scale after each update() (bottom, log axis) of the best "
        "trial, the seed's default (seed-1, PyTorch's GradScaler defaults) and the worst trial that "
        "stayed finite; x marks a step GradScaler skipped (inf/NaN gradients).",
    )
    shown = showcase(done)
    default = shown.default
    worst = shown.worst_finite if shown.worst_finite is not None and _has_curves(shown.worst_finite) else None
    chosen: dict[str, int | None] = {
        "best": best.number if best else None,
        "default": default.number if default else None,
        "worst_finite": worst.number if worst else None,
    }
    named: list[tuple[str, FrozenTrial]] = []
    if best is not None and _has_curves(best):
        named.append((f"best #{best.number}", best))
    if default is not None and _has_curves(default):
        named.append((f"seed-1 default #{default.number}", default))
    if worst is not None and all(worst.number != t.number for _, t in named):
        named.append((f"worst finite #{worst.number} ({worst.user_attrs.get(FAILURE, '-')})", worst))
    notes = []
    if default is None:
        notes.append("the seed's default (seed-1) has no complete trial yet")
    if worst is not None and best is not None and worst.number == best.number:
        notes.append("the worst finite trial is the best one (a single finite trial)")
    if not named:
        section.message = "Not enough trials for this plot: no complete trial with stored curves yet."
        return section, chosen
    section.figure = curves_figure(named, space, title="Best vs seed-1 (default) vs worst finite trial")
    section.figure.update_layout(height=650)
    if notes:
        section.message = "Note: " + "; ".join(notes) + "."
    return section, chosen


def _skipped_section(done: list[FrozenTrial]) -> tuple[Section, dict[str, int]]:
    section = Section(
        "skipped",
        SECTION_TITLES["skipped"],
        "How many complete trials skipped how many optimizer steps (GradScaler skips a step whose "
        "gradients hold inf/NaN and backs the scale off).",
    )
    counts = Counter(
        int(t.user_attrs.get(SKIPPED_STEPS) or 0) for t in done if "skipped_steps" in t.user_attrs
    )
    data = {str(k): counts[k] for k in sorted(counts)}
    if not counts:
        section.message = "Not enough trials for this plot: no complete trial records skipped steps yet."
        return section, data
    keys = sorted(counts)
    figure = go.Figure(
        go.Bar(
            x=keys,
            y=[counts[k] for k in keys],
            text=[counts[k] for k in keys],
            textposition="outside",
            marker_color="#1f77b4",
            name="trials",
            hovertemplate="%{y} trials skipped %{x} steps<extra></extra>",
        )
    )
    figure.update_layout(
        title="Skipped optimizer steps per trial",
        xaxis_title="skipped steps (of the run's optimizer steps)",
        yaxis_title="trials",
        bargap=0.15,
    )
    section.figure = figure
    return section, data


def _fmt(value: Any, spec: str = ".4f") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], classes: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{classes}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _baselines_section(
    done: list[FrozenTrial], space: SpaceConfig, best: FrozenTrial | None
) -> tuple[Section, dict[str, Any]]:
    section = Section(
        "baselines",
        SECTION_TITLES["baselines"],
        "The seed script's five GradScaler configurations (seed-1 is PyTorch's default), re-measured inside "
        "the study, next to the best trial. Δ best: how much worse than the best objective.",
    )
    baselines: dict[str, dict[str, Any]] = {}
    for t in done:
        tag = baseline_of(t)
        if tag is not None and tag not in baselines:
            baselines[str(tag)] = trial_row(t, space)
    baselines = dict(sorted(baselines.items()))
    data = {"best": trial_row(best, space) if best else None, "baselines": baselines}
    if best is None:
        section.message = "No complete trial yet: nothing to compare."
        return section, data
    rows = []
    for label, row in [("best", data["best"]), *baselines.items()]:
        delta = (row["value"] - best.value) / abs(best.value) * 100 if best.value else 0.0
        rows.append(
            [
                f"<b>{html.escape(label)}</b>",
                f"#{row['number']}",
                analysis.format_value("init_scale", row["init_scale"]),
                f"{row['growth_factor']:.3g}",
                f"{row['backoff_factor']:.3g}",
                str(row["growth_interval"]),
                _fmt(row["final_loss"]),
                _fmt(row["skipped_steps"], "d"),
                _fmt(row["learned"]),
                html.escape(str(row["failure"] or "–")),
                _fmt(row["value"]),
                f"{delta:+.2f}%",
            ]
        )
    section.body = _table(
        [
            "",
            "trial",
            "init_scale",
            "growth_factor",
            "backoff_factor",
            "growth_interval",
            "final loss",
            "skipped steps",
            "learned?",
            "failure",
            "objective",
            "Δ best",
        ],
        rows,
        "numbers",
    )
    missing = [f"seed-{i}" for i in range(1, 6) if f"seed-{i}" not in baselines]
    if missing:
        section.message = f"No complete trial yet for {', '.join(missing)} (still queued, running, or left out of the space)."
    return section, data


def _safe_section(
    done: list[FrozenTrial], space: SpaceConfig, tolerance: float
) -> tuple[Section, list[dict[str, Any]]]:
    pct = f"{tolerance * 100:g}%"
    section = Section(
        "safe_ranges",
        SECTION_TITLES["safe_ranges"],
        f"A trial is good when its objective is within x = {pct} of the best objective "
        f"(objective ≤ best + {pct} · |best|; --tolerance), and it had no non-finite value and no silent "
        "failure (failure code none). A setting's safe range runs from its smallest to its largest value "
        "among the good trials, one setting at a time: a combination of values each inside its range can "
        "still fail (the recommendation below gives ranges that are safe together). Bad trials inside that range are listed: when every other setting of such "
        "a trial is inside its own safe range too, the safe set is not an interval (not a box), and the "
        "stretch around the best trial without such a trial is given.",
    )
    ranges = analysis.safe_ranges(done, space, tolerance)
    data = [r.to_dict() for r in ranges]
    if not done:
        section.message = "No complete trial yet: no safe range."
        return section, data
    rows = []
    for r in ranges:
        if r.fixed is not None:
            span = f"fixed at {analysis.format_value(r.param, r.fixed)}"
        elif r.low is None:
            span = "none"
        else:
            span = f"{analysis.format_value(r.param, r.low)} … {analysis.format_value(r.param, r.high)}"
        rows.append(
            [
                f"<b>{r.param}</b>",
                html.escape(span),
                "yes" if r.is_interval else f"no ({len(r.holes)} inside)",
                html.escape(r.text),
            ]
        )
    section.body = _table(["setting", "safe range", "an interval?", "in words"], rows, "wide")
    return section, data


def _recommendation_section(
    done: list[FrozenTrial], space: SpaceConfig, tolerance: float, confirmation: dict[str, Any] | None
) -> tuple[Section, dict[str, Any] | None]:
    pct = f"{tolerance * 100:g}%"
    section = Section(
        "recommendation",
        SECTION_TITLES["recommendation"],
        f"Not the argmin, which among near-equal trials is noise: the good trials (within {pct} of the best "
        "objective, --tolerance, without failure) form a region; each is scored by its depth, the distance in "
        "octaves (log2 of the four settings combined) to the nearest trial that is not good, and the deepest "
        f"with at least {analysis.MIN_SUPPORT} good trials within that distance is recommended with its own measured "
        "values (a rounded neighbour would be a setting no trial ran). PyTorch's default is kept when it is good and at least "
        f"{analysis.DEFAULT_MARGIN:g} octaves deep. Confirmation runs on new seeds, when there are any, decide. "
        "The last column gives ranges that are safe together, in any combination (the safe ranges above hold one "
        "setting at a time). The candidate is the box around the setting that no failed trial comes near, inside the "
        "span of the failure-free trials there; sampled trials cannot vouch for its corners, so it is stated as safe "
        "only once search.confirm has trained all of them without failure (else it is halved and tried again). "
        "It promises no failure, not every combination within the tolerance of the best.",
    )
    rec = analysis.recommend(done, space, tolerance, confirmation=confirmation)
    if rec is None:
        section.message = "No complete trial yet: nothing to recommend."
        return section, None
    source = next(t for t in done if t.number == rec.source_trial)
    values = analysis.param_values(source, space)
    rows = []
    for param in analysis.searched_params(space):
        edge = rec.edge.get(param)
        rows.append(
            [
                f"<b>{param}</b>",
                html.escape(analysis.format_value(param, float(getattr(rec.config, param)))),
                html.escape(analysis.format_value(param, values[param])),
                "–" if edge is None else html.escape(analysis.format_value(param, edge)),
                "–"
                if edge is None
                else f"{math.log2(edge) - math.log2(values[param]):+.2f}",
                _together_cell(rec, param),
            ]
        )
    title = "Keep the default" if rec.keep_default else "Recommended"
    if rec.confirmed:
        title += f" ({rec.confirmed} on new seeds)"
    section.body = (
        f"<p><b>{html.escape(title)}</b></p>"
        f'<pre class="code">{html.escape(rec.code)}</pre>'
        f'<p class="text">{html.escape(rec.text)}</p>'
        + _table(
            [
                "setting",
                "recommended",
                f"trial #{rec.source_trial}",
                "nearest trial that is not good" + (f" (#{rec.nearest_bad})" if rec.nearest_bad is not None else ""),
                "octaves to it",
                {
                    "checked": "safe together (corners trained)",
                    "unchecked": "candidate, not checked (run search.confirm)",
                    "refuted": "safe together: refuted by its corners",
                }.get(rec.together_check, "safe together"),
            ],
            rows,
            "numbers",
        )
    )
    return section, rec.to_dict()


def _together_cell(rec: analysis.Recommendation, param: str) -> str:
    box = rec.together if rec.together_check == "checked" else rec.candidate
    if rec.together_check == "refuted" or param not in box:
        return "–"
    return html.escape(analysis.format_range(param, *box[param]))


def _confirmation_section(snapshot: StudySnapshot) -> Section:
    section = Section(
        "confirmation",
        SECTION_TITLES["confirmation"],
        "Re-runs of the best configurations and of the default on new data/initialisation seeds "
        f"(python -m search.confirm, stored in the sibling study {snapshot.study_name}{CONFIRM_SUFFIX}).",
    )
    data = snapshot.confirmation
    if data is None:
        extra = (
            f" ({snapshot.confirmation_note})"
            if snapshot.confirmation_note not in ("", "no sibling study")
            else ""
        )
        section.message = f"no confirmation runs (run python -m search.confirm){extra}"
        return section
    rows = []
    for c in data.get("configs", []):
        mean, sd = c.get("mean"), c.get("sd")
        pm = "–" if mean is None else f"{mean:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")
        source = "–" if c.get("source_trial") is None else f"#{c['source_trial']}"
        rows.append([f"<b>{html.escape(str(c.get('label')))}</b>", source, str(c.get("n", 0)), pm])
    seeds = data.get("seeds", [])
    body = f"<p>Seeds: {html.escape(', '.join(str(s) for s in seeds)) or 'none'}.</p>"
    body += _table(["config", "source trial", "runs", "objective mean ± sd"], rows, "numbers")
    comparison = data.get("comparison")
    if comparison:
        better = comparison.get("better_beyond_noise")
        p, t, diff = comparison.get("p"), comparison.get("t"), comparison.get("mean_diff")
        stats = ", ".join(
            part
            for part in (
                f"mean difference {diff:+.4g}" if diff is not None else "",
                f"t = {t:.2f}" if t is not None else "",
                f"p = {p:.3g}" if p is not None else "",
            )
            if part
        )
        if better:
            verdict = f"{comparison.get('best_label')} is better than {comparison.get('default_label')} beyond noise"
        elif comparison.get("worse_beyond_noise"):
            verdict = f"{comparison.get('default_label')} is better than {comparison.get('best_label')} beyond noise"
        else:
            verdict = f"{comparison.get('best_label')} and {comparison.get('default_label')} are not distinguishable"
        body += (
            f'<p class="verdict"><b>Verdict:</b> {html.escape(verdict)} ({html.escape(stats)}; '
            f"{html.escape(str(comparison.get('test', '')))}).</p>"
        )
    else:
        body += '<p class="verdict"><b>Verdict:</b> nothing to compare yet (the best or the default has no runs).</p>'
    corners = data.get("corners", [])
    if corners:
        failed = Counter(c["failure"] for c in corners if c["failure"] != "none")
        seeds_used = sorted({c.get("data_seed") for c in corners if c.get("data_seed") is not None})
        body += (
            f"<p>Corner runs of the ranges that may be safe together (10. Recommended setting): {len(corners)} "
            f"on the search's own data (seed {', '.join(map(str, seeds_used)) or '?'}), "
            + (", ".join(f"{n} {code}" for code, n in failed.items()) if failed else "none failed")
            + ".</p>"
        )
    section.body = body
    return section


def build_report(
    snapshot: StudySnapshot,
    tolerance: float = analysis.DEFAULT_TOLERANCE,
) -> Report:
    """Builds every section (figures, tables, message boxes) and the JSON numbers of a snapshot.

    Args:
        snapshot: The study, read once.
        tolerance: The safe tolerance x as a fraction (0.01 = 1%).
    """
    space = snapshot.settings.space
    trials = list(snapshot.trials)
    done = analysis.completed(trials)
    best = analysis.best_trial(done)
    states = Counter(t.state.name for t in trials)
    n_good = len(analysis.good_trials(done, tolerance))
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = Report(snapshot.study_name, snapshot.storage, generated)

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # No "new study created in memory".
    try:
        study = _in_memory_study(trials)
        history, history_rows = _history_section(study, done, snapshot.settings.penalty)
        importances, importance_values, quantile = _importance_section(study, done, space)
        slices = _slice_section(study, done, space)
        contour = _contour_section(study, done, space)
        parallel = _parallel_section(study, done, space)
    finally:
        optuna.logging.set_verbosity(previous)
    curves, chosen = _curves_section(done, space, best)
    skipped, skipped_counts = _skipped_section(done)
    baselines, baseline_data = _baselines_section(done, space, best)
    safe, safe_data = _safe_section(done, space, tolerance)
    recommendation, rec_data = _recommendation_section(done, space, tolerance, snapshot.confirmation)
    confirmation = _confirmation_section(snapshot)
    report.sections = [
        history,
        importances,
        slices,
        contour,
        parallel,
        curves,
        skipped,
        baselines,
        safe,
        recommendation,
        confirmation,
    ]
    report.data = {
        "study_name": snapshot.study_name,
        "storage": snapshot.storage,
        "generated": generated,
        "settings": {
            "task": snapshot.settings.run.task,
            "epochs": snapshot.settings.run.epochs,
            "seed": snapshot.settings.run.seed,
            "amp_dtype": snapshot.settings.run.amp_dtype,
        },
        "states": {s.name: states.get(s.name, 0) for s in TrialState},
        "n_complete": len(done),
        "ignored": {"RUNNING": states.get("RUNNING", 0), "WAITING": states.get("WAITING", 0)},
        "tolerance": tolerance,
        "n_good": n_good,
        "history": history_rows,
        "importances": importance_values,
        "importance_target_quantile": quantile,
        "safe_ranges": safe_data,
        "recommendation": rec_data,
        "best": baseline_data["best"],
        "baselines": baseline_data["baselines"],
        "curves": chosen,
        "skipped_steps": skipped_counts,
        "confirmation": snapshot.confirmation,
        "sections": {
            s.key: {"title": s.title, "plot": s.figure is not None, "message": s.message}
            for s in report.sections
        },
    }
    return report


# -- the page -----------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d2330;
       background: #ffffff; }
header { background: #1f3b5c; color: #ffffff; padding: 18px 32px; }
header h1 { margin: 0 0 6px 0; font-size: 26px; }
header p { margin: 2px 0; font-size: 14px; color: #d8e2ee; }
header code { color: #ffffff; background: #2d5480; padding: 1px 5px; border-radius: 3px; }
main { padding: 8px 32px 40px 32px; max-width: 1400px; }
nav { font-size: 13px; margin: 10px 0 4px 0; line-height: 1.8; }
nav a { margin-right: 14px; color: #1f5fa8; text-decoration: none; }
section { border-top: 1px solid #d6dbe3; padding-top: 6px; margin-top: 18px; }
h2 { font-size: 20px; margin: 10px 0 4px 0; }
p.intro { font-size: 14px; color: #4a5263; margin: 4px 0 8px 0; max-width: 1100px; }
.message { border: 2px solid #d99a00; background: #fff6d6; color: #5a4300; padding: 12px 16px;
           margin: 10px 0; border-radius: 6px; font-size: 15px; max-width: 1100px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #d6dbe3; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
table.numbers td { text-align: right; white-space: nowrap; }
table.numbers td:first-child { text-align: left; }
table.wide td:last-child { max-width: 780px; }
pre.code { background: #f3f5f8; border: 1px solid #d6dbe3; padding: 10px 14px; font-size: 14px;
           overflow-x: auto; }
.verdict { font-size: 15px; }
p.text { font-size: 14px; max-width: 1100px; }
footer { color: #6b7385; font-size: 12px; padding: 0 32px 24px 32px; }
"""


def render_html(report: Report) -> str:
    """The whole page: one embedded plotly.js (the first figure's), no external resources."""
    data = report.data
    esc = html.escape
    rec = data.get("recommendation")
    states = ", ".join(f"{n.lower()} {c}" for n, c in data["states"].items() if c) or "no trials"
    ignored = data["ignored"]
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(report.study_name)}: GradScaler search report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<header>",
        f"<h1>GradScaler search report: study {esc(report.study_name)}</h1>",
        f"<p>storage <code>{esc(report.storage)}</code> · task {esc(str(data['settings']['task']))}, "
        f"{data['settings']['epochs']} epochs, {esc(str(data['settings']['amp_dtype']))} · trials: {esc(states)}"
        + (
            f" · ignored while running: {ignored['RUNNING']} running, {ignored['WAITING']} waiting"
            if ignored["RUNNING"] or ignored["WAITING"]
            else ""
        )
        + "</p>",
    ]
    if data.get("best"):
        lines.append(
            f"<p>best objective {data['best']['value']:.4f} (trial #{data['best']['number']}) · "
            + ("keep the default" if rec["keep_default"] else "recommended")
            + (f" ({esc(rec['confirmed'])} on new seeds)" if rec.get("confirmed") else "")
            + f": <code>{esc(rec['code'])}</code></p>"
        )
    lines.append(f"<p>generated {esc(report.generated)} by python -m search.report</p>")
    lines.append("</header><main>")
    lines.append(
        "<nav>"
        + "".join(f'<a href="#{s.key}">{i}. {esc(s.title)}</a>' for i, s in enumerate(report.sections, 1))
        + "</nav>"
    )
    plotly_js_done = False
    for i, s in enumerate(report.sections, 1):
        lines.append(f'<section id="{s.key}"><h2>{i}. {esc(s.title)}</h2>')
        if s.intro:
            lines.append(f'<p class="intro">{esc(s.intro)}</p>')
        if s.message:
            lines.append(f'<div class="message" role="note">{esc(s.message)}</div>')
        if s.figure is not None:
            lines.append(
                pio.to_html(
                    s.figure,
                    full_html=False,
                    include_plotlyjs=not plotly_js_done,
                    div_id=f"figure-{s.key}",
                    config={"displaylogo": False, "responsive": True},
                )
            )
            plotly_js_done = True
        if s.body:
            lines.append(s.body)
        lines.append("</section>")
    lines.append("</main>")
    lines.append(
        "<footer>Numbers: search.analysis (safe ranges, recommendation); plots: optuna.visualization and "
        "search.figures. The same numbers as JSON: python -m search.report --format json.</footer>"
    )
    lines.append("</body></html>")
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> str:
    """The report's numbers as JSON text (non-finite numbers as null)."""
    return json.dumps(_json_safe(report.data), indent=2, sort_keys=True, allow_nan=False) + "\n"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _check_out(path: str) -> None:
    if os.path.isdir(path):
        raise ReportError(f"--out {path} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ReportError(f"--out {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ReportError(f"--out {path}: not writable")


def write_report(text: str, path: str) -> None:
    """Writes ``text`` to ``path`` atomically (a temporary file renamed), so a failure leaves nothing."""
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- the command --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog="python -m search.report",
        description="Write one self-contained HTML report (plotly embedded, opens offline) or the same "
        "numbers as JSON about a GradScaler search study: history, importances, slices, contour, parallel "
        "coordinates, curves, skipped steps, baselines, safe ranges, a robust recommendation, confirmation.",
        allow_abbrev=False,
    )
    add = p.add_argument
    add(
        "--storage",
        metavar="URL",
        default="sqlite:///study.db",
        help="Optuna storage URL [sqlite:///study.db]",
    )
    add("--study-name", default=None, help="the study [the storage's only study]")
    add(
        "--out",
        metavar="PATH",
        default=None,
        help="output file [report.html, or report.json with --format json]",
    )
    add("--format", choices=("html", "json"), default="html", help="html or json [html]")
    add(
        "--tolerance",
        metavar="PCT",
        type=percent,
        default=analysis.DEFAULT_TOLERANCE * 100,
        help="safe: objective within PCT%% of the best, no non-finite value, no silent failure [1]",
    )
    return p


def _fail(message: str, code: int = 2) -> int:
    return fail(PROG, message, code)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (0 written, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    url = ""
    try:
        args = build_parser().parse_args(argv)
        url = args.storage
        out = args.out or ("report.json" if args.format == "json" else "report.html")
        _check_out(out)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        snapshot = load_snapshot(url, args.study_name)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except UsageError as e:  # ReportError, and argparse's and choose_study's errors.
        return _fail(redact(str(e), url) if url else str(e))
    except Exception as e:  # Reading the study failed: still bad input, nothing written.
        return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
    report = build_report(snapshot, args.tolerance / 100)
    text = report_json(report) if args.format == "json" else render_html(report)
    try:
        write_report(text, out)
    except OSError as e:
        return _fail(f"cannot write --out {out}: {e.strerror or first_line(e)}")
    done = report.data["n_complete"]
    print(
        f"wrote {out}: study {report.study_name!r}, {done} complete trial{'s' if done != 1 else ''} ({args.format})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
