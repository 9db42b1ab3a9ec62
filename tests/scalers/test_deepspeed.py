"""DeepSpeedScale against DeepSpeed's own DynamicLossScaler (deepspeed 0.19.8, CPU, a dev extra): the same
scale after every step of random overflow sequences, with windows, hysteresis and minimums that are not the
defaults (and not powers of two), and the run ended at the same step when the scale is at its minimum."""

from __future__ import annotations

import random

import pytest

from search.scalers import DeepSpeedScale, ScaleAtMinimum, ScalerConfig
from search.training import train

from frameworks import deepspeed_scaler
from plain_loop import plain_rule_run

CASES = [  # initial_scale_power, loss_scale_window, hysteresis, consecutive_hysteresis, min_loss_scale
    (16, 1000, 2, False, 1.0),  # DeepSpeed's defaults
    (32, 1000, 1, False, 1.0),  # ZeRO with no fp16 keys: 2^32, hysteresis 1
    (11, 7, 3, False, 3.7),
    (9, 5, 4, True, 0.37),
    (5, 3, 1, True, 6.0),
]


@pytest.mark.parametrize("power, window, hysteresis, consecutive, minimum", CASES)
@pytest.mark.parametrize("overflow_rate", [0.05, 0.3, 0.7])
def test_the_same_scale_after_every_step_as_deepspeeds_class(
    power, window, hysteresis, consecutive, minimum, overflow_rate
):
    rng = random.Random(hash((power, window, hysteresis, consecutive, minimum, overflow_rate)) % 2**32)
    theirs = deepspeed_scaler(power, window, hysteresis, consecutive, minimum)
    ours = DeepSpeedScale(power, window, hysteresis, consecutive, minimum)
    ended = False
    for step in range(400):
        overflow = rng.random() < overflow_rate
        before = theirs.cur_scale
        try:
            theirs.update_scale(overflow)
        except Exception as error:  # DeepSpeed raises a bare Exception at the minimum.
            assert "already at minimum" in str(error)
            with pytest.raises(ScaleAtMinimum, match=f"step {step + 1}"):
                ours.update(overflow)
            ended = True
            break
        event = ours.update(overflow)
        assert ours.scale == theirs.cur_scale, (step, overflow)
        assert event == (
            "grew"
            if theirs.cur_scale > before
            else "backed off" if theirs.cur_scale < before else "hysteresis" if overflow else "kept"
        ) or (overflow and before == minimum == theirs.cur_scale)
    assert ended or overflow_rate < 0.7 or minimum < 1  # the high rates reach the minimum


def test_the_first_growth_comes_on_the_step_after_a_full_window():
    scale = DeepSpeedScale(initial_scale_power=4, loss_scale_window=3, hysteresis=2)
    assert [scale.update(False) for _ in range(4)] == ["kept", "kept", "kept", "grew"]
    assert scale.scale == 32.0
    assert [scale.update(True), scale.update(True), scale.update(True)] == [
        "hysteresis",
        "backed off",
        "backed off",
    ]
    assert scale.scale == 8.0


@pytest.mark.parametrize(
    "power, window, hysteresis, consecutive, minimum",
    [(30, 5, 2, False, 3.7), (27, 3, 3, True, 1.0), (30, 1000, 1, False, 2.0**25 * 1.37)],
)
def test_the_trainer_moves_the_scale_by_deepspeeds_rule_as_deepspeed_does(
    power, window, hysteresis, consecutive, minimum
):
    """Seed-mlp (it overflows above about 2^19.4) for 30 steps from 2^27-2^30: the trainer with DeepSpeedScale
    and a plain loop (plain_loop.plain_rule_run) driven by DeepSpeed's own class skip the same steps with the
    same scales, and end the run at the same step when the minimum is reached (the last case: a minimum above
    the overflow edge)."""
    from search.tasks.seed_mlp import build

    problem = build(42)
    theirs = deepspeed_scaler(power, window, hysteresis, consecutive, minimum)
    stopped: list[str] = []

    def deepspeed_next(overflow: bool) -> float | None:
        try:
            theirs.update_scale(overflow)
        except Exception as error:  # DeepSpeed raises a bare Exception at the minimum.
            stopped.append(str(error))
            return None
        return theirs.cur_scale

    scales, skipped, _ = plain_rule_run(problem, theirs.cur_scale, deepspeed_next, 30)
    ended = stopped[0] if stopped else ""
    ours = train(
        problem,
        ScalerConfig(1.0, 2.0, 0.5, 1),
        steps=30,
        scale_rule=DeepSpeedScale(power, window, hysteresis, consecutive, minimum),
    )
    assert ours.scale_curve == scales and ours.skipped == skipped and sum(skipped) > 0
    assert bool(ours.ended_by_rule) == bool(ended) and ours.steps == len(scales)
    assert bool(ended) == (minimum > 2.0**20)  # only a minimum above the overflow edge ends the run
    if ended:
        assert "already at minimum" in ended and f"step {len(scales)}" in ours.ended_by_rule
