"""What a run is made of, in this process alone or with workers: is the study done, its start, the trial loop
and its progress bar, the summary.

``python -m search.optimize`` and each of its ``--workers`` processes decide whether there is work
left with one function, :func:`study_is_done`: N finished trials, every baseline among them,
nothing queued or running. A RUNNING trial of a dead worker is therefore never taken for done: the
run fails it once its heartbeat is stale and runs its baseline again. The run in this process alone
is :mod:`search.study._search_run`'s, the run with worker processes :mod:`search.study._run_with_workers`'s;
both end in :func:`finish`, the summary of the study.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm

from search.core import (
    DEVICE,
    FINISHED,
    Settings,
    baseline_of,
    baseline_trials,
    device_label,
    process_token,
    resolve_device,
    unfinished_baselines,
)
from search.results import summarize, summarize_confirmation
from search.storage import enable_wal, first_line, mask_url, redact, storage_of, with_retry
from search.study._plan import RunPlan
from search.study._prepare import StudyHandle, prepare_study
from search.study._sampling import make_pruner, make_sampler, sampler_seed

if TYPE_CHECKING:
    from search.study._trial_loop import Runner
    from search.study._workers import WorkerSpec

Note = Callable[[str], None]  # Prints one line on stderr, after the command's name.


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: the exit code, and what the command prints (stdout: headline and summary)."""

    code: int  # 0 done, 1 not done or stopped, 128 + signum interrupted.
    headline: str | None = None  # The line above the summary.
    summary: dict[str, Any] | None = None  # :func:`search.results.summarize`'s data, also --best-out's.
    error: str | None = None  # One line for ``PROG: error:``, after the summary.


def unfinished_seed_baselines(settings: Settings, trials: list[FrozenTrial]) -> list[str]:
    """The baselines of this study's space with no finished trial (none on a new study)."""
    if not trials:
        return []
    return unfinished_baselines(
        trials, [tag for tag, _params in baseline_trials(settings.space, settings.run.scaler)[0]]
    )


def study_is_done(settings: Settings, trials: list[FrozenTrial]) -> bool:
    """Whether the study needs no more work: N finished trials, every baseline among them, and
    nothing queued or running (a RUNNING trial of a dead worker is failed and its trial re-run)."""
    finished = sum(t.state in FINISHED for t in trials)
    unsettled = any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)
    return (
        finished >= settings.run.trials and not unsettled and not unfinished_seed_baselines(settings, trials)
    )


def existing_trials(storage: optuna.storages.RDBStorage, name: str) -> list[FrozenTrial]:
    """The study's trials, or none when it does not exist yet."""
    try:
        return optuna.load_study(storage=storage, study_name=name).get_trials(deepcopy=False)
    except KeyError:
        return []


def warn_mixed_devices(existing: list[FrozenTrial], device_type: str, note: Note) -> None:
    """Says so when the study's trials ran on another kind of device than this run's."""
    kinds = {str(t.user_attrs.get(DEVICE, "")).split(":")[0].split(" ")[0] for t in existing}
    kinds.discard("")
    if kinds and kinds != {device_type}:
        note(
            f"warning: study has trials on {', '.join(sorted(kinds))}; this run uses {device_type}. "
            "The summary keeps devices apart."
        )


def start_study(
    plan: RunPlan, sampler: optuna.samplers.BaseSampler, pruner: Any, note: Note | None
) -> StudyHandle:
    """Creates or resumes the study for writing (WAL on: the run is valid); ``note`` gets its notes."""
    enable_wal(plan.storage)
    handle = prepare_study(
        plan.storage,
        plan.settings,
        plan.fingerprint,
        sampler,
        pruner or optuna.pruners.NopPruner(),
        plan.study_attrs,
        as_run=None if plan.problem.start is None else plan.problem.start.scaler_setting(),
        as_run_assumed="" if plan.problem.start is None else plan.problem.start.scaler_assumed(),
    )
    if note is not None:
        start = plan.problem.start
        own_rule = start is not None and not start.other_rule(plan.settings.run.scaler)
        unusable = start.scaler_unusable() if start is not None and own_rule else ""
        for line in (*handle.notes, *filter(None, [unusable])):
            note(f"note: {line}")
    return handle


