"""What a confirmation still has to run: the study checked, the candidates chosen, the runs already stored
left out.

``python -m search.confirm`` validates everything before anything is written: the study was
created by ``search.optimize`` and has COMPLETE trials, its sibling ``<study>.confirm`` (if any) was
written for it with the same epochs and, when runs are missing, on the same device kind (one
comparison must not mix devices). A (configuration, seed) pair already stored is never run again,
so an interrupted confirmation resumes and a larger ``--top``/``--seeds`` adds only what is missing.
The first seed's task is built here too, so a task that cannot be built is bad input (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import DATA_SEED, RECORDED_DIAGNOSIS, SOURCE_TRIAL, Settings, UsageError, baseline_of
from search.diagnosis import not_a_search
from search.results import (
    Candidate,
    confirm_study_name,
    confirmation_seeds,
    select_candidates,
)
from search.results import config_key as _config_key
from search.storage import choose_study, settings_of
from search.tasks import TaskError, resolve_task

if TYPE_CHECKING:
    import torch

    from search.tasks import Problem


class ConfirmError(UsageError):
    """Bad input: nothing was written. The message is one line."""


@dataclass
class ConfirmationPlan:
    """Everything validated before anything is written."""

    storage: optuna.storages.RDBStorage
    study_name: str
    n_complete: int
    settings: Settings
    seeds: list[int]
    candidates: list[Candidate]
    notes: list[str]
    device: torch.device
    pending: dict[int, list[Candidate]]  # seed -> configurations not run on it yet
    first_problem: Problem | None
    baselines: dict[int, str]
    trials: list[FrozenTrial] = field(default_factory=list)


def plan_confirmation(
    storage: optuna.storages.RDBStorage,
    url: str,
    study_name: str | None,
    *,
    top: int,
    n_seeds: int,
    device: torch.device,
    tolerance: float,
) -> ConfirmationPlan:
    """Checks the study and its sibling in ``storage`` and plans the runs still missing.

    Args:
        storage: The storage, opened to write (the sibling study is written there).
        url: Its URL (messages name it, passwords masked).
        study_name: The search study; None picks the storage's only search study.
        top: How many of the best distinct configurations to confirm.
        n_seeds: The data/initialisation seeds: study seed + 1 ... + ``n_seeds``.
        device: Where the runs will train.
        tolerance: Good: objective within this fraction of the best (picks the recommendation).

    Raises:
        ConfirmError: Bad input; nothing was written.
    """
    name = choose_study(storage, url, study_name)
    study = optuna.load_study(storage=storage, study_name=name)
    if "task" not in study.user_attrs:
        raise ConfirmError(not_a_search(name, study.user_attrs.get(RECORDED_DIAGNOSIS)))
    settings = settings_of(study)
    trials = study.get_trials(deepcopy=False)
    n_complete = sum(t.state == TrialState.COMPLETE for t in trials)
    if n_complete == 0:
        raise ConfirmError(f"study {name!r} has no COMPLETE trials to confirm")
    candidates, notes = select_candidates(trials, settings, top, tolerance)
    baselines = {t.number: tag for t in trials if (tag := baseline_of(t)) is not None}
    seeds = confirmation_seeds(settings.run.seed, n_seeds)

    sibling_name = confirm_study_name(name)
    done: set[tuple[str, int]] = set()
    try:
        sibling_id = storage.get_study_id_from_name(sibling_name)
    except KeyError:
        sibling_id = None
    if sibling_id is not None:
        attrs = storage.get_study_user_attrs(sibling_id)
        if attrs.get("source_study") != name:
            raise ConfirmError(
                f"study {sibling_name!r} exists but was not created by search.confirm for {name!r}"
            )
        if attrs.get("epochs") != settings.run.epochs:
            raise ConfirmError(
                f"the runs in {sibling_name!r} used {attrs.get('epochs')} epochs, the study now records "
                f"{settings.run.epochs}; delete {sibling_name!r} to confirm again"
            )
        for t in storage.get_all_trials(sibling_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            seed = t.user_attrs.get(DATA_SEED)
            if seed is not None:
                done.add((_config_key(t.user_attrs.get(SOURCE_TRIAL), t.params), int(seed)))
        kind = attrs.get("device")
        pending_any = any((c.key, s) not in done for s in seeds for c in candidates)
        if pending_any and kind is not None and kind != device.type:
            raise ConfirmError(
                f"the runs in {sibling_name!r} were made on {kind}; this run would use {device.type}, "
                f"and one comparison must not mix devices (pass --device {kind})"
            )
    pending = {s: [c for c in candidates if (c.key, s) not in done] for s in seeds}
    pending = {s: cs for s, cs in pending.items() if cs}

    first_problem = None
    if pending:
        try:
            task = resolve_task(settings.run.task)
            from search.tasks import build_problem  # torch: only once the input is known to be good.

            first_problem = build_problem(
                task, settings.run.task, next(iter(pending)), settings.run.checkpoint
            )
        except TaskError as e:
            raise ConfirmError(str(e))
    return ConfirmationPlan(
        storage,
        name,
        n_complete,
        settings,
        seeds,
        candidates,
        notes,
        device,
        pending,
        first_problem,
        baselines,
        list(trials),
    )
