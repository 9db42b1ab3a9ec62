"""A picture of each trial's loss and scale curves, for optuna-dashboard's trial page.

optuna-dashboard 0.21 shows a trial's intermediate values (here: its loss per step) only as a list
of numbers, and its notes drop inline images (only http(s) links are allowed there). What its trial
page does preview is an *artifact* whose mimetype is ``image/*``: the file lives in an artifact store
the server is started with, and the artifact's record in the study's system attrs
(``dashboard:artifacts:<trial id>:<artifact id>``, where the dashboard's own uploads go).

So :func:`write_pictures` draws one small SVG per finished trial (loss on top, GradScaler's scale on a
log axis below, the learning rate under it where a schedule moved it, skipped steps marked in red; a few kB,
no plotting library) into a
:class:`~optuna.artifacts.FileSystemArtifactStore` and returns the records to store. It runs when
``search.dashboard`` publishes, not after every trial: nothing is drawn unless someone browses. The
artifact id is derived from the study and trial ids, so a second run finds the picture it made; a
picture whose file is missing (another host, a copied study) is drawn again under its recorded id.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict

import optuna
from optuna.artifacts import ArtifactMeta, FileSystemArtifactStore
from optuna.trial import FrozenTrial

from search.core import FIRST_STEP, LR_CURVE, SpaceConfig
from search.publishing._figures import trial_curves
from search.storage import TrialWriter, settings_of, storage_of, study_id_of, trial_id_of

FILENAME = "loss-and-scale.svg"
# optuna-dashboard's key for an artifact of a trial, in study system attrs. optuna.artifacts.upload_artifact
# stores a trial's record in its trial system attrs, which a finished trial refuses
# (UpdateFinishedTrialError),
# and the pictures are drawn after the trials finish; the dashboard reads both places alike.
_PREFIX = "dashboard:artifacts:"
_NAMESPACE = uuid.UUID("5f0c7a52-8d3e-4b8e-9a59-1d2f6c1e7b21")
_WIDTH, _PANEL, _LEFT, _RIGHT, _TOP, _GAP, _BOTTOM = 640, 150, 70, 16, 24, 40, 36


def _polyline(points: Sequence[tuple[float, float]], colour: str) -> str:
    if len(points) < 2:
        return ""
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'


def _panel(
    values: Sequence[float | None], top: float, steps: int, log: bool, skipped: Sequence[int], title: str
) -> list[str]:
    """One panel: a line per step, its y range labelled, skipped steps as red ticks."""
    finite = [
        (i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v) and (v > 0 or not log)
    ]
    parts = [f'<text x="{_LEFT}" y="{top - 6:.0f}" font-size="12">{html.escape(title)}</text>']
    parts.append(
        f'<rect x="{_LEFT}" y="{top}" width="{_WIDTH - _LEFT - _RIGHT}" height="{_PANEL}" fill="none"'
        ' stroke="#999"/>'
    )
    if not finite:
        parts.append(
            f'<text x="{_LEFT + 8}" y="{top + _PANEL / 2:.0f}" font-size="12">no finite values</text>'
        )
        return parts
    ys = [math.log2(v) if log else v for _, v in finite]
    low, high = min(ys), max(ys)
    labelled = [(high, 4), (low, 0)]
    if high - low < 1e-12:  # A constant: drawn mid-panel, labelled with its own value, not the padding.
        labelled = [(low, 4)]
        low, high = low - 1, high + 1
    span_x = max(1, steps - 1)

    def x_of(i: int) -> float:
        return _LEFT + (_WIDTH - _LEFT - _RIGHT) * i / span_x

    def y_of(y: float) -> float:
        return top + _PANEL - _PANEL * (y - low) / (high - low)

    parts.append(_polyline([(x_of(i), y_of(y)) for (i, _), y in zip(finite, ys)], "#1f77b4"))
    for i in skipped:
        parts.append(
            f'<line x1="{x_of(i):.1f}" y1="{top}" x2="{x_of(i):.1f}" y2="{top + 6}" stroke="#d62728"/>'
        )
    label = (lambda y: f"2^{y:.1f}") if log else (lambda y: f"{y:.4g}")
    for y, dy in labelled:
        parts.append(
            f'<text x="{_LEFT - 4}" y="{y_of(y) + dy:.0f}" font-size="11" text-anchor="end">{label(y)}</text>'
        )
    return parts


def curves_svg(trial: FrozenTrial, space: SpaceConfig) -> str:
    """The SVG of one trial: loss per optimizer step, the loss scale after each update(), and the learning
    rate of each step where a schedule moved it."""
    loss, scale, skipped = trial_curves(trial, space)
    rates = trial.user_attrs.get(LR_CURVE) or []
    panels = 3 if rates else 2
    steps = max(len(loss), len(scale))
    first = int(trial.user_attrs.get(FIRST_STEP, 0))  # A run from a checkpoint: the user's run's steps.
    height = _TOP + panels * _PANEL + (panels - 1) * _GAP + _BOTTOM
    head = (
        f"trial {trial.number}: {len(skipped)} of {steps} steps skipped" if steps else f"trial {trial.number}"
    )
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
            f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif">'
        ),
        f'<rect width="{_WIDTH}" height="{height}" fill="white"/>',
    ]
    parts += _panel(loss, _TOP, steps, False, skipped, f"{head} · loss per step")
    parts += _panel(scale, _TOP + _PANEL + _GAP, steps, True, skipped, "loss scale after update() (log2)")
    if rates:
        parts += _panel(rates, _TOP + 2 * (_PANEL + _GAP), steps, False, skipped, "learning rate of the step")
    bottom = _TOP + panels * _PANEL + (panels - 1) * _GAP
    parts.append(f'<text x="{_LEFT}" y="{bottom + 16}" font-size="11">{first + 1}</text>')
    right = f'x="{_WIDTH - _RIGHT}" y="{bottom + 16}" font-size="11" text-anchor="end"'
    parts.append(f"<text {right}>{first + steps}</text>")
    parts.append(
        f'<text x="{(_WIDTH + _LEFT) / 2:.0f}" y="{bottom + 28}" font-size="11" text-anchor="middle">'
        "optimizer step (red ticks: skipped)</text>"
    )
    parts.append("</svg>")
    return "\n".join(p for p in parts if p)


def _recorded(system_attrs: dict[str, object], trial_id: int) -> str | None:
    """The artifact id of this trial's picture, if a record of it is stored."""
    prefix = f"{_PREFIX}{trial_id}:"
    for key, value in system_attrs.items():
        if key.startswith(prefix) and isinstance(value, str):
            try:
                meta = json.loads(value)
            except ValueError:
                continue
            if isinstance(meta, dict) and meta.get("filename") == FILENAME:
                return key[len(prefix) :]
    return None


