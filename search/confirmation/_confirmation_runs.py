"""Confirmation runs: the candidates trained on new seeds, the corners of the ranges safe together, stored
apart.

Every configuration is trained on every new seed (seed ``s`` builds the study's task with new data
and new initial weights) with the study's recorded epochs, autocast dtype and penalty, through
:func:`search.training.run_trial`, so each value is the search's own objective. All
configurations on one seed share that seed's data and weights (common random numbers), so the
comparison with the default is paired by seed (:mod:`search.results._confirmations`).

The runs are stored apart from the search, in a sibling study ``<study>.confirm`` of the same
storage (direction minimize), so the search's sampler and best value never see them: one COMPLETE
trial per (configuration, seed) with the configuration's params and distributions, the objective
as value, user attrs ``config`` (e.g. ``best-1 (#78)``, ``seed-1 (default)``), ``source_trial``,
``data_seed`` and everything :func:`run_trial` records, and the loss curve as intermediate values.
The sibling's user attrs record ``source_study``, ``seeds``, ``top``, ``epochs``, ``device`` (the
device kind of its runs) and ``configs``; ``seeds`` and ``configs`` are those of the latest
confirmation, which is what :func:`search.results.summarize_confirmation` reports. Each run is
written finished, with its curve, in one transaction (:class:`search.storage.TrialWriter`), so
nothing is ever left RUNNING.

Then the corners of the ranges that may be safe together (:func:`search.results.check_boxes`) are
trained on the search's own data, box by box until one has no failing corner, and stored in the
same sibling study with user attrs ``check`` = ``"corner"`` and ``point``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import optuna
import torch
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState
from tqdm import tqdm

from search.confirmation._confirmation_plan import ConfirmationPlan
from search.core import (
    CHECK,
    CONFIG,
    CORNER,
    DATA_SEED,
    FAILURE,
    NONFINITE,
    POINT,
    SOURCE_TRIAL,
    Settings,
    device_label,
    distributions,
    interrupts_as_exceptions,
    setting_of,
)
from search.results import (
    answer_form,
    box_corners,
    check_boxes,
    collect_runs,
    confirm_study_name,
    confirmation_data,
    recommend,
)
from search.scalers import ScalerConfig
from search.storage import TrialWriter
from search.tasks import Problem, TaskError, build_problem, resolve_task
from search.training import TrialOutcome, run_steps, run_trial


@dataclass(frozen=True)
class ConfirmationRuns:
    """What one :func:`run_confirmation` did.

    Attributes:
        made: Runs trained and stored by this call (configurations on seeds, and corners).
        seconds: Wall-clock time of the training and writing.
        study_name: The sibling study they are stored in (``<study>.confirm``).
    """

    made: int
    seconds: float
    study_name: str


def run_confirmation(
    plan: ConfirmationPlan, *, top: int, corners: bool, tolerance: float, quiet: bool
) -> ConfirmationRuns:
    """Trains the plan's missing runs, then (``corners``) the corners to check, into ``<study>.confirm``.

    A (configuration, seed) pair already stored is never run again (the plan left it out), so an
    interrupted confirmation resumes where it stopped; each run is written once it has trained.

    Args:
        plan: What :func:`search.confirmation.plan_confirmation` found still to run.
        top: The ``--top`` asked, recorded in the sibling study.
        corners: Train the corners of the ranges that may be safe together (GradScaler studies: a framework
            study's answer is one setting, with no ranges).
        tolerance: Good: objective within this fraction of the best (picks the ranges to check).
        quiet: No progress bar.

    Raises:
        search.core.Interrupted: SIGINT/SIGTERM; the runs finished so far are stored.
        search.tasks.TaskError: The task called ``sys.exit``.
    """
    settings = plan.settings
    sibling = _open_sibling(plan, top)
    writer = TrialWriter(sibling)  # A run with its curve in one transaction, not one per step.
    label = device_label(plan.device)
    amp_dtype = getattr(torch, settings.run.amp_dtype)
    n_runs = sum(len(cs) for cs in plan.pending.values())
    bar = tqdm(
        total=n_runs,
        desc=sibling.study_name,
        unit="run",
        disable=quiet or n_runs == 0,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    start = time.perf_counter()
    done = 0
    # Every signal raises; the trial loop lets only the first one through, to protect the write of
    # the trial it interrupted. Here there is no such write: each run is written finished, in one
    # transaction, after it has trained.
    with interrupts_as_exceptions(first_only=False):
        try:
            task = resolve_task(settings.run.task) if plan.pending else None
            for i, (seed, candidates) in enumerate(plan.pending.items()):
                problem = plan.first_problem if i == 0 else None  # Built while validating the input.
                if problem is None:
                    assert task is not None
                    problem = build_problem(task, settings.run.task, seed, settings.run.checkpoint)
                # Every configuration on this seed: same data, same weights.
                on_device = problem.to(plan.device)
                for candidate in candidates:
                    bar.set_postfix_str(f"{candidate.label}, seed {seed}", refresh=True)
                    outcome = _run_trial(
                        on_device,
                        setting_of(candidate.params, settings.space, settings.run.scaler),
                        steps=run_steps(
                            on_device, settings.run.epochs, settings.run.steps
                        ),  # The search's own.
                        amp_dtype=amp_dtype,
                        penalty=settings.penalty,
                        device_label=label,
                    )
                    attrs = {
                        CONFIG: candidate.label,
                        SOURCE_TRIAL: candidate.source_trial,
                        DATA_SEED: seed,
                        **outcome.user_attrs,
                    }
                    writer.add(
                        optuna.trial.create_trial(
                            state=TrialState.COMPLETE,
                            value=outcome.value,
                            params=candidate.params,
                            distributions=candidate.distributions,
                            user_attrs=attrs,
                            intermediate_values=outcome.intermediate_values,
                        )
                    )
                    done += 1
                    bar.update(1)
            if corners and answer_form(settings.run.scaler).trains_corners:
                done += _check_corners(plan, writer, label, amp_dtype, tolerance, quiet)
        finally:
            bar.close()
    seconds = time.perf_counter() - start
    return ConfirmationRuns(done, seconds, sibling.study_name)


def _check_corners(
    plan: ConfirmationPlan,
    writer: TrialWriter,
    label: str,
    amp_dtype: torch.dtype,
    tolerance: float,
    quiet: bool,
) -> int:
    """Trains the corners of :func:`search.results._together.check_boxes` on the search's own data, box by
    box, until a box has no failing corner; returns the number of runs made. Runs already stored are reused.
    """
    settings = plan.settings
    collected = collect_runs(plan.storage, plan.study_name)
    assert collected is not None
    seeds, stats, corners = collected
    rec = recommend(
        plan.trials, settings.space, tolerance, confirmation=confirmation_data(seeds, stats, corners)
    )
    if rec is None or not rec.candidate:
        return 0
    problem: Problem | None = None
    made = 0
    for box in check_boxes(rec.candidate, rec.config):
        points = box_corners(box, rec.config)
        missing = [p for p in points if not any(_same(c["point"], p) for c in corners)]
        if missing and problem is None:
            task = resolve_task(settings.run.task)
            problem = build_problem(task, settings.run.task, settings.run.seed, settings.run.checkpoint)
            problem = problem.to(plan.device)
        for point in tqdm(missing, desc="corners", unit="run", disable=quiet, file=sys.stderr, leave=False):
            cfg = ScalerConfig(
                point["init_scale"],
                point["growth_factor"],
                point["backoff_factor"],
                round(point["growth_interval"]),
            )
            assert problem is not None
            outcome = _run_trial(
                problem,
                cfg,
                steps=run_steps(problem, settings.run.epochs, settings.run.steps),
                amp_dtype=amp_dtype,
                penalty=settings.penalty,
                device_label=label,
            )
            values = {
                "init_scale": cfg.init_scale,
                "growth_factor": cfg.growth_factor,
                "backoff_factor": cfg.backoff_factor,
                "growth_interval": cfg.growth_interval,
            }
            attrs = {
                CONFIG: CORNER,
                CHECK: CORNER,
                POINT: point,
                DATA_SEED: settings.run.seed,
                **outcome.user_attrs,
            }
            writer.add(
                optuna.trial.create_trial(
                    state=TrialState.COMPLETE,
                    value=outcome.value,
                    params=values,
                    distributions=_point_distributions(values, settings),
                    user_attrs=attrs,
                    intermediate_values=outcome.intermediate_values,
                )
            )
            failure = (
                "nonfinite" if outcome.user_attrs.get(NONFINITE) else outcome.user_attrs.get(FAILURE, "none")
            )
            corners.append({"point": point, "failure": failure, "value": outcome.value})
            made += 1
        if all(c["failure"] == "none" for c in corners if any(_same(c["point"], p) for p in points)):
            break
    return made


def _run_trial(*args: Any, **kwargs: Any) -> TrialOutcome:
    """:func:`search.training._objective.run_trial`; a task's ``sys.exit`` is an error (exit 1), never a
    success."""
    try:
        return run_trial(*args, **kwargs)
    except SystemExit as e:
        raise TaskError(f"the task called sys.exit({e.code!r}) during a run") from e


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(math.isclose(a[k], b[k], rel_tol=1e-9) for k in b)


def _open_sibling(plan: ConfirmationPlan, top: int) -> optuna.Study:
    """Creates or loads ``<study>.confirm`` and records what this confirmation asks for."""
    name = confirm_study_name(plan.study_name)
    study = optuna.create_study(
        storage=plan.storage, study_name=name, direction="minimize", load_if_exists=True
    )
    wanted: dict[str, Any] = {
        "source_study": plan.study_name,
        "seeds": plan.seeds,
        "top": top,
        "epochs": plan.settings.run.epochs,
        "configs": [
            {"label": c.label, "source_trial": c.source_trial, "params": c.params} for c in plan.candidates
        ],
    }
    if plan.pending:
        wanted["device"] = plan.device.type
    current = study.user_attrs
    for key, value in wanted.items():
        if current.get(key) != value:
            study.set_user_attr(key, value)
    return study


def _point_distributions(values: dict[str, float], settings: Settings) -> dict[str, BaseDistribution]:
    """One-point distributions for a corner run, with the search's kinds and log flags: Optuna refuses
    to hold (and optuna.copy_study to copy) a parameter whose log flag differs between trials."""
    searched = distributions(settings.space)
    out: dict[str, BaseDistribution] = {}
    for name, v in values.items():
        log = getattr(searched.get(name), "log", False)
        out[name] = (
            IntDistribution(int(v), int(v), log=log)
            if name == "growth_interval"
            else FloatDistribution(v, v, log=log)
        )
    return out
