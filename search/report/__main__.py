"""``python -m search.report``: runs :func:`search.report.command.main`.

The command lives in :mod:`search.report.command`, not here, so that the package can export
``main`` (the ``search-report`` console script) without importing ``__main__`` before runpy runs it.
"""

import sys

from search.report.command import main

if __name__ == "__main__":
    sys.exit(main())
