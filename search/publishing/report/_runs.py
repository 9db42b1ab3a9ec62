"""The sections about the training runs themselves: loss and scale curves, skipped steps.

They are drawn from what each trial recorded (:mod:`search.core._record`: curves, skipped-step counts),
which :mod:`optuna.visualization` does not know about: it sees params and objectives only.
"""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go
from optuna.trial import FrozenTrial

from search.core import (
    FAILURE,
    LOSS_CURVE,
    SKIPPED_STEPS,
    SpaceConfig,
    baseline_trials,
    showcase,
)
from search.publishing import curves_figure
from search.publishing.report._section import SECTION_TITLES, Section
from search.scalers import RULES, TORCH


def _has_curves(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(LOSS_CURVE))


def _curves_section(
    done: list[FrozenTrial],
    space: SpaceConfig,
    best: FrozenTrial | None,
    answer: FrozenTrial | None = None,
    scaler: str = TORCH,
) -> tuple[Section, dict[str, int | None]]:
    """The answer's run (when the verdict is a change) against the default's, and the worst finite run.

    When the verdict keeps the default (or nothing is safe), the best trial stands in for the answer,
    so the page still shows what the search could reach against the default.
    """
    rule = RULES[scaler]
    tag = rule.default_tag
    section = Section(
        "curves",
        SECTION_TITLES["curves"],
        f"Loss per optimizer step (top) and {rule.title}'s loss scale after each update (below, log axis) of"
        f" the answer's trial (when the verdict is a change; else the best trial), {rule.maker}'s default"
        f" ({tag}) and the worst trial that stayed finite, with each step's learning rate under them where a"
        " schedule moved it; x marks a skipped step (inf/NaN gradients).",
    )
    shown = showcase(done)
    default = shown.default
    worst = shown.worst_finite if shown.worst_finite is not None and _has_curves(shown.worst_finite) else None
    chosen: dict[str, int | None] = {
        "answer": answer.number if answer else None,
        "best": best.number if best else None,
        "default": default.number if default else None,
        "worst_finite": worst.number if worst else None,
    }
    lead = (f"answer #{answer.number}", answer) if answer is not None else None
    if lead is None and best is not None:
        lead = (f"best #{best.number}", best)
    named: list[tuple[str, FrozenTrial]] = []
    if lead is not None and _has_curves(lead[1]):
        named.append(lead)
    if default is not None and _has_curves(default):  # Shown even when it leads too: its label says so.
        named.append((f"{rule.default_label} #{default.number}", default))
    if worst is not None and all(worst.number != t.number for _, t in named):
        named.append((f"worst finite #{worst.number} ({worst.user_attrs.get(FAILURE, '-')})", worst))
    notes = []
    if default is None and tag not in {name for name, _params in baseline_trials(space, scaler)[0]}:
        notes.append(f"{rule.maker}'s default ({tag}) lies outside this study's search space (not run)")
    elif default is None:
        notes.append(f"{rule.maker}'s default ({tag}) has no complete trial yet")
    if worst is not None and lead is not None and worst.number == lead[1].number:
        notes.append(f"the worst finite trial is the {lead[0].split()[0]} one (a single finite trial)")
    if not named:
        section.message = "Not enough trials for this plot: no complete trial with stored curves yet."
        return section, chosen
    section.figure = curves_figure(named, space, title=" vs ".join(label for label, _ in named))
    section.figure.update_layout(height=650)
    if notes:
        section.message = "Note: " + "; ".join(notes) + "."
    return section, chosen


def _skipped_section(done: list[FrozenTrial], scaler: str = TORCH) -> tuple[Section, dict[str, int]]:
    section = Section(
        "skipped",
        SECTION_TITLES["skipped"],
        f"How many complete trials skipped how many optimizer steps ({RULES[scaler].title} skips a step whose"
        " gradients hold inf/NaN and backs the scale off as its rule says).",
    )
    counts = Counter(int(t.user_attrs.get(SKIPPED_STEPS) or 0) for t in done if SKIPPED_STEPS in t.user_attrs)
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
