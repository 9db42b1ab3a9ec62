"""``python -m search.optimize``: search GradScaler settings into an Optuna study.

Exit codes: 0 done, 1 too many failed trials or a storage failure during the run,
2 bad input (nothing written), 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import numpy as np
import optuna
import torch
from optuna.trial import TrialState
from tqdm import tqdm

from search.config import DEFAULTS, ConfigError, Settings, load_settings
from search.runner import FINISHED, Interrupted, Runner, TooManyFailures
from search.space import growth_note
from search.storage import StorageError, enable_wal, mask_url, open_storage, redact
from search.study import IncompatibleStudyError, inspect_study, prepare_study
from search.summary import format_summary, summarize, write_best_json
from search.tasks import Problem, TaskError, build_problem, resolve_task

__all__ = ["main", "make_pruner", "make_sampler", "resolve_device", "sampler_seed"]


class UsageError(ValueError):
    """Bad input found after argument parsing (device, task)."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface; defaults shown come from :data:`search.config.DEFAULTS`."""
    d = DEFAULTS.run
    p = argparse.ArgumentParser(
        prog="python -m search.optimize",
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
        help=f"finished (COMPLETE/PRUNED) trials the study should hold [{d.trials}]",
    )
    add("--config", metavar="PATH", default=None, help="TOML config (see configs/default.toml)")
    add("--storage", metavar="URL", default=None, help=f"Optuna storage URL [{d.storage}]")
    add("--study-name", default=None, help="study name [the task's name]")
    add("--task", default=None, help=f"built-in task name or package.module:callable [{d.task}]")
    add("--device", default=None, help=f"auto, cpu, cuda or cuda:N; auto = cuda if available [{d.device}]")
    add("--amp-dtype", default=None, choices=("float16", "bfloat16"), help=f"autocast dtype [{d.amp_dtype}]")
    add("--epochs", type=int, default=None, help=f"full-batch optimizer steps per trial [{d.epochs}]")
    add("--seed", type=int, default=None, help=f"task seed: data and initial weights [{d.seed}]")
    add("--timeout", type=float, default=None, help="stop starting trials after SECONDS (0 = none) [0]")
    add("--trial-timeout", type=float, default=None, help="fail a trial running past SECONDS (0 = none) [0]")
    add("--sampler", default=None, choices=("tpe", "random", "cmaes"), help=f"Optuna sampler [{d.sampler}]")
    add("--pruner", default=None, choices=("none", "median", "hyperband"), help=f"Optuna pruner [{d.pruner}]")
    add(
        "--max-failed-trials",
        type=int,
        default=None,
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
        "--allow-changed-settings",
        action="store_true",
        help="resume a study even if its recorded settings differ",
    )
    add("--best-out", metavar="PATH", default=None, help="write the summary and best params as JSON")
    add("--quiet", action="store_true", help="no progress bar")
    # ArgumentDefaultsHelpFormatter would print "None" for flags whose defaults live in config.
    p.formatter_class = argparse.HelpFormatter
    return p


def resolve_device(name: str) -> torch.device:
    """Maps auto/cpu/cuda/cuda:N to a device that exists here."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return device


def device_label(device: torch.device) -> str:
    """``cpu`` or ``cuda:N (GPU name)``, stored with every trial."""
    if device.type != "cuda":
        return device.type
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def sampler_seed(task_seed: int, n_existing: int, worker: int = 0) -> int:
    """The sampler's seed: differs per resume (``n_existing``) so samples never repeat."""
    return int(np.random.SeedSequence([task_seed, n_existing, worker]).generate_state(1)[0])


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``--sampler``."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    return optuna.samplers.TPESampler(seed=seed)


def make_pruner(name: str, epochs: int) -> optuna.pruners.BasePruner | None:
    """The Optuna pruner for ``--pruner`` (None: no pruning, no per-epoch syncs)."""
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=epochs // 3)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, epochs // 10), max_resource=epochs)
    return None


def _fail(message: str, code: int = 2) -> int:
    print(f"search.optimize: error: {message}", file=sys.stderr)
    return code


