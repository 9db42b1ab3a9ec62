"""search.publishing._trial_pictures: the SVG drawn for each trial."""

from __future__ import annotations

import re

import optuna
from optuna.distributions import FloatDistribution, IntDistribution

from search.core import DEFAULTS
from search.publishing import curves_svg


def test_a_constant_scale_is_labelled_with_its_own_value():
    """A scale that never changed was labelled with the padding around it (2^17.0 and 2^15.0 for 2^16)."""
    params = {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    dists = {
        "init_scale": FloatDistribution(2.0**-20, 2.0**32, log=True),
        "growth_factor": FloatDistribution(1.01, 8.0, log=True),
        "backoff_factor": FloatDistribution(0.05, 0.95),
        "growth_interval": IntDistribution(1, 2000, log=True),
    }
    attrs = {"loss_curve": [0.7, 0.6, 0.5], "scale_curve": [2.0**16] * 3, "skipped_steps": 0}
    trial = optuna.trial.create_trial(value=0.5, params=params, distributions=dists, user_attrs=attrs)
    labels = re.findall(r">(2\^[-0-9.]+)</text>", curves_svg(trial, DEFAULTS.space))
    assert labels == ["2^16.0"]
