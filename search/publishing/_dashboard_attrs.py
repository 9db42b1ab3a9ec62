"""Where optuna-dashboard keeps notes and plotly figures in a study's system attrs.

Written from optuna-dashboard 0.21.0 (``optuna_dashboard/_note.py`` and
``optuna_dashboard/_custom_plot_data.py``, commit 01717cc7559dddd655e5e6c9ae7faccc82c23fdc) rather than
imported: importing any module of ``optuna_dashboard`` runs its package ``__init__``, which loads the web
app and scikit-learn (1.3 s of CPU on this machine), and every ``search.optimize`` run publishes.
``tests/publishing/test_dashboard.py`` reads what we write back with optuna-dashboard's own
``get_note`` and ``get_plotly_graph_objects``, and compares these keys with its own functions.

A text longer than one attr is cut into chunks of :data:`ATTR_MAX_LENGTH` characters under
``<prefix>0``, ``<prefix>1``, ...; the dashboard joins them in that order.
"""

from __future__ import annotations

ATTR_MAX_LENGTH = 2045  # SYSTEM_ATTR_MAX_LENGTH there: the longest string one attr holds.
PLOT_DATA_PREFIX = "dashboard:plot_data:"  # + graph object id + ":" + chunk number.


def note_version_key(trial_id: int | None) -> str:
    """The key of a note's version: the study note's (``trial_id`` None) or a trial's."""
    return "dashboard:note_ver" if trial_id is None else f"dashboard:{trial_id}:note_ver"


def note_text_prefix(trial_id: int | None) -> str:
    """The prefix of a note's text chunks."""
    return "dashboard:note_str:" if trial_id is None else f"dashboard:{trial_id}:note_str:"


def figure_prefix(graph_object_id: str) -> str:
    """The prefix of a plotly figure's JSON chunks."""
    return f"{PLOT_DATA_PREFIX}{graph_object_id}:"


def split_text(text: str, prefix: str) -> dict[str, str]:
    """``text`` in chunks of at most :data:`ATTR_MAX_LENGTH` characters, under ``prefix`` + chunk number."""
    return {
        f"{prefix}{i}": text[start : start + ATTR_MAX_LENGTH]
        for i, start in enumerate(range(0, len(text), ATTR_MAX_LENGTH))
    }
