"""search.diagnosis._suggestion_check on hand-counted runs: which trained suggestions stand, and that every
sentence carries the numbers of the runs beside it; the fp32 control that stays flat has not diverged; the
words around a suggested start agree with the scales it comes from."""

from __future__ import annotations

import math

import pytest

from search.diagnosis import HEALTHY_ADVICE, RunEvidence, TrainingVerdict, checked_suggestion, judge
from search.diagnosis._advice import centre_clause, start_advice
from search.scalers import RULES, ScalerConfig

DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)


def run(eval_loss: float, skipped: int, failure: str = "none", steps: int = 40, initial: float = 1.0):
    """A run's outcome as the check and the verdict read it."""
    return RunEvidence(
        label="fp16",
        losses=(1.0,) * steps,
        scales=(2.0**16,) * steps,
        skipped=(True,) * skipped + (False,) * (steps - skipped),
        eval_loss=eval_loss,
        initial_eval_loss=initial,
        learned=eval_loss < 0.9 * initial,
        failure=failure,
        zero_share=0.0,
        ended_by_rule="",
        min_scale=None,
        planned_steps=steps,
        start_steps=4,
    )


def verdict(name: str, suggested: float = 2.0**20) -> TrainingVerdict:
    return TrainingVerdict(
        verdict=name,
        reason="",
        advice="start at init_scale 2^20" if name != "healthy" else "a search can centre init_scale on 2^20",
        needed_scale=2.0**19.6,
        largest_safe_scale=2.0**21.2,
        suggested_init_scale=suggested,
        settled_step=None,
        expected_skip_rate=0.0,
        measured_skip_rate=None,
        underflowing=(),
        forward_layer=None,
    )


@pytest.mark.parametrize(
    "name, trained, diagnosed, kept, why",
    [
        ("underflow", run(0.39, 0), run(1.0, 0, "underflow"), True, "trained here, it ends at 0.39"),
        # A few skips paid for an evaluation more than 10% better: kept.
        ("underflow", run(0.5, 3), run(1.0, 0, "underflow"), True, "trained here, it ends at 0.5"),
        # More skips for an evaluation within 10%: withdrawn.
        ("underflow", run(0.95, 3), run(1.0, 0, "underflow"), False, "it skips more steps without ending"),
        ("underflow", run(1.2, 0), run(1.0, 0, "underflow"), False, "it does worse"),
        ("underflow", run(0.3, 30, "overflow_churn"), run(1.0, 0, "underflow"), False, "it fails"),
        # Nothing to fix: a tie is no reason to change, a clear gain is.
        ("healthy", run(0.2957, 0), run(0.2957, 0), False, "it ends no better by 10%"),
        ("healthy", run(0.2, 0), run(0.3, 0), True, "trained here, it ends at 0.2"),
    ],
)
def test_which_trained_suggestions_stand(name, trained, diagnosed, kept, why):
    final = checked_suggestion(verdict(name), DEFAULT, trained, diagnosed)
    check = final.suggestion_check
    assert check["kept"] is kept and why in check["why"]
    # The sentence carries both runs' numbers, as the runs hold them.
    numbers = (
        f"{trained.eval_loss:.4g} with {trained.skipped_steps} of 40 steps skipped"
        + ("" if trained.failure == "none" else f", {trained.failure}")
        + f", against these settings' {diagnosed.eval_loss:.4g} with {diagnosed.skipped_steps} of 40 steps"
        " skipped"
    )
    assert numbers in final.advice and check["why"] in final.advice
    assert check["settings"] == {**DEFAULT.values, "init_scale": 2.0**20}
    assert (check["eval_loss"], check["skipped_steps"], check["failure"]) == (
        trained.eval_loss,
        trained.skipped_steps,
        trained.failure,
    )
    if kept:
        assert final.suggested_init_scale == 2.0**20
    elif name == "healthy":  # the settings are fine: a search from it centres on them
        assert final.advice.startswith(HEALTHY_ADVICE + "; the diagnosis's own proposal, init_scale 2^20")
        assert final.suggested_init_scale == 2.0**16 and final.suggested_setting is None
    else:  # nothing measured does better: no start, and a search from it is refused
        assert final.advice.startswith("the start these gradients point to, init_scale 2^20")
        assert final.advice.endswith("search.optimize over the whole space measures which does")
        assert math.isnan(final.suggested_init_scale) and final.suggested_setting is None


def test_a_flat_fp32_control_has_not_diverged():
    """0.6974 against 0.6942 at the start is flat, not diverged: only more than the learning threshold (10%)
    worse is."""
    fp16 = run(0.6950, 0, initial=0.6942)
    flat = run(0.6974, 0, initial=0.6942)
    assert judge(fp16, flat, None, DEFAULT).verdict != "diverges-in-fp32"
    worse = run(0.7700, 0, initial=0.6942)
    diverged = judge(fp16, worse, None, DEFAULT)
    assert diverged.verdict == "diverges-in-fp32"
    assert diverged.reason.endswith("ended at 0.77, more than 10% worse than the initial weights' 0.6942")


def test_the_words_around_a_start_agree_with_its_scales():
    assert centre_clause(2.0**7, 2.0**-0.9, 2.0**15.5) == (
        "between the 2^-0.9 the smallest gradients need and the 2^15.5 the largest allow"
    )
    # The needed scale above the safe one: no "between" (2^21 is not between 2^20.9 and 2^16.1).
    assert centre_clause(2.0**18, 2.0**20.9, 2.0**16.1) == (
        "halfway, in octaves, from the 2^16.1 the largest gradients allow to the 2^20.9 the smallest need"
        " (no one scale keeps both)"
    )
    # A start above the largest safe scale says so and what it costs.
    advice = start_advice(DEFAULT, 2.0**20, safe=2.0**19.9)
    assert advice.endswith(
        "; 2^20 is above the 2^19.9 the largest gradient allows: the steps whose gradients reach it are"
        " skipped and the scale backs off"
    )
    assert "above" not in start_advice(DEFAULT, 2.0**19, safe=2.0**19.9)
    rule = RULES["deepspeed"]
    assert start_advice(rule.setting(rule.default), 2.0**20).startswith(
        "start at initial_scale_power 20, a scale of 2^20"
    )
