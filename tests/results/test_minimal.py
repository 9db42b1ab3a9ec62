"""The minimal change: settings that did not act go back to PyTorch's defaults, and the run stays the same.

The trial is trained by the service (its recorded scale curve is what :func:`minimal_change`
reads); the claim, "the minimal line runs the same, step for step", is checked with the
independent plain loop (tests/plain_loop.py) on settings that are not powers of two.
"""

from __future__ import annotations

import optuna
import pytest
import torch

from search.core import PenaltyConfig
from search.results import changed_settings, minimal_change
from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import run_trial

from plain_loop import plain_run

STEPS = 40
DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)


@pytest.fixture(scope="module")
def problem():
    return build(42)


def measured(problem, config: ScalerConfig) -> optuna.trial.FrozenTrial:
    """A COMPLETE trial as the service records it: its run attrs from a real training run."""
    outcome = run_trial(
        problem, config, steps=STEPS, amp_dtype=torch.float16, penalty=PenaltyConfig(), device_label="cpu"
    )
    return optuna.trial.create_trial(value=outcome.value, user_attrs=outcome.user_attrs)


def same_run(problem, a: ScalerConfig, b: ScalerConfig) -> bool:
    """Whether the plain loop trains ``a`` and ``b`` identically: every loss and every scale."""
    run_a = plain_run(problem, a.init_scale, a.growth_factor, a.backoff_factor, a.growth_interval, STEPS)
    run_b = plain_run(problem, b.init_scale, b.growth_factor, b.backoff_factor, b.growth_interval, STEPS)
    return run_a.losses == run_b.losses and run_a.scales == run_b.scales


def test_no_skip_and_no_growth_leave_only_init_scale(problem):
    config = ScalerConfig(1234.5, 3.7, 0.31, 77)  # 77 > 40 steps: the scale cannot grow
    minimal, reset = minimal_change(measured(problem, config), config)
    assert minimal == ScalerConfig(1234.5, 2.0, 0.5, 2000)
    assert set(reset) == {"growth_factor", "backoff_factor", "growth_interval"}
    assert reset["backoff_factor"] == "no step was skipped"
    assert "never grew in its 40 steps" in reset["growth_factor"]
    assert changed_settings(minimal) == ("init_scale",)
    assert same_run(problem, config, minimal)


def test_a_skipping_run_keeps_its_backoff_and_loses_the_growth_it_never_used(problem):
    config = ScalerConfig(1.37 * 2.0**40, 3.7, 0.31, 77)  # overflows at first: skips until backed off
    trial = measured(problem, config)
    assert trial.user_attrs["skipped_steps"] > 0
    minimal, reset = minimal_change(trial, config)
    assert minimal == ScalerConfig(1.37 * 2.0**40, 2.0, 0.31, 2000)
    assert set(reset) == {"growth_factor", "growth_interval"}
    assert "at most" in reset["growth_interval"]  # the longest unskipped stretch, under 2000
    assert same_run(problem, config, minimal)
    # The backoff really acted: PyTorch's 0.5 runs differently.
    assert not same_run(problem, config, ScalerConfig(1.37 * 2.0**40, 2.0, 0.5, 2000))


def test_a_growing_run_keeps_its_growth_settings(problem):
    config = ScalerConfig(1234.5, 3.7, 0.31, 7)  # grows every 7 unskipped steps
    minimal, reset = minimal_change(measured(problem, config), config)
    assert minimal == ScalerConfig(1234.5, 3.7, 0.5, 7) and set(reset) == {"backoff_factor"}
    assert same_run(problem, config, minimal)
    assert not same_run(problem, config, ScalerConfig(1234.5, 2.0, 0.5, 7))  # growth_factor acted
    assert not same_run(problem, config, ScalerConfig(1234.5, 3.7, 0.5, 2000))  # growth_interval acted


def test_the_default_is_changed_in_nothing_and_an_unreadable_curve_keeps_everything():
    assert changed_settings(DEFAULT) == ()
    config = ScalerConfig(1234.5, 3.7, 0.31, 77)
    blind = optuna.trial.create_trial(value=1.0, user_attrs={"scale_curve": [1234.5, None]})
    assert minimal_change(blind, config) == (config, {})
