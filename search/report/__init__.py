"""``python -m search.report``: one self-contained HTML page (or JSON) about a study.

``python -m search.report [--storage URL] [--study-name NAME] [--out report.html] [--format html|json]``
reads the study once (a consistent snapshot, so a study that is still running can be reported at
any time: RUNNING and WAITING trials are ignored, PRUNED and FAIL trials only counted) and writes:

1. the optimisation history; 2. parameter importances; 3. slice plots and a contour plot of
init_scale × backoff_factor (log axis, powers of two as ticks); 4. parallel coordinates; 5. loss
and scale curves of the best trial, the seed's default (``seed-1``) and the worst finite trial;
6. a histogram of skipped steps; 7. the seed's five configurations next to the best; 8. the safe
range of every setting; 9. a recommended, robust setting as a ``torch.amp.GradScaler(...)`` line;
10. the confirmation runs of ``search.confirm``, when there are any.

Plots come from :mod:`optuna.visualization` where it has one, run on an in-memory copy of the
snapshot; the numbers (safe ranges, recommendation) from :mod:`search.analysis`. A plot that needs
more trials than the study has is replaced by a visible message box. plotly.js is embedded once,
so the page opens from disk without a network. ``--format json`` writes the same numbers.

Exit codes: 0 written, 2 bad input (unknown flag, unreachable storage, missing study, several
studies and no ``--study-name``, unwritable ``--out``): one line on stderr, nothing written.
Passwords in URLs are masked in every message.

One job per module: :mod:`~search.report.reading` reads the study once;
:mod:`~search.report.visualization` (Optuna's plots), :mod:`~search.report.runs` (curves, skipped
steps) and :mod:`~search.report.tables` build the sections (:mod:`~search.report.section`);
:mod:`~search.report.build` puts them and the JSON numbers together; :mod:`~search.report.page`
renders the HTML; :mod:`~search.report.writing` checks and writes the output file;
:mod:`~search.report.command` is the command line, run by ``__main__``. The names below are the
package's API; its modules import each other directly, never through this package.
"""

from search.report.build import Report, build_report, report_json
from search.report.command import build_parser, main
from search.report.page import render_html
from search.report.reading import ReportError, StudySnapshot, load_snapshot
from search.report.section import SECTION_TITLES, Section
from search.report.visualization import MIN_CONTOUR_TRIALS, MIN_IMPORTANCE_TRIALS
from search.report.writing import write_report

__all__ = [
    "MIN_CONTOUR_TRIALS",
    "MIN_IMPORTANCE_TRIALS",
    "Report",
    "ReportError",
    "SECTION_TITLES",
    "Section",
    "StudySnapshot",
    "build_parser",
    "build_report",
    "load_snapshot",
    "main",
    "render_html",
    "report_json",
    "write_report",
]
