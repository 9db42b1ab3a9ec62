"""The snapshot of a study to copy: one read of the source, as the copy will write it.

:func:`search.storage._copy.transfer_study` reads the source once, into a :class:`CopySnapshot`,
and writes and verifies that snapshot, so a source that is still running gives a consistent copy.
The read turns a RUNNING trial into FAIL with :data:`RUNNING_FAIL_REASON` (a RUNNING trial in the
copy would have no worker and no heartbeat, so it would never finish there), gives the one-value
distributions of old corner runs the study's log flags (Optuna refuses mixed flags), and sets apart
the study system attrs keyed by trial id, which :func:`remap_id_keys` re-keys to the copy's new ids.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from search.core import FAIL_REASON

RUNNING_FAIL_REASON = (
    "was RUNNING in the source when search.transfer copied the study; a copy cannot finish it"
)

# Study system attrs whose key holds a trial id (group 1): optuna-dashboard 0.21's notes
# (optuna_dashboard/_note.py), legacy artifact records (artifact/_backend.py) and preferential
# skips (preferential/_system_attrs.py).
_DASHBOARD_ID_KEYS = (
    re.compile(r"^dashboard:(\d+):note_(?:ver|str:\d+)$"),
    re.compile(r"^dashboard:artifacts:(\d+):.+$"),
    re.compile(r"^preference:skip_trial:(\d+)$"),
)
# Optuna's GA samplers (NSGA-II/III) cache a generation's parents as a list of trial ids.
SAMPLER_ID_LIST_KEY = re.compile(r"^[A-Za-z_]\w*:parent:\d+$")
_ARTIFACT_PREFIXES = ("artifacts:", "dashboard:artifacts:")


@dataclass(frozen=True)
class CopySnapshot:
    """One read of the source study, RUNNING trials already turned into FAIL."""

    directions: list[StudyDirection]
    user_attrs: dict[str, Any]
    plain_system_attrs: dict[str, Any]  # Copied as they are.
    id_keyed_system_attrs: dict[str, Any]  # Re-keyed after the copy.
    trials: list[FrozenTrial]
    running_converted: tuple[int, ...]
    aligned: tuple[int, ...] = ()  # Trials whose one-value distributions took the study's log flag.


def read_snapshot(source: optuna.storages.RDBStorage, name: str) -> CopySnapshot:
    """Reads study ``name`` of ``source`` once; the copy writes and verifies what this returns."""
    study_id = source.get_study_id_from_name(name)
    directions = source.get_study_directions(study_id)
    user_attrs = source.get_study_user_attrs(study_id)
    system_attrs = source.get_study_system_attrs(study_id)
    trials = sorted(source.get_all_trials(study_id, deepcopy=True), key=lambda t: t.number)
    now = datetime.datetime.now()
    converted = []
    for trial in trials:
        if trial.state == TrialState.RUNNING:
            trial.state = TrialState.FAIL
            trial.user_attrs = {**trial.user_attrs, FAIL_REASON: RUNNING_FAIL_REASON}
            trial.datetime_complete = now
            converted.append(trial.number)
    plain = {k: v for k, v in system_attrs.items() if not _is_id_keyed(k, v)}
    keyed = {k: v for k, v in system_attrs.items() if _is_id_keyed(k, v)}
    return CopySnapshot(
        directions, user_attrs, plain, keyed, trials, tuple(converted), _align_point_distributions(trials)
    )


def _align_point_distributions(trials: list[FrozenTrial]) -> tuple[int, ...]:
    """Gives one-value distributions (low == high) the log flag of the study's others; returns the trials
    changed.

    Optuna refuses a parameter whose log flag differs between trials of a study, and
    ``optuna.copy_study`` with it; corner runs stored by older versions of search.confirm have one-value
    distributions without the flag. A range of one value has no scale, so the flag says nothing there.
    """
    reference: dict[str, Any] = {}
    for trial in trials:
        for name, dist in trial.distributions.items():
            if name not in reference or (_one_value(reference[name]) and not _one_value(dist)):
                reference[name] = dist
    changed = []
    for trial in trials:
        dists = dict(trial.distributions)
        for name, dist in dists.items():
            ref = reference[name]
            if _one_value(dist) and type(dist) is type(ref) and dist.log != ref.log:
                dists[name] = type(dist)(dist.low, dist.high, log=ref.log)
        if dists != trial.distributions:
            trial.distributions = dists
            changed.append(trial.number)
    return tuple(changed)


def _one_value(dist: Any) -> bool:
    return isinstance(dist, (FloatDistribution, IntDistribution)) and dist.low == dist.high


def _is_id_keyed(key: str, value: Any) -> bool:
    if any(pattern.match(key) for pattern in _DASHBOARD_ID_KEYS):
        return True
    return (
        bool(SAMPLER_ID_LIST_KEY.match(key))
        and isinstance(value, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def remap_id_keys(attrs: dict[str, Any], id_map: dict[int, int]) -> tuple[dict[str, Any], list[str]]:
    """Re-keys trial-id keyed study system attrs with ``id_map`` (old trial id -> new)."""
    remapped: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in attrs.items():
        if SAMPLER_ID_LIST_KEY.match(key):
            if all(v in id_map for v in value):
                remapped[key] = [id_map[v] for v in value]
            else:
                dropped.append(key)  # A cache: the sampler recomputes it when missing.
            continue
        match = next(m for m in (p.match(key) for p in _DASHBOARD_ID_KEYS) if m)
        old = int(match.group(1))
        if old not in id_map:
            dropped.append(key)
            continue
        remapped[key[: match.start(1)] + str(id_map[old]) + key[match.end(1) :]] = value
    return remapped, dropped


def count_artifacts(snapshot: CopySnapshot) -> int:
    """Artifact records in the snapshot: their files live in the artifact store, not in the copy."""
    keys = [*snapshot.plain_system_attrs, *snapshot.id_keyed_system_attrs]
    keys += [k for t in snapshot.trials for k in t.system_attrs]
    return sum(1 for k in keys if k.startswith(_ARTIFACT_PREFIXES))
