"""``python -m search.diagnose``: whether loss scaling is a run's problem at all, and which one, in seconds.

Two ways in:

* **a task** (the same ``--task``, ``--device``, ``--epochs``/``--steps`` and ``--seed`` as
  ``search.optimize``) and the settings you train with today (``--init-scale`` ... ``--growth-interval``,
  PyTorch's defaults unless given; or ``--scaler deepspeed|megatron|fairseq`` with ``--knob NAME=VALUE``): it
  trains those settings in fp16, an fp32 control and a bf16 control (:mod:`search.diagnosis`), and prints the
  scale trace, every skipped step with what overflowed, each parameter's gradient magnitudes against fp16's
  range, the forward pass's largest activation against 65504, and a verdict; ``--json`` and ``--html`` write
  it for a program and for a person, and ``--storage``/``--study-name`` record it in the study
  ``search.optimize`` would use (checked first: a study of another run refuses it before anything trains),
  where ``search.optimize --from-diagnosis`` starts from it;
* **a log** (``--log FILE``): the loss-scaler lines of a DeepSpeed, apex or fairseq run, read without
  re-running
  it: skipped steps, the scale over time, when it settled, whether it reached the minimum, and the verdict a
      log
  can support (``healthy``, ``chronic-skipping``, ``scale-collapse``); a log cannot show an underflow nor a
  forward overflow, and the command says so. This way never imports torch.

This command parses the arguments, prints and chooses the exit code.

Exit codes: 0 diagnosed (whatever the verdict), 2 bad input (one line on stderr, nothing written), 130/143
interrupted.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence

from search.cli import (
    OneLineParser,
    Session,
    add_checkpoint_flag,
    check_output,
    check_run_length,
    fail,
    prog_name,
    run_command,
    setting_from_flags,
)
from search.core import UsageError, interrupts_as_exceptions, raise_pending

__all__ = ["build_parser", "main"]

PROG = "search.diagnose"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name(PROG),
        description=(
            "Say in seconds whether loss scaling is a run's problem, and which one: train your settings in"
            " fp16 beside fp32 and bf16 controls on a task, or read a DeepSpeed, apex or fairseq log (--log)."
        ),
        allow_abbrev=False,
    )
    add = p.add_argument
    run = p.add_argument_group("a training diagnosis (the default)")
    run.add_argument(
        "--task", default=None, metavar="NAME", help="a built-in task or package.module:callable [seed-mlp]"
    )
    run.add_argument(
        "--config", metavar="PATH", default=None, help="TOML config, as search.optimize reads it"
    )
    run.add_argument("--device", default=None, help="auto, cpu, cuda or cuda:N [auto]")
    run.add_argument(
        "--epochs", type=int, default=None, metavar="N", help="passes over the data [the task's default]"
    )
    run.add_argument(
        "--seed", type=int, default=None, metavar="N", help="task seed: data and initial weights [42]"
    )
    add_checkpoint_flag(run.add_argument)
    run.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch intra-op threads; 0: 1, or OMP_NUM_THREADS [0]",
    )
    run.add_argument(
        "--scaler",
        default=None,
        metavar="RULE",
        help="whose loss-scale rule: torch (GradScaler), deepspeed, megatron, fairseq [torch]",
    )
    for flag, kind, default in _TORCH_FLAGS:
        run.add_argument(
            flag,
            type=kind,
            default=None,
            metavar="N" if kind is int else "X",
            help=f"GradScaler's {flag[2:].replace('-', '_')} [{default}]",
        )
    run.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of the --scaler rule by its own name (initial_scale_power=12); repeatable",
    )
    run.add_argument(
        "--html",
        metavar="PATH",
        default=None,
        help="write the diagnosis as an HTML page (scale trace, skips, gradient ranges)",
    )
    run.add_argument(
        "--storage",
        default=None,
        metavar="URL",
        help=(
            "record the diagnosis in this Optuna storage, in the study search.optimize would use; "
            "search.optimize --from-diagnosis then starts from it [--study-name alone: the config's "
            "storage, else sqlite:///study.db]"
        ),
    )
    run.add_argument(
        "--study-name",
        default=None,
        metavar="NAME",
        help="record the diagnosis in this study [the task's default study]",
    )
    add(
        "--log",
        metavar="FILE",
        default=None,
        help="read this training log instead of training ('-': standard input)",
    )
    add(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help=(
            "a training diagnosis: optimizer steps to train [as the epochs make]; --log: the steps the log"
            " covers, for a log that numbers none (apex; a step number in the log wins where it is larger)"
        ),
    )
    add(
        "--run-steps",
        type=int,
        default=None,
        metavar="N",
        help=(
            "a training diagnosis: your run's length; these settings and the suggestion each train N steps"
            " more, their skipped steps shown"
        ),
    )
    add(
        "--json",
        metavar="PATH",
        default=None,
        help="write the diagnosis as JSON (verdict, skipped_steps, ...)",
    )
    return p


# GradScaler's four settings as flags: (flag, type, PyTorch's default as help shows it). The defaults the
# diagnosis uses are GradScaler's knobs' (search.scalers); a test holds these to them, and importing the
# scalers here would cost every --help and bad-input exit its start-up.
_TORCH_FLAGS = (
    ("--init-scale", float, "65536"),
    ("--growth-factor", float, "2"),
    ("--backoff-factor", float, "0.5"),
    ("--growth-interval", int, "2000"),
)
_TRAINING_ONLY = (
    "task",
    "checkpoint",
    "run_steps",
    "config",
    "device",
    "epochs",
    "seed",
    "threads",
    "scaler",
    "init_scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "html",
    "storage",
    "study_name",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_run_length(args)  # --log's --steps too: the steps a log covers are at least one.
        if args.json:
            check_output("--json", args.json)
        if args.log is None:
            return _training(session, args)
        given = [name for name in _TRAINING_ONLY if getattr(args, name) is not None] + (
            ["knob"] if args.knob else []
        )
        if given:
            raise UsageError(
                f"--{given[0].replace('_', '-')} is for a training diagnosis; --log reads a log without"
                " training"
            )
        reading, source = _read(args)
    except UsageError as e:
        return fail(PROG, str(e))
    text = json.dumps({"log": source, **reading.to_dict()}, indent=2, allow_nan=False) if args.json else None
    raise_pending()  # A Ctrl-C while a long log was read: exit 130, nothing written.
    from search.diagnosis import format_reading

    print("\n".join(format_reading(reading, source)))
    if text is not None:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


def _read(args: argparse.Namespace):  # noqa: ANN202 (search.diagnosis.LogReading, lazily imported)
    from search.diagnosis import LogError, read_log_file

    try:
        return read_log_file(args.log, args.steps)
    except LogError as e:
        raise UsageError(str(e)) from None


def _training(session: Session, args: argparse.Namespace) -> int:
    """A training diagnosis: bad input before torch, then the three runs, then the lines and files."""
    from search.core import ConfigError, load_settings
    from search.tasks import TaskError, task_target

    overrides = {
        "task": args.task,
        "device": args.device,
        "epochs": args.epochs,
        "steps": args.steps,
        "seed": args.seed,
        "checkpoint": args.checkpoint,
        "threads": args.threads,
        "scaler": args.scaler,
        "storage": args.storage,
        "study_name": args.study_name,
    }
    session.urls.append(args.storage or "")
    try:
        settings = load_settings(args.config, overrides)
        session.urls.append(settings.run.storage)  # Also from --config: every message masks its password.
        task_target(settings.run.task)
    except (ConfigError, TaskError) as e:
        raise UsageError(str(e)) from None
    recording = args.storage is not None or args.study_name is not None
    setting, chosen = _setting(args, settings.run.scaler)
    if args.html:
        check_output("--html", args.html)

    import torch  # From here on the task is trained.

    from search.core import device_label, resolve_device
    from search.diagnosis import (
        TrainingDiagnosis,
        checkpoint_setting,
        diagnose_training,
        diagnosis_run_length,
        format_training,
    )
    from search.study import threads_per_process
    from search.tasks import build_problem, resolve_task
    from search.training import run_steps

    run = settings.run
    torch.set_num_threads(threads_per_process(run.threads))
    try:
        device = resolve_device(run.device)
    except RuntimeError as e:  # torch.device("tpu")
        raise UsageError(f"unknown device {run.device!r}: {str(e).splitlines()[0]}") from None
    try:
        problem = build_problem(resolve_task(run.task), run.task, run.seed, run.checkpoint).to(device)
        epochs = run.epochs or getattr(problem, "epochs", 0)
        steps = run_steps(problem, epochs, run.steps)
    except TaskError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # --epochs for a task that runs steps.
        raise UsageError(f"--epochs {run.epochs}: {e}") from None
    if recording:  # Checked before the runs: a study of another run refuses the diagnosis at once.
        import optuna

        from search.core import IncompatibleStudyError
        from search.diagnosis import DiagnosedRun, open_for_recording
        from search.storage import StorageError

        optuna.logging.set_verbosity(
            optuna.logging.WARNING
        )  # Not "A new study created": the line below says it.
        diagnosed = DiagnosedRun(run.task, run.seed, run.scaler, steps, problem.fingerprint(steps))
        try:
            target = open_for_recording(
                settings, diagnosed, lambda epochs, steps: run_steps(problem, epochs, steps), session.keep
            )
        except (StorageError, IncompatibleStudyError) as e:
            raise UsageError(str(e)) from None
    setting, continued = checkpoint_setting(problem, setting, chosen)
    if problem.start is not None:  # First: every number below is of the run from there.
        as_run = "; these settings: its own scaler, continued (a setting's flags diagnose a restart)"
        session.note(problem.start.first_line(steps) + (as_run if continued else ""))
        start = problem.start
        about_saved = start.other_rule(run.scaler) or start.scaler_unusable()
        for line in filter(None, (start.scaler_assumed() if continued else "", about_saved)):
            session.note(f"note: {line}")
    session.note(
        f"training {steps} steps three times: these settings in fp16, an fp32 and a bf16 control (then the"
        " setting it suggests, if any, before it is suggested)"
    )
    # Ctrl-C: one line, exit 130, nothing recorded or written (a raise lost in a __del__ during training is
    # raised again by the observer at the next step, or after the runs).
    with interrupts_as_exceptions():
        trained = dict(epochs=epochs, steps=run.steps or None, penalty=settings.penalty)
        runs, verdict = diagnose_training(problem, setting, **trained, continue_scaler=continued)
        run_steps = args.run_steps or problem.run_steps  # The flag, else what the task declares.
        source = "--run-steps" if args.run_steps else "the task's run_steps"
        over = None
        if run_steps:
            over = diagnosis_run_length(problem, setting, verdict, run_steps, source, continued)
    values = dict(setting.values)
    where = "" if problem.start is None else problem.start.where
    where += ", its scaler continued" if continued else ""
    diagnosis = TrainingDiagnosis(
        run.task, run.seed, device_label(device), run.scaler, values, runs, verdict, over, where
    )
    # Everything written is made before anything is printed: a reader that goes away costs no file.
    text = json.dumps(diagnosis.to_dict(), indent=2, allow_nan=False) if args.json else None
    page = None
    if args.html:
        from search.publishing import diagnosis_page

        page = diagnosis_page(diagnosis)
    recorded = []
    raise_pending()  # A signal that came after the runs: nothing is recorded or written either.
    if recording:
        from search.diagnosis import diagnosis_record, recorded_line

        record = diagnosis_record(diagnosis.to_dict(), diagnosed.fingerprint)
        recorded = [
            recorded_line(run.storage, target.storage, target.study_name, record, session.keep),
            _search_line(args, record, settings, target.searched),
        ]
    print("\n".join(format_training(diagnosis) + recorded))
    for path, content in ((args.json, text), (args.html, page)):
        if path and content is not None:
            with open(path, "w") as f:
                f.write(content + "\n")
    return 0


# The flags that say which run was diagnosed, repeated in the search command a recorded diagnosis suggests.
_RUN_FLAGS = ("config", "storage", "study_name", "task", "epochs", "steps", "seed", "scaler", "checkpoint")


def _search_line(args: argparse.Namespace, record: dict, settings, searched: bool) -> str:  # noqa: ANN001
    """The command that searches from the recorded diagnosis, with the flags given here (passwords masked), or
    why there is none. ``settings``: this run's (search.core.Settings)."""
    from search.diagnosis import why_no_search
    from search.storage import PASSWORD_MASKED, mask_url

    reason = why_no_search(record, settings, searched)
    if reason:
        return f"    no search from it: {reason}"
    words = [prog_name(PROG).replace("diagnose", "optimize")]
    for name in _RUN_FLAGS:
        value = getattr(args, name)
        if value is not None:
            words += [f"--{name.replace('_', '-')}", mask_url(value) if name == "storage" else str(value)]
    # A healthy verdict finds nothing to fix: a search is the user's choice, not the advice.
    lead = "to search around it anyway" if record["verdict"] == "healthy" else "to search from it"
    line = f"    {lead}: " + " ".join(words[:1] + [shlex.quote(w) for w in words[1:]]) + " --from-diagnosis"
    masked = args.storage is not None and mask_url(args.storage) != args.storage
    return f"{line} {PASSWORD_MASKED}" if masked else line


def _setting(args: argparse.Namespace, scaler: str):  # noqa: ANN202 (ScalerConfig | RuleSetting, bool)
    """The settings to diagnose, from the flags (:func:`search.cli.setting_from_flags`), and whether the
    user chose any (a checkpoint's own scaler is diagnosed otherwise)."""
    flags = {flag: getattr(args, flag[2:].replace("-", "_")) for flag, _, _ in _TORCH_FLAGS}
    chosen = bool(args.knob) or any(value is not None for value in flags.values())
    return setting_from_flags(scaler, flags, args.knob), chosen


if __name__ == "__main__":
    sys.exit(main())
