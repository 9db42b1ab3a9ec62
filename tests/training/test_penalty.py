import math

import pytest

from search.core import PenaltyConfig
from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import TrainResult, assess, train

from tasks_for_tests import exploding

PENALTY = PenaltyConfig()


def result(**kw) -> TrainResult:
    """A full-batch run: its evaluation is the loss curve's last value, the initial one its first."""
    base = dict(
        loss_curve=[0.7] * 9 + [0.4],
        scale_curve=[1.0] * 10,
        skipped=[False] * 10,
        final_loss=0.4,
        final_loss_fp32=0.39,
        initial_eval_loss=0.7,
        initial_eval_median=0.7,
        evaluation="last_step",
        skipped_steps=0,
        zero_grad_fraction=0.0,
        fp32_zero_fraction=0.0,
        weights_finite=True,
        steps=10,
        train_seconds=0.1,
    )
    base.update(kw)
    base.setdefault("eval_loss", base["final_loss"])
    base.setdefault("eval_median", base["eval_loss"])
    return TrainResult(**base)


def test_healthy_run_is_its_final_loss():
    a = assess(result(), PENALTY)
    assert a.value == 0.4 and a.failure == "none" and a.learned and not a.nonfinite


def test_real_divergence_gets_a_heavy_finite_penalty():
    r = train(exploding(42), ScalerConfig(2.0**16, 2.0, 0.5, 2000), epochs=30)
    a = assess(r, PENALTY)
    assert a.nonfinite and a.failure == "nonfinite"
    assert math.isfinite(a.value) and PENALTY.nonfinite <= a.value <= 2 * PENALTY.nonfinite


def test_earlier_divergence_is_worse():
    nan = float("nan")
    early = assess(result(loss_curve=[0.7, nan] + [nan] * 8, final_loss=nan), PENALTY)
    late = assess(result(loss_curve=[0.7] * 9 + [nan], final_loss=nan), PENALTY)
    weights = assess(result(weights_finite=False), PENALTY)
    assert early.value > late.value > weights.value >= PENALTY.nonfinite
    assert weights.first_nonfinite_step == 10


def test_nonfinite_is_worse_than_any_silent_failure():
    frozen = assess(result(final_loss=0.7, final_loss_fp32=0.7), PENALTY)
    diverged = assess(result(weights_finite=False), PENALTY)
    assert frozen.value < diverged.value


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(skipped_steps=6), "overflow_churn"),
        (dict(final_loss=0.7, final_loss_fp32=0.7, zero_grad_fraction=1.0), "underflow"),
        (dict(final_loss=0.7, final_loss_fp32=0.69, zero_grad_fraction=0.0), "frozen"),
    ],
)
def test_silent_failures_are_flagged_and_penalised(kw, code):
    a = assess(result(**kw), PENALTY)
    assert a.failure == code
    skipped = kw.get("skipped_steps", 0) / 10
    assert a.value == pytest.approx(kw.get("final_loss", 0.4) + PENALTY.silent + PENALTY.skip * skipped)


def test_tiny_scale_on_the_seed_task_is_flagged_as_underflow():
    r = train(build(42), ScalerConfig(2.0**-20, 2.0, 0.5, 2000), epochs=30)
    a = assess(r, PENALTY)
    assert a.failure == "underflow" and not a.learned and a.value > 1.0


def test_weights_are_configurable():
    a = assess(result(skipped_steps=6), PenaltyConfig(silent=5.0, skip=0.0))
    assert a.value == pytest.approx(0.4 + 5.0)


def test_learned_compares_the_median_chunk_not_an_outlier_dominated_mean():
    # A mini-batch task: a few outlier records keep the whole-set mean nearly flat (14.0 -> 13.3,
    # 5%), while the typical chunk fell from 1.03 to 0.03: the run learned.
    outliers = dict(
        evaluation="final_weights",
        initial_eval_loss=14.0,
        eval_loss=13.3,
        initial_eval_median=1.03,
        eval_median=0.03,
    )
    a = assess(result(**outliers), PENALTY)
    assert a.learned and a.failure == "none" and a.value == pytest.approx(13.3)
    # The objective is the evaluation loss, not the last step's training loss.
    assert assess(result(**outliers, final_loss=0.01), PENALTY).value == pytest.approx(13.3)
    flat = assess(result(**{**outliers, "eval_median": 1.0}), PENALTY)
    assert not flat.learned and flat.failure == "frozen"


def test_a_run_a_framework_ended_is_valued_as_a_divergence_there_and_pinned_is_silent():
    """ended_at_minimum: the user's run died at step 6 of 10, valued nonfinite x (2 - 6/10);
    pinned_at_minimum: half the steps taken at Megatron's minimum overflowed (below half, the run is judged as
        any other)."""
    ended = assess(
        result(steps=6, planned_steps=10, ended_by_rule="loss scale already at its minimum 1 at step 6"),
        PENALTY,
    )
    assert (
        ended.failure == "ended_at_minimum"
        and math.isclose(ended.value, PENALTY.nonfinite * 1.4)
        and not ended.nonfinite
    )
    pinned = assess(result(steps_at_minimum=6, overflows_at_minimum=3, skipped_steps=3), PENALTY)
    assert pinned.failure == "pinned_at_minimum" and math.isclose(
        pinned.value, 0.4 + 0.1 * 0.3 + PENALTY.silent
    )
    assert (
        assess(result(steps_at_minimum=6, overflows_at_minimum=2, skipped_steps=2), PENALTY).failure == "none"
    )
