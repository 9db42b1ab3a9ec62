"""search.publishing._figures: the curves and skipped-step markers every picture and figure draws, against the
plain loop."""

from __future__ import annotations

import dataclasses

import optuna
import torch

from search.core import DEFAULTS, SpaceConfig, scaler_config
from search.publishing import trial_curves
from search.tasks.seed_mlp import build
from search.training import run_trial

from plain_loop import plain_run


def test_skipped_steps_are_counted_from_the_first_step_when_every_setting_is_fixed():
    """With every setting fixed a trial has no params; the first step's skip (2^24 backs off to 2^23 at
    step 1) was compared with NaN and lost: 4 of 5 skipped steps were shown."""
    fixed = {
        "init_scale": 1.37 * 2.0**23,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    space = SpaceConfig(
        **{n: dataclasses.replace(getattr(DEFAULTS.space, n), fixed=v) for n, v in fixed.items()}
    )
    problem = build(42)
    out = run_trial(
        problem,
        scaler_config({}, space),
        steps=30,
        amp_dtype=torch.float16,
        penalty=DEFAULTS.penalty,
        device_label="cpu",
    )
    trial = optuna.trial.create_trial(value=out.value, params={}, distributions={}, user_attrs=out.user_attrs)
    plain = plain_run(problem, fixed["init_scale"], 2.0, 0.5, 2000, 30)
    _loss, _scale, skipped = trial_curves(trial, space)
    assert plain.skipped >= 2 and len(skipped) == plain.skipped == out.user_attrs["skipped_steps"]
    assert skipped[0] == 0  # The first optimizer step (indices into the curves).
