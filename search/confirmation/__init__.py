"""Confirmation: a search's answer re-run on new seeds beside the default, and the corners of its ranges
checked.

* ``_confirmation_plan``: what a confirmation still has to run: the study and its sibling ``<study>.confirm``
  checked, the candidates chosen, the runs already stored left out;
* ``_confirmation_runs``: confirmation runs and corners trained and written into ``<study>.confirm``.

What the runs say (the paired test, the verdict, the table ``search.confirm`` prints) is read back by
:mod:`search.results`, which imports no torch.
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face

if TYPE_CHECKING:  # Loaded on first use: _confirmation_plan imports Optuna, _confirmation_runs torch.
    from search.confirmation._confirmation_plan import ConfirmationPlan, ConfirmError, plan_confirmation
    from search.confirmation._confirmation_runs import ConfirmationRuns, run_confirmation

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "ConfirmError",
    "ConfirmationPlan",
    "ConfirmationRuns",
    "plan_confirmation",
    "run_confirmation",
]
