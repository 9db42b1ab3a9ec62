"""Publishing a study to optuna-dashboard: curves, trial notes and the study note (no serving here).

What optuna-dashboard shows, through its own API (nothing is served by us):

* each trial's **loss curve**: the trial's intermediate values (written with the trial, in the
  same transaction, by the trial loop), plotted on the trial's page;
* each trial's **note** (``save_note``): its loss scale from start to end, the steps
  GradScaler skipped, its failure code; written only where the trial has no note yet, so a note
  a person edited in the dashboard is never overwritten;
* on the study page, plotly figures (``save_plotly_graph_object``, which takes a study, under fixed
  ids so that publishing again replaces them): the loss and loss-scale curves of the best trial,
  PyTorch's default (``seed-1``) and the worst finite trial together, skipped steps marked; and a
  trial explorer (a menu over trials, each showing its two curves);
* the study **note**: the baselines (``seed-1`` ... ``seed-5``, the original example's configurations,
  docs/fairness.md) next to the best.

:func:`publish` runs at the end of every ``search.optimize`` run and when ``search.dashboard`` starts, so
``optuna-dashboard sqlite:///study.db`` alone shows the same. Its storage cost is per run, not per
trial: study system attrs of a few kB per figure, one note per new trial, all written in one transaction.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import optuna
import plotly.graph_objects as go
import plotly.utils
from optuna.trial import FrozenTrial, TrialState

from search.core import BASELINE, SpaceConfig, baseline_of, showcase

# optuna-dashboard's own attrs (what save_note / save_plotly_graph_object store, attr for attr), written
# here in one transaction: the public functions commit each ~2 kB chunk on its own. A finished
# 100-trial study on SQLite: publishing with 100 new trial notes took 0.16-0.40 s this way against
# 2.27-2.40 s through the public functions (3.2-5.4 s against 5.1-9.5 s for all of
# `search.dashboard --publish-only`), and that publishing ends every search.optimize run.
from search.publishing._dashboard_attrs import figure_prefix, note_text_prefix, note_version_key, split_text
from search.publishing._figures import curves_figure, trial_curves
from search.results import format_summary, summarize, summarize_confirmation
from search.scalers import RULES, TORCH, format_scale
from search.storage import TrialWriter, mask_url, settings_of, storage_of, study_id_of, trial_id_of

CURVES_ID = "search-curves"
EXPLORER_ID = "search-explorer"
EXPLORER_MAX_TRIALS = 100  # Each trial adds ~1 kB to the study's system attrs, read on every page load.
OUR_NOTE_VERSION = "search:study_note_version"  # The study note version this module wrote last.


@dataclass(frozen=True)
class PublishReport:
    """What :func:`publish` wrote."""

    figures: tuple[str, ...]
    trial_notes: int
    study_note: bool


def _trial_note(trial: FrozenTrial, space: SpaceConfig) -> str:
    attrs = trial.user_attrs
    loss, scale, skipped = trial_curves(trial, space)
    value = f"{trial.value:.4f}" if trial.value is not None else "-"
    lines = [
        f"**Trial {trial.number}**"
        + (f" · baseline `{attrs[BASELINE]}`" if BASELINE in attrs else "")
        + f" · objective {value} · failure `{attrs.get('failure', '-')}` · learned"
        f" {attrs.get('learned', '-')}",
        "",
    ]
    # One short bullet each: optuna-dashboard's note box does not wrap a long paragraph, it scrolls.
    finite = [s for s in scale if s is not None and math.isfinite(s)]
    if finite:
        lines.append(
            f"- Loss scale: {format_scale(finite[0])} after step 1 → {format_scale(finite[-1])} at the end "
            f"(min {format_scale(min(finite))}, max {format_scale(max(finite))})."
        )
    if skipped:
        lines.append(
            f"- Skipped steps: **{len(skipped)} of {len(scale)}** (inf/NaN gradients), at"
            f" step{'s' if len(skipped) > 1 else ''} "
            + ", ".join(str(e + 1) for e in skipped[:12])
            + (" …" if len(skipped) > 12 else "")
            + "."
        )
    else:
        lines.append(f"- Skipped steps: none of {len(scale)}.")
    finite_loss = [v for v in loss if v is not None]
    if finite_loss:
        lines.append(f"- Loss: {finite_loss[0]:.4f} at step 1 → {finite_loss[-1]:.4f} at the end.")
    lines += [
        "",
        "- Loss per step: this trial's *intermediate values*.",
        (
            "- Loss and scale, skipped steps marked: the artifact `loss-and-scale.svg` (`search.dashboard`"
            " draws it)."
        ),
        "- Every trial's curves: the study's **trial explorer** figure.",
    ]
    return "\n".join(lines)


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.5g}")  # Keeps the figure's JSON small.


def _chunks(prefix: str, text: str, split: dict[str, str], system_attrs: dict[str, Any]) -> dict[str, str]:
    """optuna-dashboard's chunks of ``text`` under ``prefix``, and "" for stale chunks past its end.

    The same attrs as ``save_note`` / ``save_plotly_graph_object`` write one by one.
    """
    old = sum(1 for key in system_attrs if key.startswith(prefix))
    return {**split, **{f"{prefix}{i}": "" for i in range(len(split), old)}}


def _figure_attrs(graph_object_id: str, text: str, system_attrs: dict[str, Any]) -> dict[str, str]:
    prefix = figure_prefix(graph_object_id)
    return _chunks(prefix, text, split_text(text, prefix), system_attrs)


def _note_attrs(
    trial_id: int | None, version: int, body: str, system_attrs: dict[str, Any]
) -> dict[str, Any]:
    prefix = note_text_prefix(trial_id)
    return {
        note_version_key(trial_id): version,
        **_chunks(prefix, body, split_text(body, prefix), system_attrs),
    }


def _study_note(data: dict[str, Any]) -> str:
    rule = RULES[data.get("scaler", TORCH)]
    about = f"{rule.baselines_about}; " if rule.baselines_about else ""
    return (
        f"## {rule.title}: the baselines vs the best\n\n{rule.title}'s baselines ({about}{rule.default_tag}"
        f" is {rule.maker}'s default), re-measured in this study, next to the best trial. Written by"
        " `search.optimize`/`search.dashboard`; figures are under *Graphs* on this page.\n\n```\n"
        + format_summary(data)
        + "\n```\n"
    )


def _note_is_ours(system_attrs: dict[str, Any]) -> bool:
    """Whether the study note is still the one we wrote (or none): once a person edits it in the dashboard
    (its version moves on from ours), it is left alone."""
    return system_attrs.get(note_version_key(None), 0) in (0, system_attrs.get(OUR_NOTE_VERSION))


def _study_note_attrs(data: dict[str, Any], system_attrs: dict[str, Any]) -> dict[str, Any]:
    """The attrs that write the study note of ``data`` (none where :func:`_note_is_ours` says no)."""
    if not _note_is_ours(system_attrs):
        return {}
    version = system_attrs.get(note_version_key(None), 0)
    return {**_note_attrs(None, version + 1, _study_note(data), system_attrs), OUR_NOTE_VERSION: version + 1}


def publish_study_note(study: optuna.Study, summary: dict[str, Any]) -> bool:
    """Writes the study note of ``summary`` alone (after :func:`publish`, once a run adds to its summary what
    it measured later: the run length); whether it was written (not where a person has edited it)."""
    system_attrs = storage_of(study).get_study_system_attrs(study_id_of(study))
    writes = _study_note_attrs(summary, system_attrs)
    if writes:
        TrialWriter(study).set_study_system_attrs(writes)
    return bool(writes)


def _named_trials(trials: list[FrozenTrial]) -> list[tuple[str, FrozenTrial]]:
    """Best, the default (seed-1, or the framework's) and the worst finite trial (each once)."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if not complete:
        return []
    named: list[tuple[str, FrozenTrial]] = []
    shown = showcase(complete)
    best, default, worst = shown.best, shown.default, shown.worst_finite
    assert best is not None
    tag = None if default is None else baseline_of(default)
    if tag is not None and not tag.endswith(
        "-default"
    ):  # "seed-1 default"; a framework's is "deepspeed-default"
        tag += " default"
    if default is not None and default.number == best.number:
        named.append((f"best = {tag} (#{best.number})", best))
    else:
        named.append((f"best (#{best.number})", best))
        if default is not None:
            named.append((f"{tag} (#{default.number})", default))
    if worst is not None and worst.number not in {t.number for _, t in named}:
        named.append((f"worst finite (#{worst.number})", worst))
    return named


def explorer_figure(trials: list[FrozenTrial], space: SpaceConfig) -> go.Figure:
    """Loss and scale curves of one trial at a time, chosen from a menu (best first).

    The menu's buttons carry each trial's data (``restyle``), so the figure grows linearly with
    the trials; beyond :data:`EXPLORER_MAX_TRIALS` only the best ones (and the baselines) are in it.
    """
    figure, layout = _explorer_parts(trials, space)
    figure.update_layout(**layout)
    return figure


def explorer_json(trials: list[FrozenTrial], space: SpaceConfig) -> str:
    """:func:`explorer_figure` as plotly JSON, built without plotly validating every button.

    Validation deep-copies each button's data: ~1.5 ms a trial, paid at the end of every run.
    The buttons are plain lists of numbers and strings, so there is nothing for it to check.
    """
    figure, layout = _explorer_parts(trials, space)
    data = figure.to_plotly_json()
    for key, value in layout.items():
        old = data["layout"].get(key)
        data["layout"][key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
    return json.dumps(
        data, cls=plotly.utils.PlotlyJSONEncoder, separators=(",", ":")
    )  # Compact, as plotly writes.


def _explorer_parts(trials: list[FrozenTrial], space: SpaceConfig) -> tuple[go.Figure, dict[str, Any]]:
    """The explorer's figure without its menu, and the layout that adds the menu."""
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    complete.sort(key=lambda t: (t.value, t.number))
    baselines = [t for t in complete if baseline_of(t) is not None]
    chosen = complete[:EXPLORER_MAX_TRIALS]
    chosen += [t for t in baselines if t not in chosen]
    figure = curves_figure(_named_trials(trials)[:1], space, title="Trial explorer: pick a trial")
    # Four traces from curves_figure: loss, scale, skipped on loss, skipped on scale.
    while len(figure.data) < 4:
        figure.add_trace(go.Scatter(x=[], y=[], mode="markers", marker={"symbol": "x", "size": 9}))
    figure.data[2].update(xaxis="x", yaxis="y")
    figure.data[3].update(xaxis="x2", yaxis="y2")
    buttons = []
    for t in chosen:
        loss, scale, skipped = trial_curves(t, space)
        loss = [_round(v) for v in loss]
        steps = list(range(1, len(loss) + 1))
        tag = f" {baseline_of(t)}" if baseline_of(t) is not None else ""
        label = f"#{t.number}{tag}: {t.value:.4f}, {len(skipped)} skipped"
        buttons.append(
            {
                "label": label,
                "method": "restyle",
                "args": [
                    {
                        "x": [steps, steps, [e + 1 for e in skipped], [e + 1 for e in skipped]],
                        "y": [
                            loss,
                            scale,
                            [loss[e] if e < len(loss) else None for e in skipped],
                            [scale[e] if e < len(scale) else None for e in skipped],
                        ],
                        "name": [f"#{t.number} loss", f"#{t.number} scale", "skipped", "skipped"],
                    },
                    [0, 1, 2, 3],
                ],
            }
        )
    # The menu sits in the right margin, above the legend: above the plots it covered the figure's
    # and the loss plot's titles (on the dashboard's graph width, its label is as wide as they are).
    layout = {
        "updatemenus": [
            {
                "buttons": buttons,
                "direction": "down",
                "x": 1.02,
                "xanchor": "left",
                "y": 1.0,
                "yanchor": "top",
            }
        ],
        "legend": {"x": 1.02, "xanchor": "left", "y": 0.88, "yanchor": "top"},
        "margin": {"r": 240},
        "showlegend": True,
    }
    return figure, layout


def publish(
    study: optuna.Study,
    trials: list[FrozenTrial] | None = None,
    summary: dict[str, Any] | None = None,
    storage_url: str | None = None,
) -> PublishReport:
    """Writes the figures and notes described in the module docstring to ``study``.

    Everything is written in one transaction (one per attr would be a hundred for the figures).

    Args:
        study: The study.
        trials: Its trials, when the caller has read them already (read here otherwise).
        summary: :func:`search.results._summary.summarize` of the study, for the study note (computed here
            otherwise, with its confirmation runs, as search.optimize's summary is).
        storage_url: The storage's URL, for the commands the study note gives (password masked);
            only used when ``summary`` is computed here.
    """
    settings = settings_of(study)
    space, scaler = settings.space, settings.run.scaler
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    named = _named_trials(trials)
    system_attrs = storage_of(study).get_study_system_attrs(study_id_of(study))
    writes: dict[str, Any] = {}
    figures: list[str] = []
    if named:
        default = f"{RULES[scaler].title}'s default"
        curves = curves_figure(named, space, title=f"Best vs {default} vs the worst finite trial")
        writes.update(_figure_attrs(CURVES_ID, curves.to_json(), system_attrs))
        writes.update(_figure_attrs(EXPLORER_ID, explorer_json(trials, space), system_attrs))
        figures += [CURVES_ID, EXPLORER_ID]
    notes = 0
    for t in trials:
        if t.state.is_finished() and note_version_key(trial_id_of(t)) not in system_attrs:
            writes.update(_note_attrs(trial_id_of(t), 1, _trial_note(t, space), system_attrs))
            notes += 1
    wrote_study_note = False
    if named and _note_is_ours(system_attrs):
        data = summary
        if data is None:
            data = summarize(
                study, space, summarize_confirmation(storage_of(study), study.study_name), trials
            )
            if storage_url is not None:
                data["storage"] = mask_url(storage_url)
        note = _study_note_attrs(data, system_attrs)
        writes.update(note)
        wrote_study_note = bool(note)
    TrialWriter(study).set_study_system_attrs(writes)
    return PublishReport(tuple(figures), notes, wrote_study_note)
