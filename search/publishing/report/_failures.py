"""Where runs fail along init_scale: every complete trial by its init_scale and objective, coloured by failure.

Evidence for the verdict: how far the answer's init_scale sits from the scales that underflow
(too low), churn (too high) or diverge, with the answer and PyTorch's default marked.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from search.core import FAILURE, SpaceConfig, default_trial
from search.publishing.report._section import SECTION_TITLES, Section
from search.publishing.report._visualization import _exponents, _pow2_axis
from search.results import param_values

# One colour per failure code (docs/objective.md), the good runs in the calmest one.
_COLOURS = {
    "none": "#2b8cbe",
    "underflow": "#756bb1",
    "frozen": "#fd8d3c",
    "overflow_churn": "#e6550d",
    "nonfinite": "#a50f15",
}


def _failures_section(done: list[FrozenTrial], space: SpaceConfig, answer: FrozenTrial | None) -> Section:
    section = Section(
        "failures",
        SECTION_TITLES["failures"],
        "Every complete trial at its init_scale (log axis, powers of two marked) and objective (log axis when it "
        "spans more than 10x), "
        "coloured by failure code; the answer's trial and PyTorch's default (seed-1, where the study has it) are marked. Other settings "
        "vary between the points, so a failure at one init_scale may come from them (the safe ranges say which acted).",
    )
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
                x=[param_values(t, space)["init_scale"] for t in trials],
                y=[t.value for t in trials],
                mode="markers",
                name=f"{code} ({len(trials)})",
                marker={"color": _COLOURS.get(code, "#636363"), "size": 8, "opacity": 0.8},
                text=[f"#{t.number}" for t in trials],
                hovertemplate="%{text}: init_scale %{x:.4g}, objective %{y:.4g}<extra></extra>",
            )
        )
    default = default_trial(done)
    marks = [(answer, "answer", "star"), (default, "seed-1 (default)", "diamond-open")]
    for trial, label, symbol in marks:
        if trial is not None and trial.value is not None:
            figure.add_trace(
                go.Scatter(
                    x=[param_values(trial, space)["init_scale"]],
                    y=[trial.value],
                    mode="markers",
                    name=f"{label} #{trial.number}",
                    marker={"symbol": symbol, "size": 16, "color": "black", "line": {"width": 2}},
                    hovertemplate=f"{label} #{trial.number}: objective %{{y:.4g}}<extra></extra>",
                )
            )
    _pow2_axis(figure.layout.xaxis, space, _exponents(done, space), scale_values=True)
    figure.update_xaxes(title_text="init_scale")
    values = [t.value for t in done if t.value is not None and t.value > 0 and math.isfinite(t.value)]
    if values and max(values) / min(values) > 10:
        figure.update_yaxes(type="log")
    figure.update_layout(yaxis_title="objective", height=420, legend={"title": "failure (trials)"})
    section.figure = figure
    return section
