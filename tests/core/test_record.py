"""search.core._record: the one owner of the trial record."""

from __future__ import annotations

import optuna
import torch
from optuna.trial import TrialState

from search.core import PenaltyConfig
from search.core import _record as record
from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import run_trial


def test_a_run_writes_exactly_the_record_modules_run_attrs():
    outcome = run_trial(
        build(42),
        ScalerConfig(3.1e3, 1.7, 0.6, 7),
        steps=5,
        amp_dtype=torch.float16,
        penalty=PenaltyConfig(),
        device_label="cpu",
    )
    assert set(outcome.user_attrs) == set(record.RUN_ATTRS)


def _trial(number: int, value: float, **attrs) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(state=TrialState.COMPLETE, value=value, user_attrs=attrs)
    trial.number = number
    return trial


def test_reading_a_trial_back():
    default = _trial(0, 0.5, baseline="seed-1", device="cuda:0 (NVIDIA H200)")
    nan = _trial(1, 15.0, nonfinite=True, failure="none", loss_curve=[1.0, None])
    sampled = _trial(2, 0.4, failure="underflow", device="cpu", loss_curve=[1.0, 0.5])
    churn = _trial(3, 1.4, failure="overflow_churn", loss_curve=[1.0, 0.9])
    trials = [default, nan, sampled, churn]
    assert record.baseline_of(default) == "seed-1" and record.baseline_of(sampled) is None
    assert record.default_trial(trials) is default
    assert [record.failure_of(t) for t in trials] == ["none", "nonfinite", "underflow", "overflow_churn"]
    assert record.device_kind(default) == "cuda" and record.device_kind(sampled) == "cpu"
    assert record.device_kind(churn) == "unknown" and record.device_kind(churn, "cuda") == "cuda"
    shown = record.showcase(trials)
    # The non-finite trial has the highest value but is not "worst finite"; ties go to the lower number.
    assert (shown.best, shown.default, shown.worst_finite) == (sampled, default, churn)
    assert record.showcase([]).best is None
