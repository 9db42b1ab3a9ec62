"""What a finished study says: safe ranges, the recommendation, ranges safe together, confirmation, summary.

* ``_analysis``: safe ranges, the recommendation, ranges safe together (numbers only);
* ``_candidates``: which configurations a confirmation re-runs: the top-k, the recommendation, the default;
* ``_confirmations``: reading confirmation runs back: the two-sided paired test, the table;
* ``_summary``: the end-of-run table and its JSON.

Reads finished trials only and never imports torch (``tests/test_layering.py``).
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_analysis": (
            "DEFAULT_MARGIN",
            "DEFAULT_TIE_TOLERANCE",
            "DEFAULT_TOLERANCE",
            "MIN_SUPPORT",
            "Recommendation",
            "SafeRange",
            "best_trial",
            "box_corners",
            "check_boxes",
            "completed",
            "confirmation_verdict",
            "coordinates",
            "format_range",
            "format_value",
            "good_trials",
            "idle_settings",
            "is_safe",
            "param_values",
            "recommend",
            "safe_ranges",
            "searched_params",
        ),
        "_candidates": ("Candidate", "default_candidate", "recommended_candidate", "select_candidates"),
        "_confirmations": (
            "ALPHA",
            "DEFAULT_LABEL",
            "SUFFIX",
            "collect_runs",
            "config_key",
            "confirm_study_name",
            "confirmation_data",
            "confirmation_seeds",
            "format_confirmation",
            "paired_test",
            "summarize_confirmation",
        ),
        "_summary": ("format_summary", "summarize", "trial_row", "write_best_json"),
    },
)