def progress_bar(settings: Settings, done: int, quiet: bool, desc: str) -> tqdm:
    """The run's progress bar on stderr: finished trials of N."""
    return tqdm(
        total=settings.run.trials,
        initial=min(done, settings.run.trials),
        desc=desc,
        unit="trial",
        disable=quiet,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def make_runner(
    plan: RunPlan, existing: list[FrozenTrial], worker: WorkerSpec | None, quiet: bool, note: Note | None
) -> tuple[StudyHandle, Runner, tqdm]:
    """The trial loop of this process (alone, or one of the ``--workers``), ready to run, and its
    progress bar. ``note`` is None in a worker: its parent speaks for all of them."""
    import torch

    from search.study._trial_loop import Runner

    settings = plan.settings
    spec = worker or plan.specs[0]
    torch.set_num_threads(spec.threads)
    device = resolve_device(spec.device)
    if note is not None:
        warn_mixed_devices(existing, device.type, note)
    index = worker.index if worker is not None else 0
    seed = sampler_seed(settings.run.seed, len(existing), index, process_token())
    sampler = make_sampler(settings.run.sampler, seed)
    pruner = make_pruner(settings.run.pruner, plan.steps_per_trial)
    handle = start_study(plan, sampler, pruner, note)
    bar = progress_bar(settings, sum(t.state in FINISHED for t in existing), quiet, settings.study_name)
    best = min((t.value for t in existing if t.state == TrialState.COMPLETE), default=math.inf)
    failed = 0

    def on_trial(state: TrialState, value: float | None) -> None:
        nonlocal best, failed
        if state == TrialState.FAIL:
            failed += 1
        else:
            bar.update(1)
        if state == TrialState.COMPLETE and value is not None:
            best = min(best, value)
        postfix = {"best": f"{best:.4f}" if math.isfinite(best) else "-"}
        if failed:
            postfix["failed"] = str(failed)
        bar.set_postfix(postfix, refresh=True)

    # Others may join a study on a database server (other hosts) or run beside us (--workers):
    # then sampled trials are RUNNING with a heartbeat, so that a dead worker's trial is re-run.
    shared = worker is not None or not settings.run.storage.startswith("sqlite")
    amp_dtype = getattr(torch, settings.run.amp_dtype)
    runner = Runner(
        handle.study,
        settings,
        plan.problem.to(device),
        device_label(device),
        amp_dtype,
        sampler,
        pruner,
        on_trial,
        shared=shared,
        steps=plan.steps_per_trial,
    )
    return handle, runner, bar


def not_done(settings: Settings, trials: list[FrozenTrial], stop_reason: str, note: Note) -> bool:
    """Says which baselines are still unfinished after a run, and how to finish them."""
    missing = unfinished_seed_baselines(settings, trials)
    if not missing:
        return False
    running = {baseline_of(t) for t in trials if t.state == TrialState.RUNNING}
    queued = [tag for tag in missing if tag not in running]
    elsewhere = [tag for tag in missing if tag in running]
    parts = []
    if queued:
        parts.append(
            f"baseline{'s' if len(queued) > 1 else ''} {', '.join(queued)}"
            f" {'are' if len(queued) > 1 else 'is'} queued and not run yet (this run stopped first:"
            f" {stop_reason})"
        )
    if elsewhere:
        parts.append(
            f"baseline{'s' if len(elsewhere) > 1 else ''} {', '.join(elsewhere)}"
            f" {'are' if len(elsewhere) > 1 else 'is'} RUNNING in another worker (a live one finishes it; a"
            " dead one's is failed and re-run once its heartbeat is silent for"
            f" {2 * settings.run.heartbeat_interval} s)"
        )
    note(f"not done: {'; '.join(parts)}; run the same command again")
    return True


def stale_text(n: int) -> str:
    """The trials of stopped workers that this run failed (and Optuna queued again), if any."""
    if not n:
        return ""
    return f", {n} trial{'s' if n > 1 else ''} of a stopped worker failed and queued again"


def read_trials(study: optuna.Study, settings: Settings) -> list[FrozenTrial]:
    """The study's trials; rides out an outage like the trial loop, and gives up with StorageUnreachable."""
    return with_retry(
        lambda: study.get_trials(deepcopy=False), what="reading the study", budget=settings.run.storage_retry
    )


def finish(
    study: optuna.Study,
    settings: Settings,
    headline: str,
    note: Note,
    publish_figures: bool = False,
    trials: list[FrozenTrial] | None = None,
) -> RunOutcome:
    """The study's summary under ``headline`` (exit 0); with ``publish_figures``, its dashboard figures too.

    ``trials``: the whole study where the run's own last write proved it (``Runner.proven_study``); else it
    is read here, once, for the summary and the figures.
    """
    if trials is None:
        trials = read_trials(study, settings)
    data = summarize(
        study, settings.space, summarize_confirmation(storage_of(study), study.study_name), trials
    )
    data["storage"] = mask_url(settings.run.storage)
    if publish_figures:
        from search.publishing import publish  # Plotly: not for a command that stops at bad input.

        # Curves and notes for optuna-dashboard (search.publishing): once per run, not per trial.
        try:
            publish(study, trials, data)
        except Exception as e:  # The results are stored; only their dashboard figures are missing.
            note(f"warning: dashboard figures not written: {redact(first_line(e), settings.run.storage)}")
    return RunOutcome(0, headline, data)
