"""The output file, written atomically.

``--out`` is checked before the study is read (:func:`search.cli._parsing.check_output`), so an unwritable
path fails before the (possibly long) read; writing a temporary file and renaming it leaves nothing
behind when writing fails.
"""

from __future__ import annotations

import os
import tempfile


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
