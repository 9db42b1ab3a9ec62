"""How close to the best a trial must be to count as good, or as a tie with the best.

Plain numbers with no import, so that a command's ``--tolerance`` default is known before Optuna loads.
"""

DEFAULT_TOLERANCE = 0.01  # Safe: within 1% of the best objective.
DEFAULT_TIE_TOLERANCE = 0.001  # A tie with the best: within 0.1% (the summary's "within 0.1%").
