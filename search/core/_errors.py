"""The errors every layer raises for bad input."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input found by a command or the library under it: reported as one line, exit code 2."""


class IncompatibleStudyError(ValueError):
    """Resuming a study with settings that would make its trials incomparable."""
