"""``--workers K``: the study created once by the parent, then K processes run its trials.

Each worker process plans the run again on its own device (:func:`search.study._plan.plan_run`,
the parent's resolved settings) and decides whether there is work left with the same
:func:`search.study._run_parts.study_is_done` as a run without workers. The parent draws one progress bar
for the whole study, says what became of the workers, and prints the summary once.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.trial import FrozenTrial, TrialState

from search.core import (
    FAIL_REASON,
    FINISHED,
    ROUNDING_OF,
    Interrupted,
    Settings,
    raise_pending,
    record_interrupts,
)
from search.storage import (
    StorageUnreachable,
    close_storage,
    finished_and_best,
    first_line,
    mask_url,
    redact,
    share_outage_warning,
)
from search.study._logging import log_warnings
from search.study._plan import RunPlan, plan_run
from search.study._rounding_trials import rounding_note
from search.study._run_parts import (
    RunOutcome,
    existing_trials,
    finish,
    make_runner,
    not_done,
    progress_bar,
    read_trials,
    stale_text,
    start_study,
    study_is_done,
    warn_mixed_devices,
)
from search.study._workers import WorkerSpec, run_pool, worker_context
from search.tasks import TaskError

# A worker's exit code for "gave up on the storage after --storage-retry" (sysexits' EX_TEMPFAIL):
# the worker prints nothing, so that the user reads the one line the parent prints, once.
GAVE_UP_ON_STORAGE = 75


def run_workers(
    plan: RunPlan, existing: list[FrozenTrial], done: int, quiet: bool, note: Callable[[str], None], prog: str
) -> RunOutcome:
    """Creates the study, runs the workers on it, and summarises what they did.

    Raises:
        StorageUnreachable: A worker gave up on the storage (each says nothing; the caller says it once).
    """
    settings, storage = plan.settings, plan.storage
    name = settings.study_name
    warn_mixed_devices(existing, plan.specs[0].device.split(":")[0], note)
    handle = start_study(plan, optuna.samplers.RandomSampler(), None, note)
    devices = ", ".join(sorted({spec.device for spec in plan.specs}))
    bar = progress_bar(settings, done, quiet, f"{name} ({len(plan.specs)} workers)")

    def poll() -> None:
        # One progress bar for the whole study: every worker's trials, on every host.
        try:
            finished, best = finished_and_best(storage, name)
        except Exception:  # The database is away; the workers ride it out, the bar waits.
            return
        if finished > bar.n:
            bar.update(min(finished, settings.run.trials) - bar.n)
        bar.set_postfix({"best": f"{best:.4f}" if best is not None else "-"}, refresh=True)

    start = time.perf_counter()
    outage_flag = worker_context(worker_process).Value("b", 0)
    share_outage_warning(outage_flag)
    result = run_pool(worker_process, plan.specs, (prog, settings, outage_flag), poll)
    seconds = time.perf_counter() - start
    bar.close()
    if result.signum is None and GAVE_UP_ON_STORAGE in result.exit_codes:
        raise StorageUnreachable("a worker gave up on the storage")
    trials = read_trials(handle.study, settings)
    finished = sum(t.state in FINISHED for t in trials)
    before = {t.number for t in existing if t.state == TrialState.FAIL}
    new_fails = [t for t in trials if t.state == TrialState.FAIL and t.number not in before]
    stale = sum(FAIL_REASON not in t.user_attrs for t in new_fails)  # Optuna fails stale trials without one.
    known = {t.number for t in existing}
    roundings = sum(
        t.state in FINISHED and ROUNDING_OF in t.user_attrs and t.number not in known for t in trials
    )
    headline = (
        f"this run: {len(plan.specs)} workers on {devices}, {finished - done} finished,"
        f" {len(new_fails) - stale} failed{stale_text(stale)} in {seconds:.1f} s of trials, start-up not"
        " counted"
        + (f" ({rounding_note(roundings)[2:]})" if roundings else "")
    )
    if result.signum is not None:
        note(f"interrupted by {signal.Signals(result.signum).name}; {_cut_short(existing, trials)}")
        outcome = finish(handle.study, settings, "interrupted", note)
        return RunOutcome(128 + result.signum, outcome.headline, outcome.summary)
    lost = [str(plan.specs[i].index) for i in sorted(result.unknown)]
    if lost:  # The parent waited for them all the same, so no worker of this run is still training.
        ended = (
            f"worker {lost[0]} ended; its exit code is"
            if len(lost) == 1
            else (f"workers {', '.join(lost)} ended; their exit codes are")
        )
        note(f"warning: the fork server that started the workers died; {ended} unknown")
    abnormal = []
    for i, (spec, code) in enumerate(zip(plan.specs, result.exit_codes)):
        if i in result.unknown:
            continue
        if code < 0:
            abnormal.append(f"worker {spec.index} died ({signal.Signals(-code).name})")
        elif code:
            abnormal.append(f"worker {spec.index} exited with {code}")
    reached = study_is_done(settings, trials)
    for line in abnormal:
        note(f"warning: {line}" + ("; the others finished the study" if reached else ""))
    outcome = finish(handle.study, settings, headline, note, publish_figures=True)
    if reached:
        return outcome
    if not_done(settings, trials, "its workers stopped", note) or abnormal:
        return RunOutcome(1, outcome.headline, outcome.summary)
    return outcome


def _cut_short(existing: list[FrozenTrial], trials: list[FrozenTrial]) -> str:
    """What the interrupt did to the workers' trials, read back (a trial can finish before the signal)."""
    before = {t.number for t in existing}
    cut = [
        f"#{t.number}"
        for t in trials
        if t.state == TrialState.FAIL
        and t.number not in before
        and str(t.user_attrs.get(FAIL_REASON, "")).startswith("interrupted")
    ]
    if cut:
        return f"the workers' trials in flight were recorded as FAIL: {', '.join(cut)}"
    return "no worker's trial was cut short (each had finished or not begun)"