def write_pictures(
    study_id: int,
    trials: Sequence[FrozenTrial],
    space: SpaceConfig,
    directory: str,
    system_attrs: dict[str, object],
) -> tuple[dict[str, str], int]:
    """Draws the missing pictures of ``trials`` into ``directory`` (an artifact store).

    Args:
        study_id: The study's id in its storage (part of each artifact id).
        trials: The study's trials; finished ones with a loss curve get a picture.
        space: The study's search space (to read each trial's init_scale).
        directory: The artifact store's directory; created if missing.
        system_attrs: The study's system attrs as stored now.

    Returns:
        (the study system attrs to write, in one transaction with the rest of publishing;
        the number of pictures drawn).
    """
    os.makedirs(directory, exist_ok=True)
    store = FileSystemArtifactStore(directory)
    writes: dict[str, str] = {}
    drawn = 0
    for trial in trials:
        if not trial.state.is_finished() or not trial.intermediate_values:
            continue
        artifact_id = _recorded(system_attrs, trial_id_of(trial))
        if artifact_id is None:
            artifact_id = str(uuid.uuid5(_NAMESPACE, f"{study_id}:{trial_id_of(trial)}"))
            meta = ArtifactMeta(
                artifact_id=artifact_id, filename=FILENAME, mimetype="image/svg+xml", encoding=None
            )
            writes[f"{_PREFIX}{trial_id_of(trial)}:{artifact_id}"] = json.dumps(asdict(meta))
        elif os.path.exists(os.path.join(directory, artifact_id)):
            continue
        store.write(artifact_id, io.BytesIO(curves_svg(trial, space).encode()))
        drawn += 1
    return writes, drawn


def publish_pictures(study: optuna.Study, directory: str, trials: Sequence[FrozenTrial] | None = None) -> int:
    """Draws the study's missing trial pictures into ``directory`` and stores their records.

    The records are written in one transaction; ``trials`` saves reading the study again when the
    caller has them. Returns the number of pictures drawn.
    """
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    system_attrs = storage_of(study).get_study_system_attrs(study_id_of(study))
    writes, drawn = write_pictures(
        study_id_of(study), trials, settings_of(study).space, directory, system_attrs
    )
    if writes:
        TrialWriter(study).set_study_system_attrs(writes)
    return drawn
