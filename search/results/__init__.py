"""What a finished study says: safe ranges, the recommendation, ranges safe together, confirmation, summary.

* ``_tolerance``: how near the best a good trial and a tie are (no imports: the commands' defaults);
* ``_trials``: which trials count (completed, safe, good, best) and a trial's four settings;
* ``_format``: settings as people read them (a value, a range, a point, a list of trials);
* ``_safe_ranges``: per setting, the good trials' range, the bad trials inside it, idle settings;
* ``_landscape``: the trials in the space of octaves: coordinates, distance, depth, support;
* ``_choice``: every rule's choice: the default when it is deep enough, else the deepest supported good trial;
* ``_minimal``: the minimal change, every rule's: knobs that did not act in a run (by replay) put back to the
  rule's defaults;
* ``_recommendation``: the verdict and its setting: the deepest good trial or PyTorch's default, step by step;
* ``_answer_rounding``: the answer's line rounded, coarse to fine, each rounding taken once a trial measured
  it;
* ``_reasons``: the recommendation's reasons, sentence by sentence;
* ``_verdict``: what confirmation runs say of a setting against the default;
* ``_together``: ranges safe together: the candidate box, its corners, the check of their runs;
* ``_candidates``: which configurations a confirmation re-runs: the top-k, the recommendation, the default;
* ``_confirmations``: reading confirmation runs back: the two-sided paired test;
* ``_confirmation_table``: the table ``search.confirm`` prints, under GradScaler's settings or a framework's
  knobs;
* ``_dominance``: whether a few records decide the evaluation (its mean far above the median chunk loss);
* ``_horizon``: what trials of their length cannot show about the growth settings;
* ``_side_by_side``: the answer's and the default's trial under the verdict, how sure, the run length;
* ``_score``: what confirmation compares: a run's objective without its skipped-step term;
* ``_summary``: a GradScaler study's end-of-run table and its JSON;
* ``_paste``: the snippet a user pastes to train with given settings, per framework;
* ``_rule_answer``: the answer of a study under DeepSpeed's, Megatron-LM's or fairseq's rule, in its own form;
* ``_rule_summary``: that study's end-of-run table and its JSON;
* ``_answers``: the form a rule's answer takes (GradScaler's or a framework's own), chosen in one place, and
  the summary and the confirmation's candidates in that form.

Reads finished trials only and never imports torch (``tests/test_layering.py``).
"""

from typing import TYPE_CHECKING

from search._lazy import lazy_face
from search.results._format import (
    format_ends,
    format_point,
    format_range,
    format_value,
    offsets_text,
    study_heading,
    trial_list,
)
from search.results._paste import FRAMEWORKS, paste_lines, scaler_line
from search.results._tolerance import DEFAULT_TIE_TOLERANCE, DEFAULT_TOLERANCE
from search.results._verdict import comparison_verdict, confirmation_verdict

