"""``python -m search.optimize``: search GradScaler settings into an Optuna study.

The command parses its arguments, loads the settings and prints; the run is :mod:`search.study`'s
(:func:`~search.study.plan_run` checks it, :func:`~search.study.run_plan` runs it). Bad input is
found before torch is imported, except what only building the task can tell.

Exit codes: 0 done, 1 too many failed trials, a storage failure during the run or a worker that
died, 2 bad input (nothing written), 130/143 interrupted by SIGINT/SIGTERM, 141 standard output
closed by its reader (``| head -1``: the run's work is stored as usual, nothing more is printed).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from search.cli import (
    OneLineParser,
    Session,
    add_checkpoint_flag,
    check_output,
    check_run_length,
    prog_name,
    run_command,
    stdout_reader_gone,
    unreachable_line,
)
from search.core import DEFAULTS, SAMPLERS, ConfigError, Settings, UsageError, load_settings, raise_pending
from search.results import FRAMEWORKS
from search.tasks import BUILTIN_TASKS, TaskError

# Optuna, SQLAlchemy and what reads a study are imported where the run needs them: --help and the bad input
# found before (flags, a config, a task's name) end without them, in a fraction of a second.
if TYPE_CHECKING:
    from search.diagnosis import DiagnosisStart
    from search.study import RunPlan

__all__ = ["build_parser", "main"]

PROG = "search.optimize"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface; defaults shown come from :data:`search.core._settings.DEFAULTS`."""
    d = DEFAULTS.run
    p = OneLineParser(
        prog=prog_name("search.optimize"),
        description=(
            "Search torch.amp.GradScaler settings (init_scale, growth_factor, "
            "backoff_factor, growth_interval) with Optuna. Each trial runs a real AMP training loop."
        ),
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
    add(
        "--study-name",
        default=None,
        metavar="NAME",
        help="study name [the task's name; a task of your own: its module's name]",
    )
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
        help=(
            "passes over the data per trial; a full-batch task takes one optimizer step per epoch "
            "[the task's default; seed-mlp: 30]"
        ),
    )
    add(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="optimizer steps per trial instead of --epochs [as the epochs make]",
    )
    add(
        "--run-steps",
        type=int,
        default=None,
        metavar="N",
        help="your run's length: the answer and the default each train N steps, their skipped steps shown",
    )
    add("--seed", type=int, default=None, metavar="N", help=f"task seed: data and initial weights [{d.seed}]")
    add_checkpoint_flag(add)
    add("--timeout", type=float, metavar="SECONDS", help="stop starting trials after SECONDS (0 = none) [0]")
    add("--trial-timeout", type=float, metavar="SECONDS", help="fail a trial past SECONDS (0 = none) [0]")
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
        help=(
            "heartbeat of claimed trials; one silent for twice this is failed and retried"
            f" [{d.heartbeat_interval}]"
        ),
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
        help=(
            "torch intra-op threads in each process (each worker); 0: 1 thread, or OMP_NUM_THREADS when set "
            f"(threads that share cores with another process stall at every barrier) [{d.threads}]"
        ),
    )
    add(
        "--devices",
        default=None,
        metavar="LIST",
        help=(
            "CUDA device indices for the workers, e.g. 0,1; worker i uses the (i mod len)-th "
            "[all visible GPUs; --device stays the single-worker choice]"
        ),
    )
    add(
        "--scaler",
        default=None,
        metavar="RULE",
        help=(
            "whose loss-scale rule the trials follow and whose knobs the study searches: torch (GradScaler),"
            " deepspeed (ZeRO's DynamicLossScaler), megatron, fairseq; the answer comes in that framework's"
            f" own form (docs/frameworks.md) [{d.scaler}]"
        ),
    )
    add(
        "--population",
        type=int,
        default=None,
        metavar="K",
        help=(
            "train K sampled trials at once in one process, weights stacked (built-in tasks; a task of "
            "your own if its model is a Sequential of Linear layers and activations, docs/population.md); "
            f"--trial-timeout then applies to the whole population [{d.population}]"
        ),
    )
    add(
        "--batch-memory",
        type=float,
        default=None,
        metavar="MIB",
        help=(
            "MiB a loader task's batches may take, drawn once per process (steps x batch); more is "
            f"refused before any trial [{d.batch_memory:g}]"
        ),
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
    add(
        "--from-diagnosis",
        metavar="PATH",
        nargs="?",
        const=IN_STUDY,
        default=None,
        help=(
            "start from a diagnosis: PATH (search.diagnose --json PATH), or without PATH the one"
            " search.diagnose --storage recorded in the study; the starting scale is searched within 4"
            " octaves of the scale it suggests and the growth interval within the window it measured; the"
            " study records it"
        ),
    )
    add(
        "--best-out",
        metavar="PATH",
        default=None,
        help="write the summary, the verdict and every framework's line as JSON",
    )
    add(
        "--paste",
        choices=tuple(FRAMEWORKS),
        default="torch",
        help="whose line the verdict shows: "
        + ", ".join(f"{k} ({v})" for k, v in FRAMEWORKS.items())
        + " [torch]",
    )
    add("--quiet", action="store_true", help="no progress bar")
    # ArgumentDefaultsHelpFormatter would print "None" for flags whose defaults live in config.
    p.formatter_class = argparse.HelpFormatter
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    return run_command(PROG, _main, argv, interrupted=_interrupted_line)


def _interrupted_line(signum: int) -> str:
    # A signal the trial loop did not take: it came before or after the trials.
    return f"interrupted ({signal.Signals(signum).name}) before or after the trials; no trial was in flight"


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    names = (
        "trials storage study_name task device amp_dtype epochs seed timeout trial_timeout sampler "
        "pruner max_failed_trials heartbeat_interval workers devices threads storage_retry steps population "
        "batch_memory scaler checkpoint"
    ).split()
    return {name: getattr(args, name) for name in names}


def _is_bad_input(error: Exception) -> bool:
    """Whether ``error``, raised while the run is checked, is bad input (one line, exit 2, nothing written).
    """
    if isinstance(error, (ConfigError, UsageError, TaskError)):  # Known without importing the run's modules.
        return True
    from search.core import IncompatibleStudyError
    from search.diagnosis import DiagnosisFileError
    from search.storage import StorageError
    from search.study import DevicePlanError

    return isinstance(error, (DevicePlanError, StorageError, IncompatibleStudyError, DiagnosisFileError))


# --from-diagnosis without a PATH: the diagnosis recorded in the study.
IN_STUDY = "(the diagnosis recorded in the study)"


def _diagnosis_start(path: str | None, settings: Settings) -> DiagnosisStart | None:
    """``--from-diagnosis``'s file or the study's recorded diagnosis, checked against this run."""
    if path is None:
        return None
    from search.diagnosis import diagnosis_start

    return diagnosis_start(None if path is IN_STUDY else path, settings)


def _main(session: Session, argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # Unknown flag, bad value: one line (run_command), not usage.
    check_run_length(args)
    session.urls.append(args.storage or "")
    from search.study import NothingToRun, plan_run  # Imports Optuna only once the run gets that far.

    try:
        settings = load_settings(args.config, _overrides(args))
        session.urls.append(settings.run.storage)  # Also from --config: every message masks its password.
        if args.best_out:
            check_output("--best-out", args.best_out)
        start = _diagnosis_start(args.from_diagnosis, settings)
        if start is not None:
            from search.diagnosis import narrowed_space

            settings = replace(settings, space=narrowed_space(settings.space, start))
        plan = plan_run(
            settings,
            args.allow_changed_settings,
            keep=session.keep,
            diagnosed_steps=None if start is None else start.steps,
            diagnosed_from=None if start is None else start.first_step,
            from_diagnosis=start is not None,
        )
        if plan.problem.start is not None:  # First: every number below is of the run from there.
            session.note(plan.problem.start.first_line(plan.steps_per_trial))
        if start is not None:
            from search.core import STUDY_DIAGNOSIS

            plan = replace(plan, study_attrs={STUDY_DIAGNOSIS: start.attrs(settings.space)})
            session.note(f"note: {start.note(settings.space)}")
    except NothingToRun as e:
        session.note(str(e))
        return 0
    except Exception as e:
        if _is_bad_input(e):
            return session.fail(str(e))
        from search.storage import first_line, mask_url, redact

        url = session.urls[-1]  # An unexpected failure while reading the study is still bad input.
        return session.fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
    code = _run(session, plan, args, argv)
    if code == 0:
        raise_pending()  # A signal recorded outside the trial loop (start-up, summary): not a success.
    return code


def _run(session: Session, plan: RunPlan, args: argparse.Namespace, argv: list[str]) -> int:
    import optuna
    import sqlalchemy.exc

    from search.results import format_summary, write_best_json
    from search.storage import StorageUnreachable, first_line, mask_url, redact
    from search.study import log_warnings, run_plan

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    settings = plan.settings
    url = settings.run.storage
    log_warnings(url, PROG)
    _print_notes(session, plan)
    try:
        outcome = run_plan(plan, args.quiet, session.note, PROG)
    except UsageError as e:  # The study needs trials and its storage is read-only.
        return session.fail(str(e))
    except StorageUnreachable:
        return session.fail(unreachable_line(PROG, settings, argv), 1)
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
        if isinstance(e, BrokenPipeError) and stdout_reader_gone():
            raise  # Not a storage failure: the command's reader went away (run_command exits 141).
        return session.fail(f"storage {mask_url(url)} failed: {redact(first_line(e), url)}", 1)
    run_steps = args.run_steps or plan.problem.run_steps  # The flag, else what the task declares.
    if outcome.summary is not None and outcome.code == 0 and run_steps:
        from search.study import measure_run_length, publish_run_length

        source = "--run-steps" if args.run_steps else "the task's run_steps"
        session.note(f"training the answer and the default {run_steps} steps each ({source})")
        outcome.summary["run_length"] = measure_run_length(
            plan.settings, outcome.summary, run_steps, plan.problem, source=source
        )
        warning = publish_run_length(plan.settings, outcome.summary)  # In the dashboard's study note too.
        if warning:
            session.note(warning)
    if outcome.summary is not None:
        if args.best_out:  # Before printing: a reader that went away (| head -1) must not cost the file.
            write_best_json(outcome.summary, args.best_out)
        print(outcome.headline)
        print(format_summary(outcome.summary, args.paste))
    if outcome.error is not None:
        return session.fail(outcome.error, outcome.code)
    return outcome.code


def _print_notes(session: Session, plan: RunPlan) -> None:
    from search.core import growth_note

    settings = plan.settings
    for note in plan.warnings:
        session.note(f"warning: {note}")
    if settings.run.amp_dtype == "bfloat16":
        session.note(
            "note: bfloat16 has float32's exponent range, so loss scaling rarely matters; "
            "expect the scaler settings to make little difference"
        )
    note = growth_note(settings.space, plan.steps_per_trial)
    if note:
        session.note(f"note: {note}")
    if settings.run.workers > 4 and settings.run.storage.startswith("sqlite"):
        session.note(
            f"note: {settings.run.workers} workers on SQLite: it serialises every write; "
            "beyond 4 workers, or on several hosts, use PostgreSQL or MySQL"
        )


if __name__ == "__main__":
    sys.exit(main())
