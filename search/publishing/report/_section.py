"""One numbered part of the report page, and every part's title in page order.

Each section builder (:mod:`~search.publishing.report._visualization`, :mod:`~search.publishing.report._runs`,
:mod:`~search.publishing.report._tables`) returns a :class:`Section`: the page renders it and the JSON lists
its title, whether it has a plot and its message.
"""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

SECTION_TITLES = {
    # The answer first, then its evidence, then the study's generic plots.
    "recommendation": "The answer: verdict and the line to paste",
    "curves": "Loss and scale curves: the answer, the default, the worst finite trial",
    "failures": "Where runs fail along init_scale",
    "confirmation": "Confirmation runs",
    "diagnosis": "Diagnosis: where the search started, what was measured",
    "safe_ranges": "Good ranges, one setting at a time",
    "baselines": "The original example's configurations next to the best",
    "skipped": "Skipped steps",
    "history": "Optimisation history",
    "importances": "Parameter importances",
    "slices": "Slice plots",
    "contour": "Contour: init_scale × backoff_factor",
    "parallel": "Parallel coordinates",
}


@dataclass
class Section:
    """One numbered part of the page.

    Attributes:
        key: Its id (``history``, ``importances``, ...), also the HTML anchor.
        title: The heading.
        intro: What it shows, in words (plain text).
        figure: The plotly figure, or None.
        message: Shown in a message box (instead of the figure when there is none).
        body: Extra HTML (tables, text), already escaped.
    """

    key: str
    title: str
    intro: str = ""
    figure: go.Figure | None = None
    message: str | None = None
    body: str = ""
