"""A framework study's answer: the verdict on the framework's default, and the minimal change by replay,
checked by training both settings in a plain loop moved by DeepSpeed 0.19.8's own class (the replay's claim is
that the run is the same step for step)."""

from __future__ import annotations

import math

from optuna.distributions import IntDistribution
from optuna.trial import TrialState, create_trial
from test_optimize_scalers import deepspeed_next

from search.core import BASELINE, OVERFLOW_STEPS, SCALE_CURVE, load_settings
from search.results._minimal import minimal_values, replay
from search.results._rule_answer import answer_rule_study, rounded_values
from search.scalers import RULES
from search.tasks.seed_mlp import build

from plain_loop import LAST_RULE_MODEL, plain_evaluation, plain_rule_run

DEEPSPEED = RULES["deepspeed"]
SPACE = load_settings(None, {"scaler": "deepspeed"}).space
DISTS = {
    "initial_scale_power": IntDistribution(0, 32), "loss_scale_window": IntDistribution(1, 1000, log=True),
    "hysteresis": IntDistribution(1, 8), "consecutive_hysteresis": IntDistribution(0, 1),
    "min_loss_scale": IntDistribution(1, 1024, log=True),
}  # fmt: skip


def trial(number, values, value, *, failure="none", tag=None, overflows=(), steps=30):
    curve = list(replay(DEEPSPEED, values, set(overflows), steps)[1 : steps + 1])
    attrs = {"failure": failure, "nonfinite": False, OVERFLOW_STEPS: list(overflows), SCALE_CURVE: curve}
    if tag:
        attrs[BASELINE] = tag
    made = create_trial(
        state=TrialState.COMPLETE, value=value, params=dict(values), distributions=DISTS, user_attrs=attrs
    )
    made.number = number
    return made


def test_a_window_that_never_acted_is_put_back_and_the_plain_loop_runs_both_the_same():
    """From 2^30 seed-mlp overflows for its first steps; window 500 never grows the scale in 30 steps and the
    minimum 3 is never reached, so the answer writes DeepSpeed's defaults (1000, 1) there; trained by the
    plain loop, both settings skip the same steps with the same scales and evaluate the same, and a window of
    5 (which grows) does not."""
    problem = build(42)
    runs = {}
    for window, minimum in ((500, 3), (1000, 1), (5, 3)):
        values = {
            **DEEPSPEED.default,
            "initial_scale_power": 30,
            "loss_scale_window": window,
            "min_loss_scale": minimum,
        }
        initial, next_scale = deepspeed_next(values)
        scales, skipped, ended = plain_rule_run(problem, initial, next_scale, 30)
        runs[window] = (values, scales, skipped, plain_evaluation(problem, LAST_RULE_MODEL[0]))
    values, scales, skipped, _ = runs[500]
    overflows = [i for i, s in enumerate(skipped) if s]
    measured = trial(0, values, 0.5, overflows=overflows)
    assert (
        measured.user_attrs[SCALE_CURVE] == scales
    )  # the replay of the recorded overflows is the run's curve
    minimal, reset = minimal_values(measured, values, DEEPSPEED)
    assert minimal == runs[1000][0] and set(reset) == {"loss_scale_window", "min_loss_scale"}
    assert runs[1000][1:] == runs[500][1:]  # the same scales, skips and evaluation, step for step
    assert runs[5][1] != runs[500][1]
    five = trial(1, runs[5][0], 0.5, overflows=[i for i, s in enumerate(runs[5][2]) if s])
    assert minimal_values(five, runs[5][0], DEEPSPEED)[0]["loss_scale_window"] == 5  # it acted: kept


