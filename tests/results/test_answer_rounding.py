"""The answer's line rounded (search.results._answer_rounding): coarse to fine, each rounding taken only once
a trial has measured it good with the same settings acting; the runs behind the verdicts are checked with the
independent plain loop (tests/plain_loop.py) on settings that are not powers of two."""

from __future__ import annotations

import struct

import optuna
import pytest
import torch

from search.core import DEFAULTS, ParamRange, PenaltyConfig, distributions
from search.results import recommend
from search.results._answer_rounding import (
    candidate_params,
    measured_rounding,
    rounding_candidates,
    significant,
)
from search.results._landscape import Landscape
from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import run_trial

from plain_loop import plain_run

SPACE = DEFAULTS.space
STEPS = 40


def test_candidates_go_coarse_to_fine_and_round_only_what_the_line_changes():
    line = ScalerConfig(0.0263627835, 6.217871638735313, 0.29822198794172433, 618)
    assert rounding_candidates(line, line, SPACE) == [
        ScalerConfig(0.03125, 6.2, 0.3, 620),  # init_scale 2^-5; two significant digits
        ScalerConfig(0.026, 6.2, 0.3, 620),
        ScalerConfig(0.0264, 6.22, 0.298, 618),  # three significant digits
        ScalerConfig(0.026362784, 6.2178716, 0.29822199, 618),  # the fewest digits of the same float32
    ]
    # Each reads as the trial's own value in float32 (GradScaler's scale); with a digit fewer it would not.
    for written, own, fewer in (
        (0.026362784, 0.0263627835, 0.02636278),
        (6.2178716, 6.217871638735313, 6.217872),
        (0.29822199, 0.29822198794172433, 0.2982220),
    ):
        assert struct.pack("f", written) == struct.pack("f", own) != struct.pack("f", fewer)
    # growth_factor is rounded through g - 1 (1.0 would never grow); defaults are not touched.
    near_one = ScalerConfig(2.0**16, 1.04371, 0.5, 2000)
    assert [c.growth_factor for c in rounding_candidates(near_one, near_one, SPACE)] == [1.044, 1.0437]
    # As people write it: 1 + 1.89 is 2.8899999999999997 in floats.
    wide = ScalerConfig(2.0**16, 2.891234, 0.5, 2000)
    assert [c.growth_factor for c in rounding_candidates(wide, wide, SPACE)] == [2.9, 2.89]
    assert rounding_candidates(ScalerConfig(2.0**16, 2.0, 0.5, 2000), near_one, SPACE) == []
    # A rounded value outside the searched range keeps the trial's own value.
    narrow = SPACE.__class__(**{**SPACE.__dict__, "growth_interval": ParamRange(1, 600, log=True)})
    assert {c.growth_interval for c in rounding_candidates(line, line, narrow)} == {618}
    assert significant(618.3, 2) == 620.0 and significant(0.29822, 3) == 0.298


def test_a_setting_at_the_default_outside_the_range_trains_at_the_trials_own_value():
    narrow = SPACE.__class__(**{**SPACE.__dict__, "growth_interval": ParamRange(1, 600, log=True)})
    measured = ScalerConfig(1234.5, 3.7, 0.31, 77)
    params = candidate_params(ScalerConfig(1024.0, 2.0, 0.5, 2000), measured, narrow)
    assert params == {
        "init_scale": 1024.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 77,
    }


@pytest.fixture(scope="module")
def problem():
    torch.set_num_threads(1)
    return build(42)


def _trials(problem, configs: list[ScalerConfig]) -> list[optuna.trial.FrozenTrial]:
    """Trials numbered 0.. as the service records them: each a real training run of its config."""
    study = optuna.create_study()
    dists = distributions(SPACE)
    for config in configs:
        outcome = run_trial(
            problem, config, steps=STEPS, amp_dtype=torch.float16, penalty=PenaltyConfig(), device_label="cpu"
        )
        params = {name: getattr(config, name) for name in dists}
        study.add_trial(
            optuna.trial.create_trial(
                value=outcome.value, params=params, distributions=dists, user_attrs=outcome.user_attrs
            )
        )
    return study.get_trials(deepcopy=False)


def test_a_rounding_whose_run_skips_differently_is_refused_and_the_next_finer_one_taken(problem):
    # 741,234.5 skips once in 40 steps (backoff acts); 2^19, its power of two, never skips; 740,000 skips
    # once.
    source = ScalerConfig(741234.5, 2.0, 0.313, 2000)
    coarse, finer = ScalerConfig(2.0**19, 2.0, 0.31, 2000), ScalerConfig(740000.0, 2.0, 0.31, 2000)
    assert rounding_candidates(source, source, SPACE)[:2] == [coarse, finer]
    for config, skipped in ((source, 1), (coarse, 0), (finer, 1)):  # the claims, by the plain loop
        assert plain_run(problem, *config.__dict__.values(), STEPS).skipped == skipped
    trials = _trials(problem, [source, coarse])
    landscape = Landscape.of(trials, SPACE, tolerance=0.05)
    first = measured_rounding(trials[0], source, landscape, SPACE, trials)
    assert first.trial is None and first.rejected == ((1, "backoff_factor acted differently in its run"),)
    assert first.pending == candidate_params(finer, source, SPACE)

    trials = _trials(problem, [source, coarse, finer])
    landscape = Landscape.of(trials, SPACE, tolerance=0.05)
    second = measured_rounding(trials[0], source, landscape, SPACE, trials)
    assert second.trial.number == 2 and second.config == finer and second.pending is None
    # Judged with a tolerance that leaves the skipping runs behind, the finer rounding is not good either.
    strict = Landscape.of(trials, SPACE, tolerance=0.001)
    refused = measured_rounding(trials[0], source, strict, SPACE, trials)
    assert refused.trial is None and refused.rejected[1][0] == 2 and "not good" in refused.rejected[1][1]


def test_the_answer_is_the_rounded_trials_line_and_its_numbers(problem):
    """Good trials from 2^-6.6 to 2^12.4, bad ones at 2^-12.6 (underflow) and 2^20.5 (skips, 4% behind):
    the deepest, 2^3.3, is rounded to 2^3; once that line is a trial of its own, it is the answer."""
    configs = [ScalerConfig(2.0**e, 2.0, 0.5, 2000) for e in (-6.6, -1.6, 3.3, 8.6, 12.4, -12.6, 20.5)]
    before = recommend(_trials(problem, configs), SPACE)
    assert before.verdict == "change" and before.source_trial == 2 and before.rounding.trial is None
    assert before.rounding.pending == {
        "init_scale": 8.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    assert "a rounding of its line has not been trained yet" in before.text

    trials = _trials(problem, [*configs, ScalerConfig(8.0, 2.0, 0.5, 2000)])
    after = recommend(trials, SPACE)
    assert (
        after.config == ScalerConfig(8.0, 2.0, 0.5, 2000)
        and after.source_trial == 7
        and after.rounded_from == 2
    )
    assert after.code == 'torch.amp.GradScaler("cpu", init_scale=2.0**3)'
    assert "The line is trial #7's: trial #2's rounded (init_scale 9.84916 to 8)" in after.text
    assert f"objective {trials[7].value:.4f}" in after.text
    # The number shown is the rounded line's own, as the plain loop trains it.
    assert plain_run(problem, 8.0, 2.0, 0.5, 2000, STEPS).objective == pytest.approx(
        trials[7].value, rel=1e-5
    )
