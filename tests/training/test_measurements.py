"""The service's measurements against an independent plain PyTorch loop (tests/plain_loop.py).

Every number a trial records (skipped steps, the scale curve, the zero-gradient fraction, the
evaluation loss, ``learned``, the failure code and the objective) is recomputed by a plain loop
written from the definitions in docs/internals.md and docs/objective.md, never by calling the trainer twice.
Settings are sampled and not powers of two (float32 rounds ``init_scale`` both up and down), and the tasks
include ones where PyTorch's default is not the best (deep-mlp, and deep-mlp-spikes and deep-mlp-sum, whose
good windows are closed on both sides) and a user task with clipping and outliers.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import examples.noisy_regression
from search.core import PenaltyConfig
from search.scalers import ScalerConfig
from search.tasks.deep_mlp import build as build_deep
from search.tasks.deep_mlp import build_spikes, build_sum
from search.tasks.seed_mlp import build as build_seed
from search.training import run_trial, train

from plain_loop import plain_fp32_zero_fraction, plain_run
from tasks_for_tests import exploding, sensor_outliers, sensor_validation, still


def _service(problem, cfg: ScalerConfig, steps: int) -> tuple[float, dict]:
    outcome = run_trial(
        problem,
        cfg,
        steps=steps,
        amp_dtype=torch.float16,
        penalty=PenaltyConfig(),
        device_label="cpu",
    )
    return outcome.value, outcome.user_attrs


def _compare(problem, cfg: ScalerConfig, steps: int, fp32_zeros: float) -> tuple[dict, object]:
    value, attrs = _service(problem, cfg, steps)
    plain = plain_run(problem, *cfg.__dict__.values(), steps, fp32_zeros=fp32_zeros)
    where = f"{cfg} on {steps} steps"
    assert attrs["skipped_steps"] == plain.skipped, where
    assert attrs["scale_curve"] == plain.scales, where  # float32 values, exactly
    assert attrs["zero_grad_fraction"] == pytest.approx(plain.zero_fraction, abs=1e-6), where
    assert attrs["fp32_zero_fraction"] == pytest.approx(fp32_zeros, abs=1e-6), where
    assert attrs["failure"] == plain.failure, where
    if plain.failure != "nonfinite":
        assert attrs["loss_curve"] == pytest.approx(plain.losses, rel=1e-5, abs=1e-7), where
        assert attrs["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-5), where
        assert attrs["initial_eval_loss"] == pytest.approx(plain.initial_eval_loss, rel=1e-5), where
        assert attrs["learned"] == plain.learned, where
    assert value == pytest.approx(plain.objective, rel=1e-5), where
    return attrs, plain


def _sampled_configs(n: int, seed: int, low: float, high: float) -> list[ScalerConfig]:
    rng = np.random.default_rng(seed)
    configs = []
    for _ in range(n):
        configs.append(
            ScalerConfig(
                init_scale=float(2.0 ** rng.uniform(low, high)),
                growth_factor=float(rng.uniform(1.1, 4.0)),
                backoff_factor=float(rng.uniform(0.1, 0.9)),
                growth_interval=int(rng.choice([1, 3, 7, 19, 2000])),
            )
        )
    return configs


def test_skip_counts_are_exact_for_sampled_non_power_of_two_scales():
    """The phantom skip: float32 rounding of init_scale must never count as a skipped step."""
    problem = build_seed(42)
    fp32 = plain_fp32_zero_fraction(problem, 30)
    # 20 draws, each trained twice (service and plain loop): as the 40 drawn before did at twice the time,
    # they hold both roundings, every growth_interval choice and the three failure codes (all asserted).
    configs = _sampled_configs(20, seed=11, low=-24, high=40)
    assert {c.growth_interval for c in configs} == {1, 3, 7, 19, 2000}
    configs.append(ScalerConfig(8.056740244482309e-05, 2, 0.5, 2000))  # The example.
    rounded = [float(torch.tensor(c.init_scale, dtype=torch.float32)) for c in configs]
    assert any(r < c.init_scale for r, c in zip(rounded, configs))  # float32 rounds down ...
    assert any(r > c.init_scale for r, c in zip(rounded, configs))  # ... and up
    failures = set()
    for cfg in configs:
        attrs, plain = _compare(problem, cfg, 30, fp32)
        failures.add(attrs["failure"])
    phantom = train(problem, configs[-1], epochs=30)
    assert phantom.skipped_steps == 0 and phantom.scale_curve[0] == rounded[-1]
    assert {"none", "underflow", "overflow_churn"} <= failures


@pytest.mark.parametrize(
    "cfg, failure, skips",
    [
        (ScalerConfig(2.0**16, 2.0, 0.5, 2000), "underflow", False),  # PyTorch's default on deep-mlp
        (ScalerConfig(3.1e5, 1.7, 0.37, 2000), "none", False),  # just inside the learning window
        (ScalerConfig(7.3e7, 2.3, 0.61, 9), "none", True),  # skips while it backs off, then grows again
        (ScalerConfig(4.4e4, 3.1, 0.45, 6), "none", True),  # escapes underflow by growing
    ],
)
def test_deep_mlp_mini_batches_match_the_plain_loop(cfg, failure, skips):
    problem = build_deep(42)
    attrs, plain = _compare(problem, cfg, 48, plain_fp32_zero_fraction(problem, 48))
    assert (
        (attrs["failure"], attrs["skipped_steps"] > 0)
        == (plain.failure, plain.skipped > 0)
        == (failure, skips)
    )


def test_deep_mlp_default_underflows_and_a_larger_scale_learns():
    problem = build_deep(42)
    fp32 = plain_fp32_zero_fraction(problem, 48)
    default, _ = _compare(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), 48, fp32)
    window, _ = _compare(problem, ScalerConfig(1.37 * 2.0**19, 2.0, 0.5, 2000), 48, fp32)
    assert default["failure"] == "underflow" and window["failure"] == "none"
    assert window["eval_loss"] < 0.5 * default["eval_loss"]


@pytest.mark.parametrize("init_scale", [3.3e-7, 2.9e2, 6.1e4, 1.9e9, 5.5e13])
def test_example_user_task_with_accumulation_and_clipping(init_scale):
    problem = examples.noisy_regression.build(42)
    attrs, plain = _compare(
        problem, ScalerConfig(init_scale, 2.7, 0.3, 5), 32, plain_fp32_zero_fraction(problem, 32)
    )
    assert attrs["evaluation"] == "final_weights" and len(attrs["scale_curve"]) == len(plain.scales) == 32
    assert attrs["skipped_steps"] == plain.skipped and attrs["failure"] == plain.failure


def test_zero_gradients_are_counted_before_clipping():
    """Overflowing steps used to count every finite gradient as zero: clip_grad_norm_ multiplies by
    max_norm / inf = 0. A huge init_scale on a clipped task must not look like underflow."""
    problem = sensor_outliers(42)
    fp32 = plain_fp32_zero_fraction(problem, 320)
    attrs, plain = _compare(problem, ScalerConfig(1.3 * 2.0**60, 2.0, 0.5, 2000), 320, fp32)
    assert attrs["skipped_steps"] > 20
    assert attrs["zero_grad_fraction"] < 0.1 and attrs["failure"] == "none"


def test_outlier_records_do_not_make_learning_runs_frozen():
    problem = sensor_outliers(42)
    fp32 = plain_fp32_zero_fraction(problem, 320)
    for cfg in (ScalerConfig(2.0**16, 2.0, 0.5, 2000), ScalerConfig(1.37 * 2.0**-11, 2.3, 0.4, 8)):
        attrs, plain = _compare(problem, cfg, 320, fp32)
        # The whole-data MSE is dominated by six 100x records and barely moves ...
        assert attrs["eval_loss"] > 0.9 * attrs["initial_eval_loss"]
        # ... yet the run learned: the typical chunk's loss fell by far more than 10%.
        assert attrs["learned"] and attrs["failure"] == "none"
        assert attrs["eval_median"] < 0.2 * attrs["initial_eval_median"]
        # The objective is the evaluation, not the last mini-batch's training loss.
        assert attrs["final_loss"] < 1.0 < attrs["eval_loss"]


def test_the_median_evaluation_is_the_plain_loops_median_chunk_loss():
    """[penalty] evaluation = "median": the objective reads the median chunk loss, which six 100x
    records do not decide (the mean does); the plain loop computes both its own way."""
    problem = sensor_outliers(42)
    fp32 = plain_fp32_zero_fraction(problem, 320)
    for cfg in (ScalerConfig(2.0**16, 2.0, 0.5, 2000), ScalerConfig(1.37 * 2.0**-11, 2.3, 0.4, 8)):
        outcome = run_trial(
            problem,
            cfg,
            steps=320,
            amp_dtype=torch.float16,
            penalty=PenaltyConfig(evaluation="median"),
            device_label="cpu",
        )
        plain = plain_run(problem, *cfg.__dict__.values(), 320, fp32_zeros=fp32, evaluation="median")
        assert outcome.user_attrs["eval_median"] == pytest.approx(plain.eval_median, rel=1e-5)
        assert outcome.value == pytest.approx(plain.objective, rel=1e-5)
        assert plain.objective < 0.2 < 1.0 < plain.eval_loss  # the mean would have ranked by the six records


def test_most_gradients_zero_while_learning_a_little_is_underflow():
    """95% zero gradients and a loss ten times the reachable one: flagged, not labelled fine."""
    problem = sensor_outliers(42)
    fp32 = plain_fp32_zero_fraction(problem, 320)
    partial, _ = _compare(problem, ScalerConfig(1.37 * 2.0**-20, 2.0, 0.5, 2000), 320, fp32)
    assert partial["learned"] and partial["zero_grad_fraction"] > 0.9
    assert partial["failure"] == "underflow"
    assert partial["eval_median"] > 5 * 0.0745  # what 2^16 reaches on this task


def test_validation_data_and_eval_function():
    problem = sensor_validation(42)
    fp32 = plain_fp32_zero_fraction(problem, 320)
    attrs, plain = _compare(problem, ScalerConfig(3.7e3, 1.9, 0.55, 40), 320, fp32)
    assert attrs["evaluation"] == "final_weights" and attrs["learned"]
    assert attrs["eval_loss"] < 0.5  # mean absolute error on the clean held-out records


def test_nonfinite_and_frozen_codes():
    diverging = exploding(42)
    attrs, _ = _compare(diverging, ScalerConfig(3.3e3, 2.0, 0.5, 2000), 30, 0.0)
    assert attrs["failure"] == "nonfinite"
    frozen = still(42)
    attrs, _ = _compare(frozen, ScalerConfig(5.1e3, 2.0, 0.5, 2000), 30, plain_fp32_zero_fraction(frozen, 30))
    assert attrs["failure"] == "frozen" and attrs["zero_grad_fraction"] < 0.1
    assert math.isfinite(attrs["eval_loss"])


def test_deep_mlp_spikes_window_is_closed_in_the_plain_loop():
    # Four corrupted targets (x64) put ~64x larger gradients into a few mini-batches per pass.
    # A scale that grows back every few steps overflows on those batches and skips them; a long
    # growth_interval lets them through after the first backoffs; interval 1 overflows every other
    # step; a low scale underflows. Each run is measured both ways.
    problem = build_spikes(42)
    steps = 256
    fp32 = plain_fp32_zero_fraction(problem, steps)
    default, plain_default = _compare(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), steps, fp32)
    window, plain_window = _compare(problem, ScalerConfig(2.9e5, 1.9, 0.6, 3), steps, fp32)
    slower, plain_slower = _compare(problem, ScalerConfig(2.9e5, 1.9, 0.6, 30), steps, fp32)
    # The two failing edges show from the first steps: 48 of them are enough.
    churn, _ = _compare(problem, ScalerConfig(6.5e6, 2.0, 0.5, 1), 48, plain_fp32_zero_fraction(problem, 48))
    low, _ = _compare(problem, ScalerConfig(3.0e3, 1.7, 0.5, 2000), 48, plain_fp32_zero_fraction(problem, 48))
    assert default["failure"] == window["failure"] == slower["failure"] == "none"
    assert plain_window.objective < 0.25 * plain_default.objective  # the default is far from the best
    assert plain_window.objective < 0.25 * plain_slower.objective  # the same scale, growing back 10x slower
    assert plain_window.skipped > 5 * plain_slower.skipped  # ...because it skips the spiky batches
    assert churn["failure"] == "overflow_churn" and low["failure"] == "underflow"


def test_deep_mlp_sum_window_is_closed_in_the_plain_loop():
    # The summed loss moves every gradient up by the 4096 elements of a batch: the window of
    # deep-mlp (2^19..2^20) moves 12 octaves down, PyTorch's default sits above it and spends its
    # first steps backing off, in a run of only 64 steps; below the window gradients underflow, and
    # above it a backoff close to 1 skips every step.
    problem = build_sum(42)
    steps = 64
    fp32 = plain_fp32_zero_fraction(problem, steps)
    default, plain_default = _compare(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), steps, fp32)
    window, plain_window = _compare(problem, ScalerConfig(5.7e2, 1.6, 0.4, 700), steps, fp32)
    low, _ = _compare(problem, ScalerConfig(3.3e1, 2.0, 0.5, 2000), steps, fp32)
    churn, _ = _compare(problem, ScalerConfig(9.1e5, 2.2, 0.93, 2000), steps, fp32)
    assert default["failure"] == window["failure"] == "none"
    assert plain_default.skipped >= 6 > plain_window.skipped
    assert plain_default.scales[:5] == [2.0 ** (15 - i) for i in range(5)]  # backs off from the first step
    assert plain_window.objective < plain_default.objective - 0.05  # the default is not the best
    assert low["failure"] == "underflow" and churn["failure"] == "overflow_churn"
