"""``python -m search.confirm``: is the best setting of a finished search really better than the default?

A search ranks settings on one seed: one data set and one set of initial weights. The winner may
simply be lucky on that seed. This command re-runs the top-k configurations of a finished study,
the search's recommendation and the default (PyTorch's GradScaler settings, or under ``--scaler
deepspeed|megatron|fairseq`` that framework's own; :func:`search.results.select_candidates`) on K new seeds:
seed ``s`` in ``study_seed + 1 ... study_seed + K`` builds the study's task with new data and new initial
weights. The comparison with the default is paired by seed: a two-sided paired t-test
(``scipy.stats.ttest_rel``, alpha
0.05), so a default that is significantly better is said so too; ``search.report`` then lets these
runs decide the recommendation. Then the corners of the ranges that may be safe together are
trained on the search's own data (``--no-corners`` skips them; a framework study's answer is one
setting, with no ranges to check).

The runs are stored apart from the search, in a sibling study ``<study>.confirm`` of the same
storage; a (configuration, seed) pair already stored is never run again, so an interrupted
confirmation resumes and a larger ``--top``/``--seeds`` adds only what is missing. What is checked
before anything is written: :func:`search.confirmation.plan_confirmation`; the runs and what they store:
:func:`search.confirmation.run_confirmation`; reading them back: :mod:`search.results._confirmations`.
This command parses the arguments, prints the table and chooses the exit code.

Exit codes: 0 done, 1 a storage or training failure during the runs, 2 bad input (one line on
stderr, nothing written), 130/143 interrupted by SIGINT/SIGTERM (finished runs are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import optuna
import sqlalchemy.exc

from search.cli import (
    OneLineParser,
    Session,
    check_output,
    fail,
    percent,
    prog_name,
    run_command,
    stdout_reader_gone,
)
from search.confirmation import ConfirmationPlan, ConfirmError, plan_confirmation
from search.core import (
    Interrupted,
    UsageError,
    raise_pending,
    resolve_device,
)
from search.results import (
    DEFAULT_TOLERANCE,
    FRAMEWORKS,
    answer_form,
    collect_runs,
    confirmation_data,
    counted_steps,
    format_confirmation,
    format_verdict,
    summarize,
    summarize_confirmation,
)
from search.scalers import RULES
from search.storage import (
    StorageError,
    close_storage,
    first_line,
    mask_url,
    open_existing_storage,
    redact,
)
from search.tasks import TaskError

__all__ = ["build_parser", "main"]

PROG = "search.confirm"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.confirm"),
        description=(
            "Re-run the top configurations of a finished search and the default (PyTorch's GradScaler"
            " settings, or a framework study's own default) on new data/initialisation seeds, stored in the"
            " sibling study <study>.confirm, and test whether the best beats the default beyond seed noise."
        ),
        allow_abbrev=False,
    )
    add = p.add_argument
    add(
        "--storage",
        metavar="URL",
        default="sqlite:///study.db",
        help="Optuna storage URL [sqlite:///study.db]",
    )
    add("--study-name", default=None, help="the search study [the storage's only search study]")
    add("--top", type=int, default=3, metavar="K", help="confirm the K best distinct configurations [3]")
    add(
        "--seeds",
        type=int,
        default=5,
        metavar="K",
        help="data/initialisation seeds: study seed + 1 ... + K (K >= 2) [5]",
    )
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N; auto = cuda if available [auto]")
    add(
        "--tolerance",
        type=percent,
        default=DEFAULT_TOLERANCE * 100,
        metavar="PCT",
        help=(
            "good: objective within PCT%% of the best, as search.report's --tolerance; picks the "
            "recommendation to confirm and the ranges to check [1]"
        ),
    )
    add(
        "--run-steps",
        type=int,
        default=None,
        metavar="N",
        help="your run's length: the verdict's answer and the default each train N steps, their skips shown",
    )
    add(
        "--no-corners",
        action="store_true",
        help=(
            "do not train the corners of the ranges that may be safe together (up to 16 runs a box, "
            "on the search's own data)"
        ),
    )
    add(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help=(
            "torch intra-op threads; 0: 1 thread, or OMP_NUM_THREADS when set (threads that share cores "
            "with another process stall at every barrier, as for search.optimize) [0]"
        ),
    )
    add("--json", metavar="PATH", default=None, help="write the confirmation's numbers as JSON")
    add(
        "--paste",
        choices=tuple(FRAMEWORKS),
        default=None,
        help="whose line the verdict of a GradScaler study shows: "
        + ", ".join(FRAMEWORKS)
        + " [torch]; a DeepSpeed, Megatron-LM or fairseq study answers in that framework's own form",
    )
    add("--quiet", action="store_true", help="no progress bar")
    return p


def _plan(args: argparse.Namespace) -> ConfirmationPlan:
    """The arguments checked, the storage opened to write; the rest is checked by plan_confirmation."""
    if args.top < 1:
        raise ConfirmError(f"--top must be >= 1, got {args.top}")
    if args.seeds < 2:
        raise ConfirmError(f"--seeds must be >= 2 (a paired test needs two seeds), got {args.seeds}")
    if args.threads < 0:
        raise ConfirmError(f"--threads must be >= 0 (0: automatic), got {args.threads}")
    if args.run_steps is not None and args.run_steps < 1:
        raise ConfirmError(f"--run-steps must be >= 1, got {args.run_steps}")
    try:
        device = resolve_device(args.device)
    except RuntimeError as e:  # torch.device("tpu")
        raise ConfirmError(f"unknown device {args.device!r}: {first_line(e)}")
    except ValueError as e:  # search.optimize.UsageError: CUDA absent, index out of range.
        raise ConfirmError(str(e))
    if args.json:
        check_output("--json", args.json)

    url = args.storage
    try:
        storage = open_existing_storage(url, immediate=True)  # It writes the sibling study.
    except StorageError as e:
        raise ConfirmError(str(e))
    _OPENED.append(storage)

    import torch  # Set before the task is built, as search.optimize does: every run of this process uses it.

    from search.study import threads_per_process

    torch.set_num_threads(threads_per_process(args.threads))
    plan = plan_confirmation(
        storage,
        url,
        args.study_name,
        top=args.top,
        n_seeds=args.seeds,
        device=device,
        tolerance=args.tolerance / 100,
    )
    if args.paste is not None and args.paste not in answer_form(plan.settings.run.scaler).paste_forms:
        raise ConfirmError(
            f"--paste {args.paste}: study {plan.study_name!r} searched"
            f" {RULES[plan.settings.run.scaler].title}'s own rule, whose answer is that framework's own"
            " config; --paste picks among GradScaler's forms"
        )
    return plan


def _fail(message: str, code: int = 2) -> int:
    return fail(PROG, message, code)


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


_OPENED: list[optuna.storages.RDBStorage] = []


def _close_all_storages() -> None:
    for storage in _OPENED:
        close_storage(storage)
    _OPENED.clear()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (141: standard output closed by its reader)."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    session.on_close(_close_all_storages)
    args = build_parser().parse_args(argv)
    url = args.storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        plan = _plan(args)
    except UsageError as e:  # ConfirmError, and choose_study's errors.
        return _fail(redact(str(e), url))
    except Exception as e:  # An unexpected failure while reading the study is still bad input.
        return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
    try:
        code = _run(plan, args)
        if code == 0:
            raise_pending()  # Recorded outside the training (search.cli._startup): not a success.
        return code
    except Interrupted as e:
        _note(f"interrupted by {e}; finished runs are stored, run the same command again to resume")
        return 128 + e.signum
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError, OSError) as e:
        if isinstance(e, BrokenPipeError) and stdout_reader_gone():
            raise  # Not a storage failure: the command's reader went away (run_command exits 141).
        return _fail(f"storage {mask_url(url)} failed: {redact(first_line(e), url)}", 1)
    except TaskError as e:
        return _fail(redact(str(e), url), 1)
    except Exception as e:  # Training failed (CUDA out of memory, a user loss that raises).
        return _fail(f"a confirmation run failed: {type(e).__name__}: {redact(first_line(e), url)}", 1)


def _run(plan: ConfirmationPlan, args: argparse.Namespace) -> int:
    """Runs what the plan left to run, then prints the confirmation table (and writes ``--json``)."""
    settings, storage = plan.settings, plan.storage
    url = args.storage
    for note in plan.notes:
        _note(f"note: {note}")
    from search.confirmation import run_confirmation  # Trains, so imports torch: not for --help or bad input.

    runs = run_confirmation(
        plan, top=args.top, corners=not args.no_corners, tolerance=args.tolerance / 100, quiet=args.quiet
    )
    done, seconds = runs.made, runs.seconds

    collected = collect_runs(storage, plan.study_name)
    assert collected is not None
    seeds, stats, corners = collected
    steps = counted_steps(settings.run.epochs, settings.run.steps, plan.trials)
    seeded = "new data and initial weights each"
    if settings.run.checkpoint:  # The weights are the checkpoint's: only the data are new.
        from search.core import FIRST_STEP

        first = next((t.user_attrs[FIRST_STEP] for t in plan.trials if FIRST_STEP in t.user_attrs), 0)
        seeded = f"new data each, every run from step {first} of checkpoint {settings.run.checkpoint}"
    print(f"Confirmation of study {plan.study_name!r} ({plan.n_complete} complete trials) in {mask_url(url)}")
    print(
        f"  {len(plan.candidates)} configs x {len(seeds)} seeds (data seeds {seeds[0]}..{seeds[-1]}: "
        f"{seeded}), "
        + (f"{steps} optimizer steps" if steps else f"{settings.run.epochs} epochs")
        + f", {settings.run.amp_dtype} on {plan.device.type}"
        + f", {RULES[settings.run.scaler].title}'s loss-scale rule"
    )
    stored = len(plan.candidates) * len(seeds)
    if done:
        print(
            f"  this run: {done} runs in {seconds:.1f} s of training, start-up not counted; stored in study"
            f" {runs.study_name!r}"
        )
    else:
        print(f"  this run: nothing to run, all {stored} runs are already in study {runs.study_name!r}")
    print()
    print(format_confirmation(seeds, stats, settings, plan.baselines))
    data = confirmation_data(seeds, stats, corners)
    # The verdict now, from the same summary search.optimize prints (and the study's dashboard note,
    # rewritten here): after confirmation, every output of the study says the same.
    study = optuna.load_study(study_name=plan.study_name, storage=storage)
    summary = summarize(study, settings.space, summarize_confirmation(storage, plan.study_name), plan.trials)
    summary["storage"] = mask_url(url)
    run_steps = args.run_steps or (plan.first_problem.run_steps if plan.first_problem else None)
    if run_steps:  # The flag, else what the task declares.
        from search.study import measure_run_length

        source = "--run-steps" if args.run_steps else "the task's run_steps"
        _note(f"training the answer and the default {run_steps} steps each ({source})")
        summary["run_length"] = measure_run_length(
            settings, summary, run_steps, device=plan.device, source=source
        )
    print()
    print("\n".join(format_verdict(summary, args.paste or "torch")))
    from search.publishing import publish  # Plotly: only once the runs are done.

    try:
        publish(study, plan.trials, summary)
    except Exception as e:  # The runs are stored; only the dashboard's note is behind.
        _note(f"warning: dashboard note not updated: {redact(first_line(e), url)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