def _note(message: str) -> None:
    print(f"search.optimize: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    args = build_parser().parse_args(argv)
    overrides = {
        "trials": args.trials,
        "storage": args.storage,
        "study_name": args.study_name,
        "task": args.task,
        "device": args.device,
        "amp_dtype": args.amp_dtype,
        "epochs": args.epochs,
        "seed": args.seed,
        "timeout": args.timeout,
        "trial_timeout": args.trial_timeout,
        "sampler": args.sampler,
        "pruner": args.pruner,
        "max_failed_trials": args.max_failed_trials,
        "heartbeat_interval": args.heartbeat_interval,
    }
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = args.storage or ""
    try:
        return _main(args, overrides, url)
    finally:
        _close_all_storages()


def _close_all_storages() -> None:
    # Closing every connection lets SQLite checkpoint and remove its -wal/-shm files.
    for storage in _OPENED:
        storage.remove_session()
        storage.engine.dispose()
    _OPENED.clear()


_OPENED: list[optuna.storages.RDBStorage] = []


def _main(args: argparse.Namespace, overrides: dict, url: str) -> int:
    try:
        settings = load_settings(args.config, overrides)
        url = settings.run.storage
        device = resolve_device(settings.run.device)
        task = resolve_task(settings.run.task)
        problem = build_problem(task, settings.run.task, settings.run.seed)
        fingerprint = problem.fingerprint()
        storage = open_storage(url, settings.run.heartbeat_interval)
        _OPENED.append(storage)
        warnings = inspect_study(storage, settings, fingerprint, args.allow_changed_settings)
    except (ConfigError, UsageError, TaskError, StorageError, IncompatibleStudyError) as e:
        return _fail(redact(str(e), url) if url else str(e))
    except Exception as e:  # An unexpected failure while reading the study is still bad input.
        return _fail(
            f"cannot read study from {mask_url(url)}: {redact(str(e).splitlines()[0] if str(e) else type(e).__name__, url)}"
        )

    amp_dtype = getattr(torch, settings.run.amp_dtype)
    for note in warnings:
        _note(f"warning: {note}")
    if settings.run.amp_dtype == "bfloat16":
        _note(
            "note: bfloat16 has float32's exponent range, so loss scaling rarely matters; "
            "expect the scaler settings to make little difference"
        )
    note = growth_note(settings.space, settings.run.epochs)
    if note:
        _note(f"note: {note}")

    try:
        return _run(settings, storage, device, amp_dtype, problem, fingerprint, args)
    except (optuna.exceptions.StorageInternalError, OSError) as e:
        return _fail(f"storage {mask_url(url)} failed: {redact(str(e).splitlines()[0], url)}", 1)


def _run(
    settings: Settings,
    storage: optuna.storages.RDBStorage,
    device: torch.device,
    amp_dtype: torch.dtype,
    problem: Problem,
    fingerprint: str,
    args: argparse.Namespace,
) -> int:
    name = settings.study_name
    label = device_label(device)
    try:
        existing = optuna.load_study(storage=storage, study_name=name).get_trials(deepcopy=False)
    except KeyError:
        existing = []
    done = sum(t.state in FINISHED for t in existing)
    if done >= settings.run.trials:
        # Nothing to run: report without writing anything.
        if existing or settings.run.trials > 0:
            study = optuna.load_study(storage=storage, study_name=name)
            return _finish(study, settings, args, f"study already holds {done} finished trials")
        _note(f"study {name!r} does not exist yet and --trials is 0: nothing to do")
        return 0

    kinds = {str(t.user_attrs.get("device", "")).split(":")[0].split(" ")[0] for t in existing}
    kinds.discard("")
    if kinds and kinds != {device.type}:
        _note(
            f"warning: study has trials on {', '.join(sorted(kinds))}; this run uses {device.type}. "
            "The summary keeps devices apart."
        )

    enable_wal(storage)
    sampler = make_sampler(settings.run.sampler, sampler_seed(settings.run.seed, len(existing)))
    pruner = make_pruner(settings.run.pruner, settings.run.epochs)
    handle = prepare_study(storage, settings, fingerprint, sampler, pruner or optuna.pruners.NopPruner())
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
    best = [min((t.value for t in existing if t.state == TrialState.COMPLETE), default=math.inf)]
    failed = [0]

    def on_trial(state: TrialState, value: float | None) -> None:
        if state == TrialState.FAIL:
            failed[0] += 1
        else:
            bar.update(1)
        if state == TrialState.COMPLETE and value is not None:
            best[0] = min(best[0], value)
        postfix = {"best": f"{best[0]:.4f}" if math.isfinite(best[0]) else "-"}
        if failed[0]:
            postfix["failed"] = str(failed[0])
        bar.set_postfix(postfix, refresh=True)

    problem_on_device = problem.to(device)
    runner = Runner(handle.study, settings, problem_on_device, label, amp_dtype, sampler, pruner, on_trial)
    try:
        stats = runner.run()
    except Interrupted as e:
        bar.close()
        _note(f"interrupted by {e}; the trial in flight was recorded as FAIL")
        _finish(handle.study, settings, args, "interrupted")
        return 128 + e.signum
    except TooManyFailures as e:
        bar.close()
        _finish(handle.study, settings, args, "stopped")
        return _fail(str(e), 1)
    bar.close()
    return _finish(
        handle.study,
        settings,
        args,
        f"this run: {stats.completed} complete, "
        f"{stats.pruned} pruned, {stats.failed} failed in {stats.seconds:.1f} s ({stats.stop_reason})",
    )


def _finish(study: optuna.Study, settings: Settings, args: argparse.Namespace, headline: str) -> int:
    data = summarize(study, settings.space)
    data["storage"] = mask_url(settings.run.storage)
    print(headline)
    print(format_summary(data))
    if args.best_out:
        write_best_json(data, args.best_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
