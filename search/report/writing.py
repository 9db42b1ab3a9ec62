"""The output file: ``--out`` checked before the study is read, the text written atomically.

Checking first makes an unwritable ``--out`` fail before the (possibly long) read; writing a
temporary file and renaming it leaves nothing behind when writing fails.
"""

from __future__ import annotations

import os
import tempfile

from search.report.reading import ReportError


def _check_out(path: str) -> None:
    if os.path.isdir(path):
        raise ReportError(f"--out {path} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ReportError(f"--out {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ReportError(f"--out {path}: not writable")


def write_report(text: str, path: str) -> None:
    """Writes ``text`` to ``path`` atomically (a temporary file renamed), so a failure leaves nothing."""
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
