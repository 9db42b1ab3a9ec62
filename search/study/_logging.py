"""The search's warnings on stderr, one line each, the storage URL's password masked."""

from __future__ import annotations

import logging
import sys

from search.storage import RDB_STORAGE_LOGGER, redact


class _Redact(logging.Filter):
    """Masks the storage URL's password in every log record."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def filter(self, record: logging.LogRecord) -> bool:
        if self.url:
            record.msg, record.args = redact(record.getMessage(), self.url), ()
        return True


def log_warnings(url: str, prefix: str) -> None:
    """Sends the ``search`` logger's warnings to stderr as ``PREFIX: warning: ...``, ``url`` masked."""
    logger = logging.getLogger("search")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: warning: %(message)s"))
    handler.addFilter(_Redact(url))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    # psycopg's own warnings while a server is away ("error ignored terminating <psycopg.Pipeline
    # [BAD]>: the connection is lost") would reach stderr through logging's last-resort handler, as
    # a second line about an outage our retry line already reports.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    # Likewise Optuna's "Caught an error from sqlalchemy … Falling back to a slower alternative": its
    # trial read takes a dropped connection for a too-long IN list; search.storage._retry handles what
    # follows.
    logging.getLogger(RDB_STORAGE_LOGGER).setLevel(logging.ERROR)
