"""What a person looks at: figures, optuna-dashboard notes and trial pictures, and the HTML report.

* ``_figures``: plotly figures of training curves (shared by the dashboard and the report);
* ``_publish``: curves and notes published to optuna-dashboard (end of every run, and by the dashboard);
* ``_trial_pictures``: each trial's loss-and-scale SVG, an artifact the dashboard serves;
* ``_diagnosis_page``: the HTML page of a training diagnosis (``search.diagnose --html``);
* ``report/``: the HTML/JSON report ``search.report`` writes.

Never imports torch.
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_figures": ("curves_figure", "trial_curves"),
        "_publish": (
            "CURVES_ID",
            "EXPLORER_ID",
            "PublishReport",
            "explorer_figure",
            "explorer_json",
            "publish",
        ),
        "_trial_pictures": ("FILENAME", "curves_svg", "publish_pictures", "write_pictures"),
        "_diagnosis_page": ("diagnosis_page",),
    },
)
