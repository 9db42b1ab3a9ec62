"""What a finished study says: safe ranges, the recommendation, ranges safe together, confirmation, summary.

* ``_tolerance``: how near the best a good trial and a tie are (no imports: commands' defaults);
* ``_trials``: which trials count (completed, safe, good, best) and a trial's four settings;
* ``_format``: settings as people read them (a value, a range, a point, a list of trials);
* ``_safe_ranges``: per setting, the good trials' range, the bad trials inside it, idle settings;
* ``_landscape``: the trials in the space of octaves: coordinates, distance, depth, support;
* ``_minimal``: the minimal change: settings that did not act in a run put back to PyTorch's defaults;
* ``_recommendation``: the verdict and its setting: the deepest good trial or PyTorch's default, step by step;
* ``_reasons``: the recommendation's reasons, sentence by sentence;
* ``_verdict``: what confirmation runs say of a setting against the default;
* ``_together``: ranges safe together: the candidate box, its corners, the check of their runs;
* ``_candidates``: which configurations a confirmation re-runs: the top-k, the recommendation, the default;
* ``_confirmations``: reading confirmation runs back: the two-sided paired test;
* ``_confirmation_table``: the table ``search.confirm`` prints, under GradScaler's settings or a framework's knobs;
* ``_dominance``: whether a few records decide the evaluation (its mean far above the median chunk loss);
* ``_horizon``: how many steps the trials ran, and what trials of that length cannot show about the growth settings;
* ``_score``: what confirmation compares: a run's objective without its skipped-step term;
* ``_summary``: the end-of-run table and its JSON;
* ``_paste``: the snippet a user pastes to train with given settings, per framework;
* ``_rule_answer``: the answer of a study under DeepSpeed's, Megatron-LM's or fairseq's rule, in its own form;
* ``_rule_summary``: that study's end-of-run table and its JSON.

Reads finished trials only and never imports torch (``tests/test_layering.py``).
"""

from search._exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "_tolerance": ("DEFAULT_TIE_TOLERANCE", "DEFAULT_TOLERANCE"),
        "_trials": (
            "as_config",
            "best_trial",
            "completed",
            "good_trials",
            "is_safe",
            "param_values",
            "param_values_of",
            "trial_row",
            "searched_params",
        ),
        "_format": ("format_ends", "format_point", "format_range", "format_value", "offsets_text", "study_heading", "trial_list"),
        "_safe_ranges": ("SafeRange", "idle_settings", "safe_ranges"),
        "_landscape": ("MIN_SUPPORT", "Landscape", "coordinates", "depth_of", "octave_distance"),
        "_minimal": ("PYTORCH_DEFAULT", "changed_settings", "minimal_change"),
        "_recommendation": ("DEFAULT_MARGIN", "VERDICTS", "Recommendation", "recommend"),
        "_reasons": (
            "deepest_reasons",
            "keep_default_reason",
            "limit_sentences",
            "nearest_reason",
            "nothing_safe_reason",
            "reset_sentence",
        ),
        "_verdict": ("comparison_verdict", "confirmation_verdict"),
        "_together": (
            "CHECK_ROUNDS",
            "box_corners",
            "candidate_box",
            "check_boxes",
            "judge_boxes",
            "together_text",
        ),
        "_candidates": (
            "Candidate",
            "default_candidate",
            "recommended_candidate",
            "rule_default_candidate",
            "rule_recommended_candidate",
            "select_candidates",
        ),
        "_confirmations": (
            "ALPHA",
            "DEFAULT_LABEL",
            "SUFFIX",
            "default_label",
            "is_default",
            "collect_runs",
            "config_key",
            "confirm_study_name",
            "confirmation_data",
            "confirmation_seeds",
            "paired_test",
            "summarize_confirmation",
        ),
        "_confirmation_table": ("format_confirmation",),
        "_dominance": ("DOMINANCE_RATIO", "dominance_note"),
        "_horizon": ("counted_steps", "horizon_note", "trial_steps"),
        "_score": ("run_score",),
        "_summary": ("format_summary", "format_verdict", "summarize", "write_best_json"),
        "_paste": ("FRAMEWORKS", "paste_lines", "scaler_line"),
        "_rule_answer": ("RuleAnswer", "answer_rule_study"),
        "_rule_summary": ("format_rule_summary", "format_rule_verdict", "rule_row", "summarize_rule_study"),
    },
)
