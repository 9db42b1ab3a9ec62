"""The HTML (or JSON) report of one study, which ``python -m search.report`` writes.

One job per module: ``_reading`` reads the study once (a consistent snapshot); ``_visualization``
(Optuna's plots), ``_runs`` (curves, skipped steps) and ``_tables`` build the sections
(``_section``); ``_build`` puts them and the JSON numbers together; ``_page`` renders the HTML;
``_writing`` checks and writes the output file. Its modules import each other directly, never
through this package.
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.publishing.report._writing import write_report

# Loaded on first use: _reading imports optuna, the others plotly.
if TYPE_CHECKING:
    from search.publishing.report._build import Report, build_report, report_json
    from search.publishing.report._page import render_html
    from search.publishing.report._reading import ReportError, ReportSnapshot, load_snapshot
    from search.publishing.report._section import SECTION_TITLES, Section
    from search.publishing.report._visualization import (
        MIN_CONTOUR_TRIALS,
        MIN_IMPORTANCE_TRIALS,
        PARALLEL_MAX_LABELS,
        PARALLEL_MIN_GAP,
        tidy_parallel_ticks,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "MIN_CONTOUR_TRIALS",
    "MIN_IMPORTANCE_TRIALS",
    "PARALLEL_MAX_LABELS",
    "PARALLEL_MIN_GAP",
    "Report",
    "ReportError",
    "ReportSnapshot",
    "SECTION_TITLES",
    "Section",
    "build_report",
    "load_snapshot",
    "render_html",
    "report_json",
    "tidy_parallel_ticks",
    "write_report",
]
