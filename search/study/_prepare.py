"""Creating or resuming the study: recorded settings, compatibility, the baselines."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from search.core import (
    AS_RUN_BASELINE,
    BASELINE,
    DIAGNOSIS_BASELINE,
    STUDY_DIAGNOSIS,
    IncompatibleStudyError,
    PenaltyConfig,
    Settings,
    as_run_trial,
    baseline_trials,
    diagnosis_trial,
    own_space,
    waiting_baseline,
)
from search.diagnosis import DiagnosedRun, diagnosis_conflict, setting_text
from search.scalers import RULES, TORCH, RuleSetting, ScalerConfig
from search.storage import TrialWriter, with_retry

# Study user attrs that define what the trials measure; a resume must match them.
RECORDED_KEYS = (
    "task", "epochs", "steps", "seed", "amp_dtype", "scaler", "space", "penalty", "fingerprint", "measurement"
)  # fmt: skip
# How a trial's numbers are measured. A study without the attr was measured with version 1:
# skips counted from drops of the scale curve (which started at the float64 init_scale, so
# float32 rounding counted as a skip), zero gradients counted after clipping, and the objective
# on the last step's training loss. Version 2: skips are GradScaler's found_inf, zeros are
# counted before clipping on unskipped steps, the objective is the evaluation loss
# (search.training._evaluation). Trials of two versions are not comparable, so a resume must match.
MEASUREMENT_VERSION = 2


@dataclass(frozen=True)
class StudyHandle:
    """An opened study and what opening it found."""

    study: optuna.Study
    notes: tuple[str, ...]


def recorded_settings(settings: Settings, fingerprint: str) -> dict[str, Any]:
    """The study user attrs written at creation."""
    data = settings.to_dict()
    scaler = settings.run.scaler
    # The space of the study's own rule only: GradScaler's four settings as always, or the framework's knobs.
    space = own_space(data["space"], scaler)
    return {  # "measurement" first: a study that has "task" has it too (the attrs are set in order).
        "measurement": MEASUREMENT_VERSION,
        "task": settings.run.task,
        "epochs": settings.run.epochs,
        "steps": settings.run.steps,
        "seed": settings.run.seed,
        "amp_dtype": settings.run.amp_dtype,
        "scaler": scaler,
        "space": space,
        "penalty": data["penalty"],
        "fingerprint": fingerprint,
        # Only where there is one: a study from the initial weights keeps the attrs it always had.
        **({"checkpoint": settings.run.checkpoint} if settings.run.checkpoint else {}),
    }


def _differences(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    diffs = []
    # A study recorded before a penalty key existed was measured with that key's default.
    stored, wanted = _with_penalty_defaults(stored), _with_penalty_defaults(wanted)
    for key in RECORDED_KEYS:
        if key in stored and _canon(stored[key]) != _canon(wanted[key]):
            if key == "fingerprint":
                if any(k in stored and _canon(stored[k]) != _canon(wanted[k]) for k in ("task", "seed")):
                    continue  # Another task or seed builds other data and weights: that line says it.
                if stored.get("checkpoint", "") != wanted.get("checkpoint", ""):
                    diffs.append(
                        f"checkpoint: study has {stored.get('checkpoint') or 'none'}, this run"
                        f" {wanted.get('checkpoint') or 'none'}"
                    )
                    continue
                diffs.append("the task's data/initial weights differ (another torch build?)")
            else:
                diffs += _leaf_differences(key, stored[key], wanted[key])
    return diffs


def _with_penalty_defaults(recorded: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(recorded.get("penalty"), dict):
        return recorded
    return {**recorded, "penalty": {**asdict(PenaltyConfig()), **recorded["penalty"]}}


_UNSET = object()


def _leaf_differences(where: str, stored: Any, wanted: Any) -> list[str]:
    """``space.growth_interval.low: study has 1, this run 10``: the settings that differ, not two whole
    tables."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        out = []
        for key in sorted(set(stored) | set(wanted)):
            a, b = stored.get(key, _UNSET), wanted.get(key, _UNSET)
            if a is _UNSET or b is _UNSET or _canon(a) != _canon(b):
                out += _leaf_differences(f"{where}.{key}", a, b)
        return out

    def text(value: Any) -> str:
        return "(unset)" if value is _UNSET else _short(value)

    return [f"{where}: study has {text(stored)}, this run {text(wanted)}"]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=float)


