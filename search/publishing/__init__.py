"""What a person looks at: figures, optuna-dashboard notes and trial pictures, and the HTML report.

* ``_figures``: plotly figures of training curves (shared by the dashboard and the report);
* ``_publish``: curves and notes published to optuna-dashboard (end of every run, and by the dashboard);
* ``_trial_pictures``: each trial's loss-and-scale SVG, an artifact the dashboard serves;
* ``_diagnosis_page``: the HTML page of a training diagnosis (``search.diagnose --html``);
* ``report/``: the HTML/JSON report ``search.report`` writes.

Never imports torch.
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.publishing._diagnosis_page import diagnosis_page

if TYPE_CHECKING:  # Loaded on first use: _figures, _publish and _trial_pictures import plotly and optuna.
    from search.publishing._figures import curves_figure, trial_curves
    from search.publishing._publish import (
        CURVES_ID,
        EXPLORER_ID,
        PublishReport,
        explorer_figure,
        explorer_json,
        publish,
        publish_study_note,
    )
    from search.publishing._trial_pictures import FILENAME, curves_svg, publish_pictures, write_pictures

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "CURVES_ID",
    "EXPLORER_ID",
    "FILENAME",
    "PublishReport",
    "curves_figure",
    "curves_svg",
    "diagnosis_page",
    "explorer_figure",
    "explorer_json",
    "publish",
    "publish_study_note",
    "publish_pictures",
    "trial_curves",
    "write_pictures",
]
