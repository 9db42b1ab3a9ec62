"""Where runs fail along the start scale: every complete trial by its start scale and objective, coloured by
failure.

Evidence for the verdict: how far the answer's start scale (GradScaler's init_scale, a framework's own start
knob) sits from the scales that underflow (too low), churn (too high) or diverge, with the answer and the
rule's default marked.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from search.core import FAILURE, SpaceConfig, default_trial
from search.publishing.report._section import SECTION_TITLES, Section
from search.publishing.report._visualization import _exponents, _pow2_axis
from search.results import param_values
from search.scalers import RULES, TORCH

# One colour per failure code (docs/objective.md), the good runs in the calmest one.
_COLOURS = {
    "none": "#2b8cbe",
    "underflow": "#756bb1",
    "frozen": "#fd8d3c",
    "overflow_churn": "#e6550d",
    "nonfinite": "#a50f15",
    "ended_at_minimum": "#54278f",
    "pinned_at_minimum": "#9e9ac8",
}


def _failures_section(
    done: list[FrozenTrial], space: SpaceConfig, answer: FrozenTrial | None, scaler: str = TORCH
) -> Section:
    rule = RULES[scaler]
    axis = rule.start_knob if not rule.knob(rule.start_knob).octaves else f"start scale (2^{rule.start_knob})"
    section = Section(
        "failures",
        SECTION_TITLES["failures"],
        f"Every complete trial at its {axis} (log axis, powers of two marked) and objective (log axis when it"
        f" spans more than 10x), coloured by failure code; the answer's trial and {rule.maker}'s default"
        f" ({rule.default_tag}, where the study has it) are marked. Other settings vary between the points,"
        " so a failure at one start scale may come from them.",
    )

    def start(trial: FrozenTrial) -> float:
        return rule.start_scale(param_values(trial, space, scaler))

    if not done:
        section.message = "Not enough trials for this plot: the study has no complete trial yet."
        return section
    figure = go.Figure()
    by_code: dict[str, list[FrozenTrial]] = {}
    for trial in done:
        by_code.setdefault(str(trial.user_attrs.get(FAILURE) or "none"), []).append(trial)
    for code, trials in sorted(by_code.items(), key=lambda item: (item[0] != "none", item[0])):
        figure.add_trace(
            go.Scatter(
                x=[start(t) for t in trials],
                y=[t.value for t in trials],
                mode="markers",
                name=f"{code} ({len(trials)})",
                marker={"color": _COLOURS.get(code, "#636363"), "size": 8, "opacity": 0.8},
                text=[f"#{t.number}" for t in trials],
                hovertemplate="%{text}: start scale %{x:.4g}, objective %{y:.4g}<extra></extra>",
            )
        )
    default = default_trial(done)
    marks = [(answer, "answer", "star"), (default, rule.default_label, "diamond-open")]
    for trial, label, symbol in marks:
        if trial is not None and trial.value is not None:
            figure.add_trace(
                go.Scatter(
                    x=[start(trial)],
                    y=[trial.value],
                    mode="markers",
                    name=f"{label} #{trial.number}",
                    marker={"symbol": symbol, "size": 16, "color": "black", "line": {"width": 2}},
                    hovertemplate=f"{label} #{trial.number}: objective %{{y:.4g}}<extra></extra>",
                )
            )
    _pow2_axis(figure.layout.xaxis, space, _exponents(done, space, scaler), scale_values=True, scaler=scaler)
    figure.update_xaxes(title_text=axis)
    values = [t.value for t in done if t.value is not None and t.value > 0 and math.isfinite(t.value)]
    if values and max(values) / min(values) > 10:
        figure.update_yaxes(type="log")
    figure.update_layout(yaxis_title="objective", height=420, legend={"title": "failure (trials)"})
    section.figure = figure
    return section