if TYPE_CHECKING:  # Loaded on first use: these import optuna (directly or through core's trial record).
    from search.results._answers import (
        FRAMEWORK_FORM,
        GRADSCALER_FORM,
        AnswerForm,
        answer_form,
        format_summary,
        format_verdict,
        select_candidates,
        summarize,
    )
    from search.results._candidates import (
        Candidate,
        default_candidate,
        recommended_candidate,
        rule_default_candidate,
        rule_recommended_candidate,
    )
    from search.results._choice import DEFAULT_MARGIN, Choice, choose, unseparated
    from search.results._confirmation_table import format_confirmation
    from search.results._confirmations import (
        ALPHA,
        DEFAULT_LABEL,
        SUFFIX,
        collect_runs,
        config_key,
        confirm_study_name,
        confirmation_data,
        confirmation_seeds,
        default_label,
        is_default,
        paired_test,
        summarize_confirmation,
    )
    from search.results._dominance import DOMINANCE_RATIO, dominance_note
    from search.results._horizon import counted_steps, horizon_note, trial_steps
    from search.results._landscape import MIN_SUPPORT, Landscape, coordinates, depth_of, octave_distance
    from search.results._minimal import (
        PYTORCH_DEFAULT,
        changed_settings,
        minimal_change,
        minimal_values,
        replay,
    )
    from search.results._reasons import (
        deepest_reasons,
        keep_default_reason,
        limit_sentences,
        nearest_reason,
        nothing_safe_reason,
        reset_sentence,
    )
    from search.results._recommendation import VERDICTS, Recommendation, recommend
    from search.results._rule_answer import RuleAnswer, answer_rule_study
    from search.results._rule_summary import (
        format_rule_summary,
        format_rule_verdict,
        rule_row,
        summarize_rule_study,
    )
    from search.results._safe_ranges import SafeRange, idle_settings, safe_ranges
    from search.results._score import run_score
    from search.results._side_by_side import (
        answer_label,
        on_new_seeds,
        run_length_line,
        side_by_side,
        side_by_side_line,
        why_sentence,
    )
    from search.results._summary import write_best_json
    from search.results._together import (
        CHECK_ROUNDS,
        box_corners,
        candidate_box,
        check_boxes,
        judge_boxes,
        together_text,
    )
    from search.results._trials import (
        as_config,
        best_trial,
        completed,
        good_trials,
        is_safe,
        param_values,
        param_values_of,
        searched_params,
        trial_row,
    )

__getattr__, __dir__ = lazy_face(__name__, globals())

__all__ = [
    "ALPHA",
    "AnswerForm",
    "FRAMEWORK_FORM",
    "GRADSCALER_FORM",
    "CHECK_ROUNDS",
    "Candidate",
    "Choice",
    "DEFAULT_LABEL",
    "DEFAULT_MARGIN",
    "DEFAULT_TIE_TOLERANCE",
    "DEFAULT_TOLERANCE",
    "DOMINANCE_RATIO",
    "FRAMEWORKS",
    "Landscape",
    "MIN_SUPPORT",
    "PYTORCH_DEFAULT",
    "Recommendation",
    "RuleAnswer",
    "SUFFIX",
    "SafeRange",
    "VERDICTS",
    "answer_form",
    "answer_rule_study",
    "as_config",
    "best_trial",
    "box_corners",
    "candidate_box",
    "changed_settings",
    "check_boxes",
    "choose",
    "unseparated",
    "collect_runs",
    "comparison_verdict",
    "completed",
    "config_key",
    "confirm_study_name",
    "confirmation_data",
    "confirmation_seeds",
    "confirmation_verdict",
    "coordinates",
    "counted_steps",
    "deepest_reasons",
    "default_candidate",
    "default_label",
    "depth_of",
    "dominance_note",
    "format_confirmation",
    "format_ends",
    "format_point",
    "format_range",
    "format_rule_summary",
    "format_rule_verdict",
    "format_summary",
    "format_value",
    "format_verdict",
    "good_trials",
    "horizon_note",
    "answer_label",
    "run_length_line",
    "side_by_side",
    "side_by_side_line",
    "on_new_seeds",
    "why_sentence",
    "idle_settings",
    "is_default",
    "is_safe",
    "judge_boxes",
    "keep_default_reason",
    "limit_sentences",
    "minimal_change",
    "minimal_values",
    "nearest_reason",
    "nothing_safe_reason",
    "octave_distance",
    "offsets_text",
    "paired_test",
    "param_values",
    "param_values_of",
    "paste_lines",
    "recommend",
    "recommended_candidate",
    "replay",
    "reset_sentence",
    "rule_default_candidate",
    "rule_recommended_candidate",
    "rule_row",
    "run_score",
    "safe_ranges",
    "scaler_line",
    "searched_params",
    "select_candidates",
    "study_heading",
    "summarize",
    "summarize_confirmation",
    "summarize_rule_study",
    "together_text",
    "trial_list",
    "trial_row",
    "trial_steps",
    "write_best_json",
]