def _short(value: Any) -> str:
    text = _canon(value)
    return text if len(text) <= 80 else text[:77] + "..."


def inspect_study(
    storage: optuna.storages.BaseStorage,
    settings: Settings,
    fingerprint: str,
    allow_changes: bool,
    steps: int | None = None,
    from_diagnosis: bool = False,
) -> list[str]:
    """Checks, without writing anything, that the study (if any) can be resumed.

    ``from_diagnosis``: this run's space was narrowed by ``--from-diagnosis`` (a study searched from a
    diagnosis and resumed without it is told to add it).

    ``steps``: this run's steps per trial, to check a diagnosis ``search.diagnose --storage`` recorded in the
    study against (:mod:`search.diagnosis._recorded_diagnosis`); None: not checked.

    Returns:
        Warnings for the user (empty when the study is new or matches).

    Raises:
        IncompatibleStudyError: When a recorded setting differs and ``allow_changes`` is False,
            or the study was not made by this service.
    """
    name = settings.study_name
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return []
    stored = storage.get_study_user_attrs(study_id)
    if steps is not None:
        run = settings.run
        this = DiagnosedRun(run.task, run.seed, run.scaler, steps, fingerprint, run.amp_dtype)
        conflict = diagnosis_conflict(name, stored, this)
        if conflict:  # Not overridable: the study would hold two stories.
            raise IncompatibleStudyError(conflict)
    if "task" not in stored:
        if storage.get_all_trials(study_id, deepcopy=False):
            raise IncompatibleStudyError(
                f"study {name!r} exists but was not created by search.optimize; choose another --study-name"
            )
        return []  # An interrupted creation, or a study search.diagnose made: finish setting it up.
    version = stored.get("measurement", 1)
    if version != MEASUREMENT_VERSION:  # Not overridable: the old trials' numbers mean something else.
        raise IncompatibleStudyError(
            f"cannot resume study {name!r}: its trials were measured with definition v{version} "
            f"(skip counts, zero gradients, objective), this version measures v{MEASUREMENT_VERSION}; "
            "the two are not comparable: use another --study-name"
        )
    recorded_rule = stored.get("scaler", TORCH)
    if recorded_rule != settings.run.scaler:  # Not overridable: trials of two rules are not one search.
        raise IncompatibleStudyError(
            f"cannot resume study {name!r}: scaler: study has {recorded_rule}, this run {settings.run.scaler}"
            " (trials of two loss-scale rules are not comparable; use another --study-name, or --scaler"
            f" {recorded_rule})"
        )
    diffs = _differences(stored, recorded_settings(settings, fingerprint))
    if not diffs:
        return []
    if not allow_changes:
        started = stored.get(STUDY_DIAGNOSIS)
        if isinstance(started, dict) and not from_diagnosis and any(d.startswith("space.") for d in diffs):
            flag = "--from-diagnosis" + (f" {started['file']}" if started.get("file") else "")
            hint = (
                f"its search started from a diagnosis: add {flag} as when it began; or use another"
                " --study-name"
            )
        else:
            hint = "use another --study-name, or --allow-changed-settings"
        raise IncompatibleStudyError(f"cannot resume study {name!r}: " + "; ".join(diffs) + f" ({hint})")
    return [f"resuming {name!r} with changed settings: " + "; ".join(diffs)]


