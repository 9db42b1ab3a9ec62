"""What the commands share: one-line errors, an argparse that raises, picking the study to read."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from search.core import UsageError


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` whose errors raise :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def fail(prog: str, message: str, code: int = 2) -> int:
    """Prints ``PROG: error: MESSAGE`` (its first line) on stderr and returns ``code``."""
    line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"{prog}: error: {line}", file=sys.stderr)
    return code


def percent(text: str) -> float:
    """argparse type of ``--tolerance``: a percentage in [0, 100)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not math.isfinite(value) or not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"must be a percentage in [0, 100), got {text}")
    return value


def add_checkpoint_flag(add: Callable[..., object]) -> None:
    """``--checkpoint PATH``, as search.optimize and search.diagnose take it."""
    add(
        "--checkpoint",
        metavar="PATH",
        default=None,
        help=(
            "continue your run from its checkpoint (a Hugging Face Trainer checkpoint-N directory, a"
            " Lightning .ckpt or a torch.save dict; docs/tasks.md): every run starts from its weights,"
            " optimizer, schedule and step; the task builds the model and the data [the initial weights]"
        ),
    )


def check_run_length(args: argparse.Namespace) -> None:
    """Raises :class:`UsageError` for ``--epochs``, ``--steps`` or ``--run-steps`` below 1. A config's 0
    means the task's own default; typed as a flag it is a slip that would run a whole study of the default
    length."""
    for name in ("epochs", "steps", "run_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def check_output(flag: str, path: str) -> None:
    """Raises :class:`UsageError` unless ``path``'s directory exists and is writable (checked before
    anything is written, so bad input leaves nothing behind)."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path}: directory {parent} does not exist or is not writable")
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory, not a file")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: the file is not writable")
        return
    # os.access trusts root and pseudo file systems (/proc): only creating the file tells. It is
    # removed at once, so bad input still leaves nothing behind.
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot be created ({e.strerror})") from None
    os.unlink(path)


def prog_name(module: str) -> str:
    """The command's name in usage lines: the console script's (``search-optimize``) when run as
    one, else ``python -m search.optimize``."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script.startswith("search-") else f"python -m {module}"
