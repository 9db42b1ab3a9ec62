"""search.results._choice.unseparated: no change without the study's own evidence. A one-trial region or a tie
within the spread its region measured keeps a default that ran without failure, names the change, and hands
it to search.confirm; a failing default, a default beside a trial that is not good, or a change beyond the
region's spread stays a change. GradScaler (recommend) and a framework (answer_rule_study) alike. Synthetic
trials: the measurements behind them are checked with plain loops elsewhere (test_analysis, test_rule_answer).
"""

from __future__ import annotations

from test_rule_answer import DEEPSPEED, trial
from test_rule_answer import SPACE as DEEPSPEED_SPACE

from search.core import load_settings
from search.results import recommend
from search.results._candidates import recommended_candidate, rule_recommended_candidate
from search.results._rule_answer import answer_rule_study
from search.scalers import RULES

from test_analysis import DISTS, SPACE, _study

# Far from everything else: the trials that are not good (beyond 1% of the best) lie 8+ octaves from 2^16.
FAR = [{"exp": 4, "value": 0.0400}, {"exp": 6, "value": 0.0390}, {"exp": 30, "value": 0.0410}]


def test_one_good_trial_does_not_overturn_a_default_that_trains_without_failure():
    """The BERT case: one good trial (0.0238) against a default that trains without failure (0.0276): the
    default is kept, the change is named with both objectives, and confirm is handed the change."""
    rows = [{"exp": -1.5, "value": 0.0238}, *FAR, {"exp": 16, "value": 0.0276, "baseline": "seed-1"}]
    rec = recommend(_study(rows), SPACE)
    assert rec.keep_default and rec.verdict == "keep-default"
    assert rec.held_back is not None and rec.held_back.init_scale == 2.0**-1.5
    assert (
        "Not a change yet: trial #0 (objective 0.0238) has 0 other good trials in its region, fewer than the"
        " 2 that would show it is not one lucky point, so this study cannot separate it from the default's"
        " trial #4 (objective 0.0276, no failure code); keep the default, and python -m search.confirm trains"
        " both on new seeds, which settle it."
    ) in rec.text
    assert rec.to_dict()["held_back"]["init_scale"] == 2.0**-1.5
    settings = load_settings(None, {})
    candidate = recommended_candidate(_study(rows), settings)
    assert candidate is not None and candidate.params["init_scale"] == 2.0**-1.5


def test_a_failing_default_is_separated_by_its_failure():
    """deep-mlp's case: the default underflows, so even the only good trial is a change."""
    failing = {"exp": 16, "value": 2.0, "failure": "underflow", "baseline": "seed-1"}
    rows = [{"exp": 20, "value": 0.0073}, *FAR, failing]
    rec = recommend(_study(rows), SPACE)
    assert not rec.keep_default and rec.held_back is None and rec.config.init_scale == 2.0**20


def test_a_tie_within_the_regions_spread_keeps_the_default_and_a_gap_beyond_it_does_not():
    """A supported region (three good trials, 0.02380..0.02402, within the 1% that makes a trial good)
    against a default with no support of its own (0.02400): the region reaches the default's objective, a
    tie. A default at 0.0300 lies beyond the region's spread: the change stands."""
    region = [{"exp": -4, "value": 0.02380}, {"exp": -3, "value": 0.02395}, {"exp": -2, "value": 0.02402}]
    tie = recommend(_study([*region, *FAR[2:], {"exp": 16, "value": 0.02400, "baseline": "seed-1"}]), SPACE)
    assert tie.keep_default and tie.held_back is not None
    assert "reach 0.02402, as far as the default: a tie within the spread this study measured" in tie.text
    gap = recommend(_study([*region, *FAR[2:], {"exp": 16, "value": 0.0300, "baseline": "seed-1"}]), SPACE)
    assert not gap.keep_default and gap.held_back is None


def test_a_default_beside_a_trial_that_is_not_good_may_be_left():
    """A trial that is not good 1 octave from the default is the evidence for moving away: the change
    stands, one good trial or not."""
    rows = [{"exp": -1.5, "value": 0.0238}, *FAR, {"exp": 15, "value": 0.05}]
    rows.append({"exp": 16, "value": 0.0276, "baseline": "seed-1"})
    rec = recommend(_study(rows), SPACE)
    assert not rec.keep_default and rec.held_back is None


def test_a_framework_change_from_one_good_trial_is_held_back_too():
    """DeepSpeed's rule: the same judgement through answer_rule_study, printed in its summary's reason, and
    its candidate handed to confirm."""
    default = dict(DEEPSPEED.default)
    trials = [
        trial(0, {**default, "initial_scale_power": 3}, 0.0238),
        trial(1, {**default, "initial_scale_power": 24}, 0.0400),
        trial(2, {**default, "initial_scale_power": 26}, 0.0390),
        trial(3, default, 0.0276, tag=RULES["deepspeed"].default_tag),
    ]
    answer = answer_rule_study(trials, DEEPSPEED_SPACE, "deepspeed")
    assert answer.verdict == "keep-default" and answer.values == default
    assert answer.held_back == {**default, "initial_scale_power": 3}
    assert answer.held_back_reason.startswith("Not a change yet: trial #0 (objective 0.0238) has 0 other")
    settings = load_settings(None, {"scaler": "deepspeed"})
    candidate = rule_recommended_candidate(trials, settings)
    assert candidate is not None and candidate.params["initial_scale_power"] == 3


def test_a_change_a_few_records_decide_is_held_back():
    """Judged on the mean, with each trial's mean 330x its median chunk loss (a few records decide it), a
    supported change beyond the region's spread is still not evidence: the default is kept, and the sentence
    says why and what settles it. Judged on the median (the objective is the median chunk loss), it stands."""
    import optuna

    from search.core import EVAL_LOSS, EVAL_MEDIAN

    def study(judged: str) -> list[optuna.trial.FrozenTrial]:
        made = optuna.create_study()
        for exp, mean in ((-4, 3.30), (-3, 3.31), (-2, 3.31), (30, 9.0), (16, 4.0)):
            median = mean / 330
            attrs = {"failure": "none", "nonfinite": False, EVAL_LOSS: mean, EVAL_MEDIAN: median}
            if exp == 16:
                attrs["baseline"] = "seed-1"
            made.add_trial(
                optuna.trial.create_trial(
                    value=mean if judged == "mean" else median,
                    params={"init_scale": 2.0**exp, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 2000},  # fmt: skip
                    distributions={k: DISTS[k] for k in DISTS},
                    user_attrs=attrs,
                )
            )
        return made.get_trials(deepcopy=False)

    rec = recommend(study("mean"), SPACE)
    assert rec.keep_default and rec.held_back is not None
    assert "trial #0 (objective 3.3): a few records decide the evaluation" in rec.text
    judged = recommend(study("median"), SPACE)
    assert not judged.keep_default and judged.held_back is None