def worker_process(prog: str, settings: Settings, outage_flag: Any, spec: WorkerSpec) -> int:
    """A worker process's whole life (``--workers``): the trial loop on its device, no summary.

    ``outage_flag`` is shared by the parent and every worker, so that an outage they all meet is
    announced once (:func:`search.storage._retry.share_outage_warning`). ``settings`` are the
    parent's, resolved (study name, epochs).
    """
    share_outage_warning(outage_flag)
    # Until the trial loop installs its own handlers, a signal is recorded, and raised when the
    # loop starts (nothing of this worker's is in storage yet); a worker with nothing to run
    # still exits with it. Recorded, not raised at once: a raise can land where Python ignores it.
    record_interrupts()
    import torch

    torch.set_num_threads(spec.threads)  # Before the task is built, as every trial of this worker runs.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened: list[optuna.storages.RDBStorage] = []
    url = settings.run.storage
    try:
        try:
            # The parent checked the settings and resumed the study: changed settings are its call.
            plan = plan_run(settings, allow_changed_settings=True, worker=spec, keep=opened.append)
        except Exception as e:
            print(f"{prog}: error: {redact(first_line(e), url)}", file=sys.stderr)
            return 2
        log_warnings(url, f"{prog}[worker {spec.index}]")
        code = _work(plan, spec, url, prog)
        if code == 0:
            raise_pending()
        return code
    except Interrupted as e:
        return 128 + e.signum
    finally:
        for storage in opened:
            close_storage(storage)


def _work(plan: RunPlan, spec: WorkerSpec, url: str, prog: str) -> int:
    from search.study._trial_loop import TooManyFailures  # torch: only a worker trains.

    try:
        existing = existing_trials(plan.storage, plan.settings.study_name)
        if study_is_done(plan.settings, existing):
            return 0
        _handle, runner, bar = make_runner(plan, existing, spec, True, None)
        try:
            runner.run()
        except (TooManyFailures, TaskError) as e:
            logging.getLogger("search").warning("%s", e)
            return 1
        finally:
            bar.close()
        return 0
    except StorageUnreachable:
        return GAVE_UP_ON_STORAGE  # The parent says it, once for all workers.
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
        print(f"{prog}: error: storage {mask_url(url)} failed: {redact(first_line(e), url)}", file=sys.stderr)
        return 1
