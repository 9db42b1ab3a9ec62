"""The report's diagnosis section: the diagnosis the search started from, and the one recorded in the study.

A study keeps two (:mod:`search.core._record`): ``diagnosis``, what ``search.optimize --from-diagnosis`` took
from a diagnosis when it created the study, and ``recorded_diagnosis``, the last ``search.diagnose --storage``
of the study's run. The section says each in the words the commands printed, and whether they are one
diagnosis.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial

from search.core import baseline_of
from search.diagnosis import scale_text, setting_text
from search.publishing.report._section import SECTION_TITLES, Section


def _diagnosis_section(
    study_name: str,
    started: Mapping[str, Any] | None,
    recorded: Mapping[str, Any] | None,
    suggested: FrozenTrial | None = None,
) -> tuple[Section, dict[str, Any]]:
    """The section and its JSON: ``started_from`` and ``recorded`` (each None when the study holds none).
    ``suggested``: the complete trial of the setting the starting diagnosis suggested (baseline
    ``diagnosis``).
    """
    data = {
        "started_from": dict(started) if started else None,
        "recorded": dict(recorded) if recorded else None,
    }
    section = Section(
        "diagnosis",
        SECTION_TITLES["diagnosis"],
        "The diagnosis this study's search started from (--from-diagnosis) and the last one search.diagnose"
        " --storage recorded in the study, as the study holds them (docs/diagnose.md).",
    )
    if not started and not recorded:
        section.message = (
            f"This study holds no diagnosis: search.diagnose --storage URL --study-name {study_name} "
            "(with this study's task, seed, scaler and steps) records one here."
        )
        return section, data
    lines = []
    if started:
        source = started.get("file") or started.get("source") or "a diagnosis"
        growth = started.get("growth_param", "growth_interval")
        lines.append(
            f"The search started from the diagnosis in {source}, which found {started['verdict']} at "
            f"{started['param']} {scale_text(started['diagnosed_start'])}: {started['param']} searched "
            f"over {scale_text(started['low'])}..{scale_text(started['high'])}, around the "
            f"{scale_text(started['suggested_init_scale'])} it suggested; {growth} over "
            f"{started['growth_low']:g}..{started['growth_high']:g}"
            + _suggested_text(started.get("suggested_setting"), suggested)
        )
    if recorded:
        same = (
            bool(started)
            and started.get("file") is None
            and _recorded_at(started) == recorded.get("recorded_at")
        )
        settings = ", ".join(_setting(k, v) for k, v in recorded.get("settings", {}).items())
        lines.append(
            f"{'That diagnosis' if same else 'The diagnosis recorded in the study'}"
            f" ({recorded.get('recorded_at')}, search.diagnose on {recorded.get('device')},"
            f" {recorded.get('steps')} steps): {settings}: {recorded['verdict']}, because"
            f" {recorded.get('reason')}. Next: {recorded.get('advice')}."
        )
    section.body = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    return section, data


def _suggested_text(setting: Mapping[str, float] | None, trial: FrozenTrial | None) -> str:
    """The end of the started-from line: the setting the diagnosis suggested, and what became of it."""
    if not setting:
        return "."
    text = f"; the setting it suggested: {setting_text(dict(setting))}"
    if trial is None:
        return text + " (no complete trial of it: left out of the space, or not finished)."
    return text + f", trial #{trial.number} (baseline {baseline_of(trial)}), objective {trial.value:.3g}."


def _recorded_at(started: dict[str, Any]) -> str | None:
    """When the diagnosis a search started from was recorded: its ``recorded_at``, or for a study searched
    before the key existed, read back from its ``source`` ("study 'NAME', recorded WHEN")."""
    if "recorded_at" in started:
        return started["recorded_at"]
    _, sep, when = str(started.get("source", "")).rpartition(", recorded ")
    return when if sep else None


def _setting(name: str, value: Any) -> str:
    if name == "init_scale" and isinstance(value, (int, float)):
        return f"{name} {scale_text(float(value))}"
    return f"{name} {value:g}" if isinstance(value, (int, float)) else f"{name} {value}"