def test_the_default_is_kept_when_good_and_deep_and_changed_when_it_ends_the_run():
    default = dict(DEEPSPEED.default)
    far = [{**default, "initial_scale_power": p, "hysteresis": 8, "loss_scale_window": 3} for p in (0, 1, 2)]
    good_default = [trial(0, default, 1.0, tag="deepspeed-default")]
    good_default += [trial(i + 1, v, 5.0, failure="frozen") for i, v in enumerate(far)]
    kept = answer_rule_study(good_default, SPACE, "deepspeed")
    assert kept.verdict == "keep-default" and kept.source_trial == 0 and kept.values == default
    assert "hysteresis 2" in kept.rule.notes(kept.values)[0]

    ended = [trial(0, default, 14.7, failure="ended_at_minimum", tag="deepspeed-default")]
    good = [{**default, "consecutive_hysteresis": 1, "initial_scale_power": p} for p in (6, 7, 8)]
    # Two lone overflows: with consecutive_hysteresis the clean step between refills it, and nothing halves.
    ended += [trial(i + 1, v, 1.0 + 0.001 * i, overflows=(3, 5)) for i, v in enumerate(good)]
    changed = answer_rule_study(ended, SPACE, "deepspeed")
    assert changed.verdict == "change" and changed.default_trial == 0
    assert "consecutive_hysteresis" in changed.changed and changed.values["consecutive_hysteresis"] == 1
    assert '"consecutive_hysteresis": true' in changed.block() and changed.n_good == 3
    # The deepest: 2^6, sqrt(10^2 + 1^2) from the default (the one trial that is not good), on the knobs'
    # axes.
    assert (
        changed.source_trial == 1 and math.isclose(changed.depth, math.sqrt(101)) and changed.nearest_bad == 0
    )
    assert changed.changed == ("initial_scale_power", "consecutive_hysteresis")


def test_no_good_trial_is_none_safe_with_nothing_to_paste():
    failed = [trial(0, DEEPSPEED.default, 14.0, failure="ended_at_minimum", tag="deepspeed-default")]
    answer = answer_rule_study(failed, SPACE, "deepspeed")
    assert answer.verdict == "none-safe" and answer.to_dict()["paste"] == {}


def test_a_tolerance_is_rounded_only_as_far_as_the_plain_loop_runs_it_the_same():
    """fairseq from 2^25 on seed-mlp with a tolerance of 0.2720736: the answer writes 0.27 (its replay is the
    same), and the plain loop moved by the fairseq transcription trains 0.27 to the same scales, skips and
    evaluation; a starting scale is never rounded by replay (1234567 would start elsewhere)."""
    from test_optimize_scalers import fairseq_next

    fairseq = RULES["fairseq"]
    problem = build(42)
    values = {
        **fairseq.default,
        "fp16_init_scale": 2**25,
        "fp16_scale_window": 3,
        "fp16_scale_tolerance": 0.2720736,
    }
    runs = []
    for tolerance in (0.2720736, 0.27):
        initial, next_scale = fairseq_next({**values, "fp16_scale_tolerance": tolerance})
        scales, skipped, _ = plain_rule_run(problem, initial, next_scale, 30)
        runs.append((scales, skipped, plain_evaluation(problem, LAST_RULE_MODEL[0])))
    overflows = [i for i, s in enumerate(runs[0][1]) if s]
    assert overflows and runs[1] == runs[0]
    curve = list(replay(fairseq, values, set(overflows), 30)[1:31])
    measured = create_trial(
        state=TrialState.COMPLETE,
        value=0.5,
        params={},
        distributions={},
        user_attrs={OVERFLOW_STEPS: overflows, SCALE_CURVE: curve},
    )
    assert curve == runs[0][0]
    rounded, which = rounded_values(measured, values, fairseq)
    assert rounded["fp16_scale_tolerance"] == 0.27 and which == {"fp16_scale_tolerance": (0.2720736, 0.27)}
    megatron = RULES["megatron"]
    start = {**megatron.default, "initial_loss_scale": 1234567.0}
    never = create_trial(
        state=TrialState.COMPLETE,
        value=0.5,
        params={},
        distributions={},
        user_attrs={OVERFLOW_STEPS: [], SCALE_CURVE: list(replay(megatron, start, set(), 5)[1:6])},
    )
    assert rounded_values(never, start, megatron) == (start, {})
