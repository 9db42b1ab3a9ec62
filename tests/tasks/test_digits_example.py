"""examples/digits_convnet.py: a LoaderProblem (DataLoader, BatchNorm, dropout) trained by the service.

The example's trials must be common random numbers like a tensor task's: the same batches, dropout
masks and initial BatchNorm statistics in every trial, so two settings differ only by what the scaler
does. A plain PyTorch AMP loop written here from the documented definitions (batches drawn once with
the global RNG seeded from ``problem.seed``, ``torch.manual_seed((seed * 1_000_003 + step) % 2**63)``
before each step, the final weights evaluated in fp32 eval mode) reproduces the service's numbers.
"""

from __future__ import annotations

import pathlib

import pytest
import torch
from torch import nn


def build(seed: int) -> LoaderProblem:
    """The example's build (conftest.example_build: imported when a test runs)."""
    return example_build("digits_convnet", "scikit-learn")(seed)


from search.scalers import ScalerConfig
from search.tasks import LoaderProblem
from search.training import TrainResult, train

from conftest import example_build, run_cli
from plain_loader_loop import plain_loader_run
from plain_loop import PlainRun

SEED = 0
DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)  # PyTorch's default, a seed baseline.
LOW = ScalerConfig(2.0**8, 2.0, 0.5, 2000)  # The seed baseline "low init_scale".
# Not a power of two anywhere; skips its first two steps, grows after 7 clean steps, backs off again.
ODD = ScalerConfig(1.37 * 2**20, 1.9, 0.31, 7)


@pytest.fixture(scope="module")
def problem() -> LoaderProblem:
    """One problem for the module: its batches are drawn, and its fp32 reference run, once."""
    return build(SEED)


@pytest.fixture(scope="module")
def default(problem: LoaderProblem) -> TrainResult:
    """A trial of PyTorch's default, trained once for the module (the global RNG left at seed 123)."""
    torch.manual_seed(123)
    return train(problem, DEFAULT)


def curves(result: TrainResult) -> tuple[list[float], list[float], float]:
    return result.loss_curve, result.scale_curve, result.eval_loss


def test_two_trials_with_the_same_settings_are_bit_identical(
    problem: LoaderProblem, default: TrainResult
) -> None:
    """Dropout draws the same masks in every trial: the trainer seeds each step, so the global RNG's
    state before a trial (different here) changes nothing, and the model really has dropout."""
    assert any(isinstance(m, nn.Dropout) and m.p > 0 for m in problem.model.modules())
    torch.manual_seed(456)
    second = train(problem, DEFAULT)
    assert default.steps == second.steps == problem.steps == len(default.loss_curve)
    assert curves(default) == curves(second)
    assert default.skipped == second.skipped


def test_the_seed_baselines_do_not_skip_and_scales_inside_fp16s_range_tie(
    problem: LoaderProblem, default: TrainResult
) -> None:
    """2^8 and 2^16 skip no step. Power-of-two scales that keep the scaled gradients normal fp16
    numbers (neither subnormal nor overflowing) scale and unscale exactly, so 2^14 and 2^16 tie bit
    for bit (so do 2^15 and 2^17; 2^18 skips a step). 2^8 does not tie on this task: some of its scaled
    fp16 gradients are subnormal and lose bits (measured: its curve leaves 2^16's at step 14, eval loss
    1.4959 against 1.4943), so it is only checked to be close. Where subnormals begin depends on the
    CPU's fp16 kernels: 2^12 tied on one machine and parts at step 12 on an AMD EPYC (zero share
    0.03363 against 0.03354), so the tie is checked two octaves below the default, not four."""
    low, high = train(problem, LOW), default
    assert low.skipped_steps == 0 and high.skipped_steps == 0
    assert low.eval_loss == pytest.approx(high.eval_loss, rel=1e-2)
    mid = train(problem, ScalerConfig(2.0**14, 2.0, 0.5, 2000))
    assert mid.skipped_steps == 0
    assert curves(mid)[0] == curves(high)[0] and mid.eval_loss == high.eval_loss
    assert mid.zero_grad_fraction == high.zero_grad_fraction


def test_batchnorm_statistics_start_from_the_initial_state_in_every_trial(
    problem: LoaderProblem, default: TrainResult
) -> None:
    """Trials train copies: problem.model's weights and BatchNorm buffers (running mean and variance,
    batches tracked) are unchanged after trials, and a trial after another setting's trial gives the
    same numbers as before it (no statistics carried over from one trial to the next)."""
    initial = {k: v.clone() for k, v in problem.model.state_dict().items()}
    assert any(k.endswith("running_mean") for k in initial)
    train(problem, ODD)
    after = train(problem, DEFAULT)
    state = problem.model.state_dict()
    assert state.keys() == initial.keys()
    assert all(torch.equal(state[k], initial[k]) for k in initial)
    assert all(int(v) == 0 for k, v in state.items() if k.endswith("num_batches_tracked"))
    assert curves(default) == curves(after)


@pytest.fixture(scope="module")
def odd(problem: LoaderProblem) -> tuple[PlainRun, TrainResult]:
    """The plain loop's and the service's run of ODD."""
    return plain_loader_run(problem, *ODD.__dict__.values(), problem.steps), train(problem, ODD)


def test_a_plain_loop_reproduces_the_steps_of_a_skipping_setting(odd: tuple[PlainRun, TrainResult]) -> None:
    """The independent plain loop (tests/plain_loader_loop.py: its own batches from the same DataLoader,
    per-step seeds, its own skip detection) gives the service's skipped steps, scale curve, loss curve and
    zero fraction, on a setting with no power of two that skips, grows and backs off."""
    plain, service = odd
    assert plain.skipped >= 1
    assert service.skipped_steps == plain.skipped
    assert service.scale_curve == plain.scales
    assert any(b > a for a, b in zip(plain.scales, plain.scales[1:]))  # It grew too: both rules ran.
    assert service.loss_curve == pytest.approx(plain.losses, rel=1e-5)
    assert service.zero_grad_fraction == pytest.approx(plain.zero_fraction, rel=1e-9)
    assert service.eval_loss == pytest.approx(plain.eval_loss, rel=1e-5)


def test_the_command_runs_the_example(tmp_path: pathlib.Path) -> None:
    """search.optimize builds the example by its import path, probes it and runs a 5-trial study
    (the seed baselines, 8 steps each) named after the module; search.confirm confirms it."""
    proc = run_cli(
        ["--task", "examples.digits_convnet:build", "--trials", "5", "--steps", "8", "--quiet"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "Study 'digits_convnet'" in proc.stdout
    confirm = run_cli(
        ["--study-name", "digits_convnet", "--top", "1", "--seeds", "2", "--no-corners", "--quiet"],
        tmp_path,
        module="search.confirm",
    )
    assert confirm.returncode == 0, confirm.stderr
