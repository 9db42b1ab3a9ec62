"""Storage URLs as text: masking their secrets in every message, and the SQLite file they name.

No database is opened here, so the commands can check and print URLs without importing Optuna.
"""

from __future__ import annotations

import os
import re

from sqlalchemy.engine import make_url

# Query parameters that carry a secret: libpq and the MySQL drivers take ``password``/``passwd`` there too.
_SECRET_KEY = r"[^=&?#\s]*(?:pass|pwd|secret|token)[^=&?#\s]*"
_SECRET_QUERY = re.compile(rf"([?&]{_SECRET_KEY}=)[^&#\s'\"]*", re.IGNORECASE)


# Said after a printed command whose storage URL had a password, which every message masks: the command as
# printed cannot log in.
PASSWORD_MASKED = "(with your password in place of ***)"


def mask_url(url: str) -> str:
    """Returns ``url`` with its password, and any secret query parameter (``?password=``), as ``***``."""
    try:
        rendered = make_url(url).render_as_string(hide_password=True)
    except Exception:  # Not a URL SQLAlchemy can parse: mask anything like user:pass@.
        rendered = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return _SECRET_QUERY.sub(r"\1***", rendered)


def _secrets(url: str) -> list[str]:
    """The password of ``url`` and the values of its secret query parameters."""
    try:
        parsed = make_url(url)
    except Exception:
        return []
    found = [parsed.password] if parsed.password else []
    for key, value in parsed.query.items():
        if re.fullmatch(_SECRET_KEY, key, re.IGNORECASE):
            found += [value] if isinstance(value, str) else list(value)
    return [str(v) for v in found if v]


def redact(text: str, url: str) -> str:
    """Removes the secrets of ``url`` (and the raw URL) from an arbitrary message.

    A secret is replaced where it stands alone, not inside a longer word, and never inside the masked
    URL itself: a password ``postgres`` must not turn ``postgresql+psycopg://postgres:***@`` into
    ``***ql+psycopg://***:***@``.
    """
    masked = mask_url(url)
    text = text.replace(url, masked)
    secrets = sorted(set(_secrets(url)), key=len, reverse=True)
    if not secrets:
        return text
    alone = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, secrets)) + r")(?![A-Za-z0-9])")
    return masked.join(alone.sub("***", part) for part in text.split(masked))


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL; None for other databases, in-memory SQLite and ``file:`` URIs."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    return None if database in ("", ":memory:") or database.startswith("file:") else database


def is_read_only(url: str) -> bool:
    """Whether ``url`` is an existing SQLite file this process cannot write: the file, or its directory
    (where SQLite writes its -wal/-shm or journal), is not writable -- read-only media, an immutable
    file (``chattr +i``, which holds even for root), or permissions."""
    try:
        path = sqlite_path(url)
    except Exception:  # Not a URL: open_storage says so.
        return False
    if path is None or not os.path.isfile(path):
        return False
    return not (os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK))


def first_line(error: BaseException) -> str:
    """The first line of an error's message (driver errors run to many lines), or its type."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
