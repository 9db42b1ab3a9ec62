"""Verifying a copy: the study read back from the destination against the snapshot it was written from."""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from search.storage._copy_snapshot import CopySnapshot


def _canon(value: Any) -> str:
    # JSON keeps int and float apart, and writes NaN as NaN so that NaN equals NaN.
    return json.dumps(value, sort_keys=True, default=repr)


def verify_copy(
    snapshot: CopySnapshot, remapped: dict[str, Any], dest: optuna.storages.RDBStorage, target: str
) -> list[str]:
    """Compares the copy read back with the snapshot; returns what differs (empty: equal)."""
    dest_id = dest.get_study_id_from_name(target)
    problems: list[str] = []
    if list(dest.get_study_directions(dest_id)) != list(snapshot.directions):
        problems.append("study directions differ")
    if _canon(dest.get_study_user_attrs(dest_id)) != _canon(snapshot.user_attrs):
        problems.append("study user attrs differ")
    wanted_system = {**snapshot.plain_system_attrs, **remapped}
    if _canon(dest.get_study_system_attrs(dest_id)) != _canon(wanted_system):
        problems.append("study system attrs differ")
    copied = {t.number: t for t in dest.get_all_trials(dest_id, deepcopy=False)}
    if len(copied) != len(snapshot.trials):
        problems.append(f"{len(copied)} trials in the copy, {len(snapshot.trials)} in the source")
    for trial in snapshot.trials:
        other = copied.get(trial.number)
        if other is None:
            problems.append(f"trial {trial.number} is missing")
            continue
        for what, a, b in (
            ("state", trial.state.name, other.state.name),
            ("params", trial.params, other.params),
            ("distributions", _distributions(trial), _distributions(other)),
            ("values", trial.values, other.values),
            ("user attrs", trial.user_attrs, other.user_attrs),
            ("system attrs", trial.system_attrs, other.system_attrs),
            ("intermediate values", trial.intermediate_values, other.intermediate_values),
        ):
            if _canon(a) != _canon(b):
                problems.append(f"trial {trial.number}: {what} differ")
    return problems


def _distributions(trial: FrozenTrial) -> dict[str, str]:
    return {k: optuna.distributions.distribution_to_json(d) for k, d in trial.distributions.items()}
