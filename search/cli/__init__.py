"""The command skeleton the five commands share: their first seconds, argument parsing, one-line errors.

* ``_startup``: a command's first seconds (imports): SIGINT/SIGTERM end it with one line, exit 130/143;
* ``_command``: one call of a command: ``--help``, one-line errors and exit codes, signals,
  closing its storages, a standard output closed by its reader (exit 141);
* ``_parsing``: an argparse that raises :class:`~search.core.UsageError`, ``fail`` (the one-line
  error), the checks of output paths, percentages and run lengths, the name a command is called by;
* ``_knob_flags``: a rule's setting from GradScaler's flags and ``--knob NAME=VALUE``, each value checked.

Nothing here imports torch or Optuna: ``search/__init__`` guards start-up through this package
before anything heavy is imported.
"""

from search.cli._command import READER_GONE, Session, run_command, stdout_reader_gone, unreachable_line
from search.cli._knob_flags import setting_from_flags
from search.cli._parsing import (
    OneLineParser,
    add_checkpoint_flag,
    check_output,
    check_run_length,
    fail,
    percent,
    prog_name,
)
from search.cli._startup import COMMANDS, command_being_started, guard, started

__all__ = [
    "COMMANDS",
    "OneLineParser",
    "READER_GONE",
    "Session",
    "add_checkpoint_flag",
    "check_output",
    "check_run_length",
    "command_being_started",
    "fail",
    "guard",
    "percent",
    "prog_name",
    "run_command",
    "setting_from_flags",
    "started",
    "unreachable_line",
    "stdout_reader_gone",
]
