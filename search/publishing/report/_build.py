"""Putting a report together: every section in page order, and the numbers ``--format json`` writes.

:func:`build_report` reads no storage (only its :class:`~search.publishing.report._reading.ReportSnapshot`),
and one :class:`Report` serves both outputs: :func:`search.publishing.report._page.render_html` and
:func:`report_json`.
"""

from __future__ import annotations

import datetime
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState

from search.core import DIAGNOSIS_BASELINE, FIRST_STEP, baseline_of
from search.publishing.report._diagnoses import _diagnosis_section
from search.publishing.report._failures import _failures_section
from search.publishing.report._reading import ReportSnapshot
from search.publishing.report._rule_recommendation import _rule_recommendation_section
from search.publishing.report._runs import _curves_section, _skipped_section
from search.publishing.report._section import Section
from search.publishing.report._tables import (
    _baselines_section,
    _confirmation_section,
    _recommendation_section,
    _safe_section,
)
from search.publishing.report._visualization import (
    _contour_section,
    _history_section,
    _importance_section,
    _in_memory_study,
    _parallel_section,
    _slice_section,
)
from search.results import (
    DEFAULT_TOLERANCE,
    FRAMEWORK_FORM,
    GRADSCALER_FORM,
    answer_form,
    best_trial,
    completed,
    counted_steps,
    good_trials,
)

# The answer's section in its rule's form (chosen once: search.results.answer_form): GradScaler's
# recommendation, or the framework's own block as its summary states it.
_RECOMMENDATION_SECTIONS = {
    GRADSCALER_FORM.name: lambda snapshot, done, space, scaler, tolerance, evaluation: (
        _recommendation_section(done, space, tolerance, snapshot.confirmation, evaluation)
    ),
    FRAMEWORK_FORM.name: lambda snapshot, done, space, scaler, tolerance, evaluation: (
        _rule_recommendation_section(
            snapshot.study_name, done, space, scaler, snapshot.confirmation, evaluation
        )
    ),
}


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


def build_report(
    snapshot: ReportSnapshot,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Report:
    """Builds every section (figures, tables, message boxes) and the JSON numbers of a snapshot.

    Args:
        snapshot: The study, read once.
        tolerance: The safe tolerance x as a fraction (0.01 = 1%).
    """
    space = snapshot.settings.space
    scaler = snapshot.settings.run.scaler
    trials = list(snapshot.trials)
    done = completed(trials)
    best = best_trial(done)
    states = Counter(t.state.name for t in trials)
    n_good = len(good_trials(done, tolerance))
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = Report(snapshot.study_name, snapshot.storage, generated)

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # No "new study created in memory".
    try:
        study = _in_memory_study(trials)
        history, history_rows = _history_section(study, done, snapshot.settings.penalty)
        importances, importance_values, quantile = _importance_section(study, done, space, scaler)
        slices = _slice_section(study, done, space, scaler)
        contour = _contour_section(study, done, space, scaler)
        parallel = _parallel_section(study, done, space, scaler)
    finally:
        optuna.logging.set_verbosity(previous)
    evaluation = snapshot.settings.penalty.evaluation
    recommendation, rec_data = _RECOMMENDATION_SECTIONS[answer_form(scaler).name](
        snapshot, done, space, scaler, tolerance, evaluation
    )
    answer = next((t for t in done if rec_data and t.number == rec_data["source_trial"]), None)
    if rec_data and rec_data["verdict"] != "change":
        answer = None  # keep-default: the default's own curves are the answer's; none-safe: no answer
    curves, chosen = _curves_section(done, space, best, answer, scaler)
    failures = _failures_section(done, space, answer, scaler)
    skipped, skipped_counts = _skipped_section(done, scaler)
    baselines, baseline_data = _baselines_section(done, space, best, evaluation, scaler)
    safe, safe_data = _safe_section(done, space, tolerance, scaler)
    confirmation = _confirmation_section(snapshot)
    suggested = _suggested_trial(done, snapshot.diagnoses[0])
    diagnosis, diagnosis_data = _diagnosis_section(snapshot.study_name, *snapshot.diagnoses, suggested)
    report.sections = [
        recommendation,
        curves,
        failures,
        confirmation,
        diagnosis,
        safe,
        baselines,
        skipped,
        history,
        importances,
        slices,
        contour,
        parallel,
    ]
    report.data = {
        "study_name": snapshot.study_name,
        "storage": snapshot.storage,
        "generated": generated,
        "settings": {
            "task": snapshot.settings.run.task,
            "epochs": snapshot.settings.run.epochs,
            "steps": snapshot.settings.run.steps,
            "steps_per_trial": counted_steps(
                snapshot.settings.run.epochs, snapshot.settings.run.steps, trials
            ),
            "seed": snapshot.settings.run.seed,
            "amp_dtype": snapshot.settings.run.amp_dtype,
            "scaler": scaler,
            "checkpoint": snapshot.settings.run.checkpoint or None,
            # The global step the trials started from (their checkpoint's), as they recorded it.
            "first_step": next((t.user_attrs[FIRST_STEP] for t in done if FIRST_STEP in t.user_attrs), 0),
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
        "diagnosis": diagnosis_data,
        "sections": {
            s.key: {"title": s.title, "plot": s.figure is not None, "message": s.message}
            for s in report.sections
        },
    }
    return report


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


def _suggested_trial(
    done: list[optuna.trial.FrozenTrial], started: dict[str, Any] | None
) -> optuna.trial.FrozenTrial | None:
    """The complete trial of the setting the starting diagnosis suggested: baseline ``diagnosis``, or the
    baseline (``seed-1`` ...) whose setting it is (then not trained twice)."""
    own = next((t for t in done if baseline_of(t) == DIAGNOSIS_BASELINE), None)
    setting = (started or {}).get("suggested_setting")
    if own is not None or not setting:
        return own
    return next((t for t in done if baseline_of(t) is not None and t.params == setting), None)
