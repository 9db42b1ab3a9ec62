"""The command skeleton the five commands share: their first seconds, argument parsing, one-line errors.

* ``_startup``: a command's first seconds (imports): SIGINT/SIGTERM end it with one line, exit 130/143;
* ``_command``: one call of a command: ``--help``, one-line errors and exit codes, signals,
  closing its storages, a standard output closed by its reader (exit 141);
* ``_parsing``: an argparse that raises :class:`~search.core.UsageError`, ``fail`` (the one-line
  error), the checks of output paths, percentages and run lengths, the name a command is called by.

Nothing here imports torch or Optuna: ``search/__init__`` guards start-up through this package
before anything heavy is imported.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_startup": ("COMMANDS", "command_being_started", "guard", "started"),
        "_command": ("READER_GONE", "Session", "run_command", "stdout_reader_gone"),
        "_parsing": ("OneLineParser", "check_output", "check_run_length", "fail", "percent", "prog_name"),
    },
)
