"""``python -m search.optimize``: search GradScaler settings into an Optuna study.

Exit codes: 0 done, 1 too many failed trials, a storage failure during the run or a worker that
died, 2 bad input (nothing written), 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import sqlalchemy.exc
import torch
from optuna.trial import TrialState
from tqdm import tqdm

from search.cli import OneLineParser, check_output, fail, prog_name
from search.cli import _startup as startup
from search.core import (
    DEFAULTS,
    DEVICE,
    FAIL_REASON,
    FINISHED,
    SAMPLERS,
    ConfigError,
    Interrupted,
    Settings,
    UsageError,
    baseline_of,
    baseline_trials,
    device_label,
    growth_note,
    load_settings,
    process_token,
    raise_pending,
    record_interrupts,
    resolve_device,
    unfinished_baselines,
    with_run,
)
from search.publishing import _publish as publishing
from search.results import format_summary, summarize, summarize_confirmation, write_best_json
from search.storage import (
    RDB_STORAGE_LOGGER,
    StorageError,
    StorageUnreachable,
    close_storage,
    enable_wal,
    first_line,
    is_read_only,
    mask_url,
    open_storage,
    redact,
    share_outage_warning,
    sqlite_path,
    storage_of,
    with_retry,
)
from search.study import (
    DevicePlanError,
    IncompatibleStudyError,
    Runner,
    TooManyFailures,
    WorkerSpec,
    finished_and_best,
    inspect_study,
    make_pruner,
    make_sampler,
    plan_workers,
    prepare_study,
    resolve_study_name,
    run_pool,
    sampler_seed,
)
from search.tasks import BUILTIN_TASKS, Problem, TaskError, build_problem, resolve_task
from search.training import PopulationError, batch_plan, check_population

__all__ = ["main", "make_pruner", "make_sampler", "resolve_device", "sampler_seed"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface; defaults shown come from :data:`search.core._config.DEFAULTS`."""
    d = DEFAULTS.run
    p = OneLineParser(
        prog=prog_name("search.optimize"),
        description="Search torch.amp.GradScaler settings (init_scale, growth_factor, "
        "backoff_factor, growth_interval) with Optuna. Each trial runs a real AMP training loop.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    add = p.add_argument
    add(
        "--trials",
        type=int,
        default=None,
        metavar="N",
        help=f"finished (COMPLETE/PRUNED) trials the study should hold [{d.trials}]",
    )
    add("--config", metavar="PATH", default=None, help="TOML config (see configs/default.toml)")
    add("--storage", metavar="URL", default=None, help=f"Optuna storage URL [{d.storage}]")
    add("--study-name", default=None, metavar="NAME", help="study name [the task's name; a task of your own: its module's name]")
    add(
        "--task",
        default=None,
        metavar="NAME",
        help=f"a built-in task ({', '.join(BUILTIN_TASKS)}) or package.module:callable [{d.task}]",
    )
    add("--device", default=None, help=f"auto, cpu, cuda or cuda:N; auto = cuda if available [{d.device}]")
    add("--amp-dtype", default=None, choices=("float16", "bfloat16"), help=f"autocast dtype [{d.amp_dtype}]")
    add(
        "--epochs",
        type=int,
        default=None,
        metavar="N",
        help="passes over the data per trial; a full-batch task takes one optimizer step per epoch "
        "[the task's default; seed-mlp: 30]",
    )
    add("--steps", type=int, default=None, metavar="N", help="optimizer steps per trial instead of --epochs [as the epochs make]")
    add("--seed", type=int, default=None, metavar="N", help=f"task seed: data and initial weights [{d.seed}]")
    add("--timeout", type=float, default=None, metavar="SECONDS", help="stop starting trials after SECONDS (0 = none) [0]")
    add("--trial-timeout", type=float, default=None, metavar="SECONDS", help="fail a trial running past SECONDS (0 = none) [0]")
    add("--sampler", default=None, choices=SAMPLERS, help=f"Optuna sampler [{d.sampler}]")
    add("--pruner", default=None, choices=("none", "median", "hyperband"), help=f"Optuna pruner [{d.pruner}]")
    add(
        "--max-failed-trials",
        type=int,
        default=None,
        metavar="K",
        help=f"stop with exit 1 after K failed trials in this run [{d.max_failed_trials}]",
    )
    add(
        "--heartbeat-interval",
        type=int,
        default=None,
        metavar="SECONDS",
        help=f"heartbeat of claimed trials; one silent for twice this is failed and retried [{d.heartbeat_interval}]",
    )
    add(
        "--workers",
        type=int,
        default=None,
        metavar="K",
        help=f"worker processes on this host, all on the same study [{d.workers}]",
    )
    add(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch intra-op threads in each process (each worker); 0: 1 thread, or OMP_NUM_THREADS when set "
        f"(threads that share cores with another process stall at every barrier) [{d.threads}]",
    )
    add(
        "--devices",
        default=None,
        metavar="LIST",
        help="CUDA device indices for the workers, e.g. 0,1; worker i uses the (i mod len)-th "
        "[all visible GPUs; --device stays the single-worker choice]",
    )
    add(
        "--population",
        type=int,
        default=None,
        metavar="K",
        help="train K sampled trials at once in one process, weights stacked (built-in tasks; a task of "
        "your own if its model is a Sequential of Linear layers and activations, docs/population.md); "
        f"--trial-timeout then applies to the whole population [{d.population}]",
    )
    add(
        "--storage-retry",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"keep retrying a database that is unreachable mid-run this long [{d.storage_retry:g}]",
    )
    add(
        "--allow-changed-settings",
        action="store_true",
        help="resume a study even if its recorded settings differ",
    )
    add("--best-out", metavar="PATH", default=None, help="write the summary and best params as JSON")
    add("--quiet", action="store_true", help="no progress bar")
    # ArgumentDefaultsHelpFormatter would print "None" for flags whose defaults live in config.
    p.formatter_class = argparse.HelpFormatter
    return p


def _fail(message: str, code: int = 2) -> int:
    return fail("search.optimize", message, code)


def _note(message: str) -> None:
    print(f"search.optimize: {message}", file=sys.stderr)


class _Redact(logging.Filter):
    """Masks the storage URL's password in every log record."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def filter(self, record: logging.LogRecord) -> bool:
        if self.url:
            record.msg, record.args = redact(record.getMessage(), self.url), ()
        return True


def _setup_logging(url: str, prefix: str = "search.optimize") -> None:
    logger = logging.getLogger("search")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: warning: %(message)s"))
    handler.addFilter(_Redact(url))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    # psycopg's own warnings while a server is away ("error ignored terminating <psycopg.Pipeline
    # [BAD]>: the connection is lost") would reach stderr through logging's last-resort handler, as
    # a second line about an outage our retry line already reports.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    # Likewise Optuna's "Caught an error from sqlalchemy … Falling back to a slower alternative": its
    # trial read takes a dropped connection for a too-long IN list; search.storage._retry handles what follows.
    logging.getLogger(RDB_STORAGE_LOGGER).setLevel(logging.ERROR)


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    names = (
        "trials storage study_name task device amp_dtype epochs seed timeout trial_timeout sampler "
        "pruner max_failed_trials heartbeat_interval workers devices threads storage_retry steps population"
    ).split()
    return {name: getattr(args, name) for name in names}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    startup.started()  # Imports are done: this command's own interrupt handling from here.
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:  # Unknown flag, bad value: one line, not argparse's usage block.
        return _fail(str(e))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        code = _main(args, argv)
        if code == 0:
            raise_pending()  # A signal recorded outside the trial loop (start-up, summary): not a success.
        return code
    except (KeyboardInterrupt, Interrupted) as e:  # Outside the trial loop: no trial in flight.
        signum = getattr(e, "signum", signal.SIGINT)
        _note(f"interrupted ({signal.Signals(signum).name}) before or after the trials; no trial was in flight")
        return 128 + signum
    finally:
        _close_all_storages()


def _close_all_storages() -> None:
    # Closing every connection lets SQLite checkpoint and remove its -wal/-shm files.
    for storage in _OPENED:
        close_storage(storage)
    _OPENED.clear()


_OPENED: list[optuna.storages.RDBStorage] = []


@dataclass(frozen=True)
class _Opened:
    """Everything validated before a single byte is written."""

    settings: Settings
    storage: optuna.storages.RDBStorage
    problem: Problem
    fingerprint: str
    warnings: list[str]
    specs: list[WorkerSpec]
    read_only: bool = False  # A SQLite file on read-only media: only a finished study can be shown.


def _open(args: argparse.Namespace, worker: WorkerSpec | None) -> _Opened:
    settings = load_settings(args.config, _overrides(args))
    args.storage = settings.run.storage  # Also from --config: every message masks its password.
    if args.best_out:
        check_output("--best-out", args.best_out)
    if worker is not None:  # A worker process: one device, no workers of its own.
        settings = with_run(settings, device=worker.device, workers=1, devices="")
    resolve_device(settings.run.device)  # Validates --device.
    specs = plan_workers(settings.run.workers, settings.run.device, settings.run.devices, settings.run.threads)
    task = resolve_task(settings.run.task)
    problem = build_problem(task, settings.run.task, settings.run.seed)
    if not settings.run.epochs:  # The task's own default, recorded as such in the study.
        settings = with_run(settings, epochs=problem.epochs)
    if settings.run.population > 1:  # Before storage is opened: a task that cannot be stacked writes nothing.
        try:
            check_population(problem, getattr(torch, settings.run.amp_dtype))
        except PopulationError as e:
            raise PopulationError(
                f"--population {settings.run.population}: task {settings.run.task} cannot be trained as a population: {e}"
            ) from e
    fingerprint = problem.fingerprint()
    path = sqlite_path(settings.run.storage)
    if settings.run.trials == 0 and path is not None and not os.path.exists(path):
        # Opening a SQLite URL creates the file and Optuna's tables: with nothing to run, nothing is made.
        raise NothingToRun(f"{path} does not exist and --trials is 0: nothing to do")
    # A study on read-only media is opened read-only: a finished one still prints its summary.
    read_only = is_read_only(settings.run.storage)
    storage = open_storage(settings.run.storage, settings.run.heartbeat_interval, read_only=read_only)
    _OPENED.append(storage)
    settings = with_run(settings, study_name=resolve_study_name(storage, settings))
    warnings = inspect_study(storage, settings, fingerprint, args.allow_changed_settings)
    return _Opened(settings, storage, problem, fingerprint, warnings, specs, read_only)


class NothingToRun(Exception):
    """--trials 0 on a study that does not exist: a success that writes nothing."""


def _main(args: argparse.Namespace, argv: list[str], worker: WorkerSpec | None = None) -> int:
    try:
        opened = _open(args, worker)
    except NothingToRun as e:
        _note(str(e))
        return 0
    except (
        ConfigError, UsageError, DevicePlanError, TaskError, StorageError, IncompatibleStudyError, PopulationError
    ) as e:
        url = args.storage or ""
        return _fail(redact(str(e), url) if url else str(e))
    except Exception as e:  # An unexpected failure while reading the study is still bad input.
        url = args.storage or ""
        return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")

    settings = opened.settings
    url = settings.run.storage
    prefix = "search.optimize" if worker is None else f"search.optimize[worker {worker.index}]"
    _setup_logging(url, prefix)
    if worker is None:
        _print_notes(settings, opened.warnings, opened.problem)
    try:
        if worker is None and settings.run.workers > 1:
            return _run_workers(opened, args, argv)
        spec = worker or opened.specs[0]
        torch.set_num_threads(spec.threads)
        return _run(opened, resolve_device(spec.device), args, spec if worker is not None else None)
    except StorageUnreachable:
        if worker is not None:  # The parent says it, once for all workers.
            return GAVE_UP_ON_STORAGE
        return _fail(unreachable_line(settings, argv), 1)
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
        return _fail(f"storage {mask_url(url)} failed: {redact(first_line(e), url)}", 1)


# A worker's exit code for "gave up on the storage after --storage-retry" (sysexits' EX_TEMPFAIL):
# the worker prints nothing, so that the user reads the one line the parent prints, once.
GAVE_UP_ON_STORAGE = 75


def unreachable_line(settings: Settings, argv: list[str]) -> str:
    """The one line printed on giving up on the storage: what happened and the command to resume."""
    url = settings.run.storage
    command = redact(f"{prog_name('search.optimize')} {shlex.join(argv)}".strip(), url)
    return (
        f"the storage {mask_url(url)} stayed unreachable for {settings.run.storage_retry:g} s "
        f"(--storage-retry); the trials it holds are kept; to resume, run: {command}"
    )


def total_steps(settings: Settings, problem: Problem) -> int:
    """Optimizer steps per trial: ``--steps``, or what ``--epochs`` make for this task."""
    return len(batch_plan(problem, settings.run.epochs or problem.epochs, settings.run.steps or None))


def _print_notes(settings: Settings, warnings: list[str], problem: Problem) -> None:
    for note in warnings:
        _note(f"warning: {note}")
    if settings.run.amp_dtype == "bfloat16":
        _note(
            "note: bfloat16 has float32's exponent range, so loss scaling rarely matters; "
            "expect the scaler settings to make little difference"
        )
    note = growth_note(settings.space, total_steps(settings, problem))
    if note:
        _note(f"note: {note}")
    if settings.run.workers > 4 and settings.run.storage.startswith("sqlite"):
        _note(
            f"note: {settings.run.workers} workers on SQLite: it serialises every write; "
            "beyond 4 workers, or on several hosts, use PostgreSQL or MySQL"
        )


def _worker(argv: list[str], outage_flag: Any, spec: WorkerSpec) -> int:
    """A worker process's whole life (``--workers``): the trial loop on its device, no summary.

    ``outage_flag`` is shared by the parent and every worker, so that an outage they all meet is
    announced once (:func:`search.storage._retry.share_outage_warning`)."""
    share_outage_warning(outage_flag)
    # Until the trial loop installs its own handlers, a signal is recorded, and raised when the
    # loop starts (nothing of this worker's is in storage yet); a worker with nothing to run
    # still exits with it. Recorded, not raised at once: a raise can land where Python ignores it.
    record_interrupts()
    torch.set_num_threads(spec.threads)
    args = build_parser().parse_args(argv)
    args.quiet = True
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        code = _main(args, argv, worker=spec)
        if code == 0:
            raise_pending()
        return code
    except Interrupted as e:
        return 128 + e.signum
    finally:
        _close_all_storages()


def _existing(storage: optuna.storages.RDBStorage, name: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(storage=storage, study_name=name).get_trials(deepcopy=False)
    except KeyError:
        return []


def _run(opened: _Opened, device: torch.device, args: argparse.Namespace, worker: WorkerSpec | None) -> int:
    settings, storage = opened.settings, opened.storage
    name = settings.study_name
    label = device_label(device)
    existing = _existing(storage, name)
    done = sum(t.state in FINISHED for t in existing)
    # Done means N finished trials and every baseline among them, nothing queued or running: a
    # RUNNING trial of a dead worker is failed and its baseline re-run below (stale heartbeat).
    unsettled = any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in existing)
    if done >= settings.run.trials and not unsettled and not _missing_baselines(settings, existing):
        if worker is not None:
            return 0
        return _nothing_to_do(opened, args, existing, done)
    if opened.read_only:
        return _refuse_read_only(opened, done)

    if worker is None:
        _warn_mixed_devices(existing, device)
    enable_wal(storage)
    index = worker.index if worker is not None else 0
    seed = sampler_seed(settings.run.seed, len(existing), index, process_token())
    sampler = make_sampler(settings.run.sampler, seed)
    pruner = make_pruner(settings.run.pruner, total_steps(settings, opened.problem))
    handle = prepare_study(storage, settings, opened.fingerprint, sampler, pruner or optuna.pruners.NopPruner())
    if worker is None:
        for note in handle.notes:
            _note(f"note: {note}")

    bar = tqdm(
        total=settings.run.trials,
        initial=min(done, settings.run.trials),
        desc=name,
        unit="trial",
        disable=args.quiet,
        file=sys.stderr,
        dynamic_ncols=True,
    )
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

    amp_dtype = getattr(torch, settings.run.amp_dtype)
    problem_on_device = opened.problem.to(device)
    # Others may join a study on a database server (other hosts) or run beside us (--workers):
    # then sampled trials are RUNNING with a heartbeat, so that a dead worker's trial is re-run.
    shared = worker is not None or not settings.run.storage.startswith("sqlite")
    runner = Runner(
        handle.study, settings, problem_on_device, label, amp_dtype, sampler, pruner, on_trial, shared=shared
    )
    try:
        stats = runner.run()
    except Interrupted as e:
        bar.close()
        if worker is not None:
            return 128 + e.signum
        _note(f"interrupted by {e}; {runner.stats.interrupted}")
        _finish(handle.study, settings, args, "interrupted")
        return 128 + e.signum
    except (TooManyFailures, TaskError) as e:  # TaskError: the task called sys.exit in a trial.
        bar.close()
        if worker is None:
            _finish(handle.study, settings, args, "stopped", publish=True)
            return _fail(str(e), 1)
        logging.getLogger("search").warning("%s", e)
        return 1
    bar.close()
    if worker is not None:
        return 0
    code = _finish(
        handle.study,
        settings,
        args,
        f"this run: {stats.completed} complete, {stats.pruned} pruned, {stats.failed} failed"
        + _stale_text(stats.stale_failed)
        + f" in {stats.seconds:.1f} s ({stats.stop_reason})",
        publish=True,
    )
    trials = _read_trials(handle.study, settings)
    missing = _missing_baselines(settings, trials)
    if missing:
        running = {baseline_of(t) for t in trials if t.state == TrialState.RUNNING}
        queued = [tag for tag in missing if tag not in running]
        elsewhere = [tag for tag in missing if tag in running]
        parts = []
        if queued:
            parts.append(
                f"baseline{'s' if len(queued) > 1 else ''} {', '.join(queued)} "
                f"{'are' if len(queued) > 1 else 'is'} queued and not run yet (this run stopped first: {stats.stop_reason})"
            )
        if elsewhere:
            parts.append(
                f"baseline{'s' if len(elsewhere) > 1 else ''} {', '.join(elsewhere)} "
                f"{'are' if len(elsewhere) > 1 else 'is'} RUNNING in another worker (a live one finishes it; a dead "
                f"one's is failed and re-run once its heartbeat is silent for {2 * settings.run.heartbeat_interval} s)"
            )
        _note(f"not done: {'; '.join(parts)}; run the same command again")
        return 1
    return code


def _missing_baselines(settings: Settings, trials: list[optuna.trial.FrozenTrial]) -> list[str]:
    """The seed baselines of this study's space with no finished trial (none on a new study)."""
    if not trials:
        return []
    return unfinished_baselines(trials, [tag for tag, _params in baseline_trials(settings.space)[0]])


def _nothing_to_do(
    opened: _Opened, args: argparse.Namespace, existing: list[optuna.trial.FrozenTrial], done: int
) -> int:
    # Nothing to run: report without writing anything.
    settings, name = opened.settings, opened.settings.study_name
    if existing or settings.run.trials > 0:
        study = optuna.load_study(storage=opened.storage, study_name=name)
        return _finish(study, settings, args, f"study already holds {done} finished trials")
    _note(f"study {name!r} does not exist yet and --trials is 0: nothing to do")
    return 0


def _refuse_read_only(opened: _Opened, done: int) -> int:
    """A study that needs trials, on storage that cannot be written: bad input, nothing tried."""
    settings = opened.settings
    short = done < settings.run.trials
    why = f"{done} of {settings.run.trials} trials finished" if short else "a trial or baseline is unfinished"
    return _fail(
        f"{sqlite_path(settings.run.storage)} is read-only (the file or its directory is not writable) and "
        f"study {settings.study_name!r} is not done ({why}): a run must write; copy it to writable storage "
        "to go on"
    )


def _warn_mixed_devices(existing: list[optuna.trial.FrozenTrial], device: torch.device) -> None:
    kinds = {str(t.user_attrs.get(DEVICE, "")).split(":")[0].split(" ")[0] for t in existing}
    kinds.discard("")
    if kinds and kinds != {device.type}:
        _note(
            f"warning: study has trials on {', '.join(sorted(kinds))}; this run uses {device.type}. "
            "The summary keeps devices apart."
        )


def _run_workers(opened: _Opened, args: argparse.Namespace, argv: list[str]) -> int:
    """``--workers K``: create the study once here, then K processes run trials on it."""
    settings, storage = opened.settings, opened.storage
    name = settings.study_name
    existing = _existing(storage, name)
    done = sum(t.state in FINISHED for t in existing)
    if done >= settings.run.trials:
        return _nothing_to_do(opened, args, existing, done)
    if opened.read_only:
        return _refuse_read_only(opened, done)
    _warn_mixed_devices(existing, torch.device(opened.specs[0].device))
    enable_wal(storage)
    handle = prepare_study(
        storage, settings, opened.fingerprint, optuna.samplers.RandomSampler(), optuna.pruners.NopPruner()
    )
    for note in handle.notes:
        _note(f"note: {note}")
    devices = ", ".join(sorted({spec.device for spec in opened.specs}))
    bar = tqdm(
        total=settings.run.trials,
        initial=min(done, settings.run.trials),
        desc=f"{name} ({len(opened.specs)} workers)",
        unit="trial",
        disable=args.quiet,
        file=sys.stderr,
        dynamic_ncols=True,
    )

    def poll() -> None:
        # One progress bar for the whole study: every worker's trials, on every host.
        try:
            finished, best = finished_and_best(storage, name)
        except Exception:  # The database is away; the workers ride it out, the bar waits.
            return
        if finished > bar.n:
            bar.update(min(finished, settings.run.trials) - bar.n)
        bar.set_postfix({"best": f"{best:.4f}" if best is not None else "-"}, refresh=True)

    from search import optimize  # The workers import the target by its module name.

    start = time.perf_counter()
    outage_flag = multiprocessing.get_context("spawn").Value("b", 0)
    share_outage_warning(outage_flag)
    result = run_pool(optimize._worker, opened.specs, (argv, outage_flag), poll)
    seconds = time.perf_counter() - start
    bar.close()
    if result.signum is None and GAVE_UP_ON_STORAGE in result.exit_codes:
        raise StorageUnreachable("a worker gave up on the storage")  # _main prints the one line.
    trials = _read_trials(handle.study, settings)
    finished = sum(t.state in FINISHED for t in trials)
    before = {t.number for t in existing if t.state == TrialState.FAIL}
    new_fails = [t for t in trials if t.state == TrialState.FAIL and t.number not in before]
    stale = sum(FAIL_REASON not in t.user_attrs for t in new_fails)  # Optuna fails stale trials without one.
    headline = (
        f"this run: {len(opened.specs)} workers on {devices}, {finished - done} finished, "
        f"{len(new_fails) - stale} failed{_stale_text(stale)} in {seconds:.1f} s"
    )
    if result.signum is not None:
        # Read back, not assumed: a worker's trial can finish before the signal reaches it.
        before = {t.number for t in existing}
        cut = [
            f"#{t.number}"
            for t in trials
            if t.state == TrialState.FAIL
            and t.number not in before
            and str(t.user_attrs.get(FAIL_REASON, "")).startswith("interrupted")
        ]
        what = (
            f"the workers' trials in flight were recorded as FAIL: {', '.join(cut)}"
            if cut
            else "no worker's trial was cut short (each had finished or not begun)"
        )
        _note(f"interrupted by {signal.Signals(result.signum).name}; {what}")
        _finish(handle.study, settings, args, "interrupted")
        return 128 + result.signum
    abnormal = []
    for spec, code in zip(opened.specs, result.exit_codes):
        if code < 0:
            abnormal.append(f"worker {spec.index} died ({signal.Signals(-code).name})")
        elif code:
            abnormal.append(f"worker {spec.index} exited with {code}")
    reached = finished >= settings.run.trials
    for line in abnormal:
        _note(f"warning: {line}" + ("; the others finished the study" if reached else ""))
    _finish(handle.study, settings, args, headline, publish=True)
    if reached:
        return 0
    return 1 if abnormal else 0


def _stale_text(n: int) -> str:
    """The trials of stopped workers that this run failed (and Optuna queued again), if any."""
    if not n:
        return ""
    return f", {n} trial{'s' if n > 1 else ''} of a stopped worker failed and queued again"


def _read_trials(study: optuna.Study, settings: Settings) -> list[optuna.trial.FrozenTrial]:
    # Rides out an outage like the trial loop, and gives up with StorageUnreachable (one line).
    return with_retry(
        lambda: study.get_trials(deepcopy=False), what="reading the study", budget=settings.run.storage_retry
    )


def _finish(
    study: optuna.Study, settings: Settings, args: argparse.Namespace, headline: str, publish: bool = False
) -> int:
    trials = _read_trials(study, settings)  # Read once: the summary and publishing share it.
    data = summarize(study, settings.space, summarize_confirmation(storage_of(study), study.study_name), trials)
    data["storage"] = mask_url(settings.run.storage)
    if publish:
        # Curves and notes for optuna-dashboard (search/publishing.py): once per run, not per trial.
        try:
            publishing.publish(study, trials, data)
        except Exception as e:  # The results are stored; only their dashboard figures are missing.
            _note(f"warning: dashboard figures not written: {redact(first_line(e), settings.run.storage)}")
    print(headline)
    print(format_summary(data))
    if args.best_out:
        write_best_json(data, args.best_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
