"""A search run from a checked plan to its outcome: in this process, or in ``--workers`` processes.

The study may be done already (its summary is printed, nothing written), or need trials on storage that
cannot be written (refused); otherwise the trials run here (:func:`run_here`) or in worker processes
(:mod:`search.study._run_with_workers`), and both end in the study's summary
(:func:`search.study._run_parts.finish`).
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial

from search.core import FINISHED, Interrupted, Settings, UsageError
from search.storage import sqlite_path
from search.study._plan import RunPlan
from search.study._run_parts import (
    Note,
    RunOutcome,
    existing_trials,
    finish,
    make_runner,
    not_done,
    read_trials,
    stale_text,
    study_is_done,
)
from search.study._run_with_workers import run_workers
from search.tasks import TaskError


def run_plan(plan: RunPlan, quiet: bool, note: Note, prog: str = "search.optimize") -> RunOutcome:
    """Runs the plan's trials in this process, or in ``--workers`` processes; then the summary.

    Args:
        plan: The checked run (:func:`search.study.plan_run`).
        quiet: No progress bar.
        note: Prints one line on stderr (warnings and notes as the run goes).
        prog: The command's name, in the ``--workers`` processes' own lines.

    Raises:
        StorageUnreachable: The storage stayed away longer than ``--storage-retry``.
        UsageError: The study is not done and its storage is read-only.
    """
    settings = plan.settings
    existing = existing_trials(plan.storage, settings.study_name)
    done = sum(t.state in FINISHED for t in existing)
    if study_is_done(settings, existing):
        return nothing_to_do(plan, existing, done, note)
    if plan.read_only:
        raise _read_only_error(settings, done)
    if settings.run.workers > 1:
        return run_workers(plan, existing, done, quiet, note, prog)
    return run_here(plan, existing, done, quiet, note)


def nothing_to_do(plan: RunPlan, existing: list[FrozenTrial], done: int, note: Note) -> RunOutcome:
    """The study is done: its summary, read without writing anything."""
    settings, name = plan.settings, plan.settings.study_name
    if existing or settings.run.trials > 0:
        study = optuna.load_study(storage=plan.storage, study_name=name)
        return finish(study, settings, f"study already holds {done} finished trials", note)
    note(f"study {name!r} does not exist yet and --trials is 0: nothing to do")
    return RunOutcome(0)


def _read_only_error(settings: Settings, done: int) -> UsageError:
    """A study that needs trials, on storage that cannot be written: bad input, nothing tried."""
    short = done < settings.run.trials
    why = f"{done} of {settings.run.trials} trials finished" if short else "a trial or baseline is unfinished"
    return UsageError(
        f"{sqlite_path(settings.run.storage)} is read-only (the file or its directory is not writable) and "
        f"study {settings.study_name!r} is not done ({why}): a run must write; copy it to writable storage "
        "to go on"
    )


def run_here(plan: RunPlan, existing: list[FrozenTrial], done: int, quiet: bool, note: Note) -> RunOutcome:
    """The run in this process alone: the trial loop, then the summary."""
    from search.study._trial_loop import TooManyFailures  # torch: not for a command that stops at bad input.

    settings = plan.settings
    handle, runner, bar = make_runner(plan, existing, None, quiet, note)
    try:
        stats = runner.run()
    except Interrupted as e:
        bar.close()
        note(f"interrupted by {e}; {runner.stats.interrupted}")
        outcome = finish(handle.study, settings, "interrupted", note)
        return RunOutcome(128 + e.signum, outcome.headline, outcome.summary)
    except (TooManyFailures, TaskError) as e:  # TaskError: the task called sys.exit in a trial.
        bar.close()
        if getattr(e, "trace", ""):  # Shown once; each failed trial keeps it (fail_traceback).
            note("the failed trials' traceback (stored with each as fail_traceback):\n" + e.trace.rstrip())
        outcome = finish(handle.study, settings, "stopped", note, publish_figures=True)
        return RunOutcome(1, outcome.headline, outcome.summary, str(e))
    bar.close()
    outcome = finish(
        handle.study,
        settings,
        f"this run: {stats.completed} complete, {stats.pruned} pruned, {stats.failed} failed"
        + stale_text(stats.stale_failed)
        + f" in {stats.seconds:.1f} s of trials, start-up not counted ({stats.stop_reason})",
        note,
        publish_figures=True,
        trials=runner.proven_study,
    )
    trials = runner.proven_study or read_trials(handle.study, settings)
    if not_done(settings, trials, stats.stop_reason, note):
        return RunOutcome(1, outcome.headline, outcome.summary)
    return outcome
