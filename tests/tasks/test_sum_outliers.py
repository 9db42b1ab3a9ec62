"""sum-outliers: DeepSpeed's default rule ends the run at its minimum scale and consecutive_hysteresis trains
it, checked with a plain AMP loop (tests/plain_loop.py) moved by DeepSpeed 0.19.8's own DynamicLossScaler, and
the trainer under each rule measures what that loop measures."""

from __future__ import annotations

import math

import pytest
from test_optimize_scalers import deepspeed_next

from search.scalers import RULES, RuleSetting
from search.tasks.sum_outliers import build
from search.training import train

from plain_loop import LAST_RULE_MODEL, plain_evaluation, plain_rule_run

STEPS = 192
DEFAULT = dict(RULES["deepspeed"].default)


@pytest.mark.parametrize(
    "values, ends",
    [
        (DEFAULT, True),  # DeepSpeed's defaults
        ({**DEFAULT, "initial_scale_power": 32, "hysteresis": 1}, True),  # ZeRO given no fp16 keys
        (
            {**DEFAULT, "consecutive_hysteresis": 1},
            False,
        ),  # a lone corrupted batch only spends the hysteresis
    ],
)
def test_deepspeeds_default_ends_the_run_and_consecutive_hysteresis_trains(values, ends):
    problem = build(42)
    initial, next_scale = deepspeed_next(values)
    scales, skipped, ended = plain_rule_run(problem, initial, next_scale, STEPS)
    plain_eval = plain_evaluation(problem, LAST_RULE_MODEL[0])
    ours = train(problem, RuleSetting("deepspeed", values), steps=STEPS)
    assert ended == ends == bool(ours.ended_by_rule)
    assert ours.scale_curve == scales and ours.skipped == skipped
    assert math.isclose(ours.eval_loss, plain_eval, rel_tol=1e-6)
    if ends:
        assert min(scales) == 1.0 and len(scales) < STEPS * 0.6  # at the minimum, well before the end
    else:
        assert len(scales) == STEPS and plain_eval < 0.2 * ours.initial_eval_loss  # it learned
