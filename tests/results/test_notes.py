"""The notes under a verdict: a few records deciding the evaluation (dominance_note), and what trials of
their length cannot show about the growth settings (horizon_note)."""

from __future__ import annotations

import optuna
import pytest

from search.core import DEFAULTS
from search.results import DOMINANCE_RATIO, dominance_note, format_summary, summarize

from test_summary import _add


def _trial(mean: float, median: float, number: int = 0) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(value=mean, user_attrs={"eval_loss": mean, "eval_median": median})
    trial.number = number
    return trial


def test_a_mean_far_above_the_median_chunk_loss_is_named_with_what_to_do():
    note = dominance_note(_trial(31.5, 0.0741, 11), "mean")
    assert note.startswith(
        "a few records decide the evaluation: on trial #11 its loss over the evaluation set is 31.5, 425x"
    )
    assert 'evaluation = "median"' in note and "validation data or an eval function" in note


def test_no_note_for_a_typical_mean_a_median_study_or_missing_numbers():
    assert dominance_note(_trial(0.42 * DOMINANCE_RATIO * 0.999, 0.42), "mean") is None
    assert dominance_note(_trial(31.5, 0.0741), "median") is None  # judged on the median already
    assert dominance_note(_trial(31.5, 0.0), "mean") is None and dominance_note(None, "mean") is None


def test_the_summary_prints_the_note_and_shows_the_evaluation_the_objective_reads():
    study = optuna.create_study()
    study.set_user_attr("penalty", {"evaluation": "mean"})
    _add(study, 31.5, "cpu", eval_loss=31.5, eval_median=0.0741)
    text = format_summary(summarize(study, DEFAULTS.space))
    assert "  note: a few records decide the evaluation: on trial #0" in text and "eval_loss" in text
    study.set_user_attr("penalty", {"evaluation": "median"})
    data = summarize(study, DEFAULTS.space)
    text = format_summary(data)
    assert data["evaluation"] == "median" and data["evaluation_note"] is None
    assert "a few records" not in text and "eval_median" in text.splitlines()[3]
    assert "     0.0741 " in text  # the median in the column, not the mean


def test_the_horizon_note_says_what_short_trials_cannot_show_of_the_growth_settings():
    from search.results import horizon_note, trial_steps

    note = horizon_note(30)
    assert (
        note.startswith("horizon: each trial ran 30 optimizer steps")
        and "above 30 (PyTorch's default is 2000)" in note
    )
    assert (
        horizon_note(2000) is None and horizon_note(None) is None
    )  # long enough: the default's growth can act
    # A search whose growth_interval stays below the trials' steps (a diagnosis's window <= 4): every one
    # acted.
    from dataclasses import replace

    from search.core import DEFAULTS, ParamRange

    short = replace(DEFAULTS.space, growth_interval=ParamRange(1, 4, True))
    assert horizon_note(256, short) is None and horizon_note(256, DEFAULTS.space) is not None
    assert horizon_note(3, short) is not None  # 4 is above 3 steps: it could not act
    trial = optuna.trial.create_trial(value=0.4, user_attrs={"loss_curve": [0.7] * 64})
    assert trial_steps(trial) == 64 and trial_steps(None) is None


@pytest.mark.parametrize("scaler", ["deepspeed", "megatron", "fairseq"])
def test_each_frameworks_horizon_note_names_the_window_its_own_rule_waits(scaler):
    """The note says a framework grows the scale only after its window of unskipped steps: the framework's own
    class (DeepSpeed 0.19.8) or its transcription (Megatron-LM, fairseq) holds the scale over the first window
    - 1 clean steps and has grown it by step window + 1 (DeepSpeed counts from an overflow at step -1), on a
      window
    and a start that are not powers of two."""
    from dataclasses import replace

    from test_optimize_scalers import REFERENCES

    from search.core import DEFAULTS, ParamRange
    from search.results import horizon_note
    from search.scalers import RULES

    rule = RULES[scaler]
    window = 7
    values = {**rule.default, rule.window_knob: window}
    values[rule.start_knob] = 13 if rule.knob(rule.start_knob).octaves else 3000.0
    start, step = REFERENCES[scaler](values)
    scales = [step(False) for _ in range(window + 1)]
    assert scales[: window - 1] == [start] * (window - 1) and scales[-1] > start
    note = horizon_note(window - 1, None, scaler)
    assert f"{rule.title} grows the scale only after {rule.window_knob} unskipped steps in a row" in note
    assert f"({rule.maker}'s default is {rule.cycle(rule.default).window})" in note
    ranges = {
        **DEFAULTS.space.ranges(scaler),
        rule.window_knob: ParamRange(window, window, False, fixed=window),
    }
    space = replace(DEFAULTS.space, **{rule.space_table: ranges})
    assert horizon_note(window + 1, space, scaler) is None  # every window it searched acted within the trials
    assert horizon_note(window - 1, space, scaler) is not None