def prepare_study(
    storage: optuna.storages.BaseStorage,
    settings: Settings,
    fingerprint: str,
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
    attrs: dict[str, Any] | None = None,
    as_run: ScalerConfig | RuleSetting | None = None,
    as_run_assumed: str = "",
) -> StudyHandle:
    """Creates the study (recording settings and ``attrs``, enqueuing the baselines once) or loads it.

    ``as_run``: the setting the study's checkpoint saved (its scale as the rule's start), trained as
    baseline ``as-run`` with that scaler continued; None where there is none. ``as_run_assumed``: the words
    that say which of its knobs the checkpoint did not hold (:meth:`~search.tasks.StartState.scaler_assumed`).
    """
    name = settings.study_name
    try:
        study = optuna.create_study(
            storage=storage, study_name=name, direction="minimize", sampler=sampler, pruner=pruner
        )
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(storage=storage, study_name=name, sampler=sampler, pruner=pruner)
    notes: list[str] = []
    if "task" not in study.user_attrs:  # All in one transaction: a study that has "task" has the rest.
        TrialWriter(study).set_study_user_attrs({**(attrs or {}), **recorded_settings(settings, fingerprint)})
    notes += _enqueue_missing_baselines(study, settings, as_run, as_run_assumed)
    return StudyHandle(study, tuple(notes))


def _enqueue_missing_baselines(
    study: optuna.Study,
    settings: Settings,
    as_run: ScalerConfig | RuleSetting | None = None,
    as_run_assumed: str = "",
) -> list[str]:
    """Enqueues each baseline (``seed-1`` ..., or the rule's default) that has no finished, waiting or running
    trial yet, and in a study searched from a diagnosis (user attr ``diagnosis``) the setting it suggests,
    baseline ``diagnosis``.

    On a new study that is all of them; on a resume only one whose earlier attempt failed
    (e.g. it was interrupted), so a baseline never appears twice among finished trials. The
    check and the enqueue are one locked transaction, so processes on several hosts that start
    at the same second enqueue each baseline once between them.
    """
    baselines, notes = baseline_trials(settings.space, settings.run.scaler)
    started = study.user_attrs.get(STUDY_DIAGNOSIS)
    suggested_setting = started.get("suggested_setting") if isinstance(started, dict) else None
    # A diagnosis suggests a GradScaler setting: a study of a rule with other knobs has no place for it.
    if suggested_setting and set(suggested_setting) == set(RULES[settings.run.scaler].names):
        suggested, left_out = diagnosis_trial(
            suggested_setting, settings.space, baselines, settings.run.scaler
        )
        baselines, notes = baselines + suggested, notes + left_out
    if as_run is not None and as_run.rule == settings.run.scaler:  # A saved scaler of the study's own rule.
        kept, left_out = as_run_trial(dict(as_run.values), settings.space, settings.run.scaler)
        baselines, notes = baselines + kept, notes + left_out
    elif as_run is not None:
        notes.append(
            f"baseline {AS_RUN_BASELINE} not trained: the checkpoint saved {RULES[as_run.rule].title}'s"
            f" state, and this study follows {RULES[settings.run.scaler].title}'s rule"
        )
    waiting = [waiting_baseline(tag, params) for tag, params in baselines]
    added = with_retry(
        lambda: TrialWriter(study).enqueue_once(waiting, BASELINE),
        what="enqueuing baselines",
        budget=settings.run.storage_retry,
    )
    if any(t.user_attrs.get(BASELINE) == AS_RUN_BASELINE for t in added):
        notes.append(
            f"baseline {AS_RUN_BASELINE}: the run as it was at the checkpoint, its scaler continued from"
            f" {setting_text(dict(as_run.values))}, beside the default started afresh"
            + (f"; {as_run_assumed}" if as_run_assumed else "")
        )
    if any(t.user_attrs.get(BASELINE) == DIAGNOSIS_BASELINE for t in added):
        notes.append(
            f"baseline {DIAGNOSIS_BASELINE}: the setting the diagnosis suggests, "
            f"{setting_text(started['suggested_setting'])}, trained before the sampled trials"
        )
    return notes
