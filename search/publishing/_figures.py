"""Plotly figures of training runs, shared by the HTML report and the dashboard.

Each trial stores its per-step ``loss_curve`` and ``scale_curve`` (the rule's scale after each update) and
the steps it skipped, as the trainer measured them, as user attrs; a study that stored no skipped steps has
them read off the scale curve (a GradScaler skip is a drop of the scale) and the trial's ``init_scale``. A
task with a schedule stores each step's learning rate too (drawn under the scale), and a run from a
checkpoint its first global step (the steps are then numbered as the user's run numbers them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from optuna.trial import FrozenTrial
from plotly.subplots import make_subplots

from search.core import FIRST_STEP, LOSS_CURVE, LR_CURVE, SCALE_CURVE, SpaceConfig, scaler_config, skipped_of

# One colour per role, so that the best/default/worst read the same in every figure.
COLOURS = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")


def trial_curves(
    trial: FrozenTrial, space: SpaceConfig
) -> tuple[list[float | None], list[float | None], list[int]]:
    """(loss curve, scale curve, skipped steps) of a stored trial; non-finite values are None. The skipped
    steps are the ones the trainer measured (:func:`search.core.skipped_of`)."""
    loss = list(trial.user_attrs.get(LOSS_CURVE) or [])
    scale = list(trial.user_attrs.get(SCALE_CURVE) or [])
    try:  # Every setting fixed: no params, and the space still knows init_scale.
        init_scale = scaler_config(trial.params, space).init_scale
    except KeyError:  # A searched setting this trial never got (it failed, or a framework's knobs).
        init_scale = math.nan
    return loss, scale, skipped_of(trial, init_scale)


def curves_figure(
    named: Sequence[tuple[str, FrozenTrial]], space: SpaceConfig, title: str = "Training curves"
) -> go.Figure:
    """Loss (top) and loss scale (log axis) per optimizer step, skipped steps marked with x; under them the
    learning rate, where a trial's changed.

    Args:
        named: (label, trial) pairs, e.g. ``[("best #78", t), ("seed-1 (default)", d)]``.
        space: The study's search space (to read each trial's init_scale).
        title: Figure title.
    """
    scheduled = any(trial.user_attrs.get(LR_CURVE) for _, trial in named)
    titles = ("loss (autocast forward pass, before the step)", "loss scale after update()")
    figure = make_subplots(
        rows=3 if scheduled else 2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=titles + (("learning rate of the step",) if scheduled else ()),
    )
    for i, (label, trial) in enumerate(named):
        colour = COLOURS[i % len(COLOURS)]
        loss, scale, skipped = trial_curves(trial, space)
        first = int(trial.user_attrs.get(FIRST_STEP, 0))  # Counted from 1, as the user's run counts them.
        steps = list(range(first + 1, first + len(loss) + 1))
        group = f"trial-{trial.number}"
        figure.add_trace(
            go.Scatter(x=steps, y=loss, name=label, legendgroup=group, line={"color": colour}, mode="lines"),
            row=1,
            col=1,
        )
        figure.add_trace(
            _held(steps[: len(scale)], scale, group, colour, name=label),
            row=2,
            col=1,
        )
        if skipped:
            marks = [e for e in skipped if e < len(loss)]
            figure.add_trace(
                go.Scatter(
                    x=[first + e + 1 for e in marks],
                    y=[loss[e] for e in marks],
                    name=f"{label}: {len(skipped)} skipped",
                    legendgroup=group,
                    mode="markers",
                    marker={"symbol": "x", "size": 9, "color": colour},
                    hovertemplate="step %{x}: step skipped (inf/NaN gradients)<extra></extra>",
                ),
                row=1,
                col=1,
            )
            figure.add_trace(
                go.Scatter(
                    x=[first + e + 1 for e in skipped if e < len(scale)],
                    y=[scale[e] for e in skipped if e < len(scale)],
                    legendgroup=group,
                    showlegend=False,
                    mode="markers",
                    marker={"symbol": "x", "size": 9, "color": colour},
                    hovertemplate="step %{x}: scale backed off to %{y:.3g}<extra></extra>",
                ),
                row=2,
                col=1,
            )
        rates = trial.user_attrs.get(LR_CURVE)
        if rates:
            figure.add_trace(
                _held(
                    steps[: len(rates)],
                    rates,
                    group,
                    colour,
                    hovertemplate="step %{x}: learning rate %{y:.3g}<extra></extra>",
                ),
                row=3,
                col=1,
            )
    figure.update_yaxes(title_text="loss", row=1, col=1)
    figure.update_yaxes(title_text="scale", type="log", exponentformat="power", row=2, col=1)
    if scheduled:
        figure.update_yaxes(title_text="learning rate", row=3, col=1)
    figure.update_xaxes(title_text="optimizer step", row=3 if scheduled else 2, col=1)
    figure.update_layout(title=title, hovermode="x unified", legend={"groupclick": "togglegroup"})
    return figure


def _held(x: list[int], y: list, group: str, colour: str, **extra: str) -> go.Scatter:
    """A value held from one step to the next (a scale, a learning rate), in a trial's legend group."""
    line = {"color": colour, "shape": "hv"}
    return go.Scatter(x=x, y=y, legendgroup=group, showlegend=False, line=line, mode="lines", **extra)
