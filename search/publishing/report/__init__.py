"""The HTML (or JSON) report of one study, which ``python -m search.report`` writes.

One job per module: ``_reading`` reads the study once (a consistent snapshot); ``_visualization``
(Optuna's plots), ``_runs`` (curves, skipped steps) and ``_tables`` build the sections
(``_section``); ``_build`` puts them and the JSON numbers together; ``_page`` renders the HTML;
``_writing`` checks and writes the output file. Its modules import each other directly, never
through this package.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_reading": ("ReportError", "StudySnapshot", "load_snapshot"),
        "_section": ("SECTION_TITLES", "Section"),
        "_visualization": (
            "MIN_CONTOUR_TRIALS",
            "MIN_IMPORTANCE_TRIALS",
            "PARALLEL_MAX_LABELS",
            "PARALLEL_MIN_GAP",
            "tidy_parallel_ticks",
        ),
        "_build": ("Report", "build_report", "report_json"),
        "_page": ("render_html",),
        "_writing": ("write_report",),
    },
)
