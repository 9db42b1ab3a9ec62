import math

import pytest
import torch

from search.tasks.seed_mlp import build
from search.trainer import ScalerConfig
from search.trainer import TrialTimeout
from search.trainer import train
from tasks_for_tests import exploding


DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)


@pytest.fixture(scope="module")
def problem():
    return build(42)


def test_seed_task_reproduces_the_seed_scripts_random_sequence():
    torch.manual_seed(42)
    x = torch.randn(2048, 16)
    noise = torch.randn(2048)
    y = (x[:, 0] * 2 + x[:, 1] * 1.5 + noise * 0.1 > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    p = build(42)
    assert torch.equal(p.inputs, x) and torch.equal(p.targets, y)
    for a, b in zip(p.model.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_every_run_starts_from_the_same_weights(problem):
    before = {k: v.clone() for k, v in problem.model.state_dict().items()}
    first = train(problem, DEFAULT, epochs=5)
    second = train(problem, ScalerConfig(2.0**8, 4.0, 0.25, 1), epochs=5)
    third = train(problem, DEFAULT, epochs=5)
    for k, v in problem.model.state_dict().items():
        assert torch.equal(v, before[k]), "training must not touch the problem's initial weights"
    # Same start, same data: epoch 1's loss (before any update) is identical for all settings.
    assert first.loss_curve[0] == second.loss_curve[0] == third.loss_curve[0]
    assert first.loss_curve == third.loss_curve


def test_curves_and_final_losses(problem):
    r = train(problem, DEFAULT, epochs=30)
    assert len(r.loss_curve) == len(r.scale_curve) == r.epochs == 30
    assert r.final_loss == r.loss_curve[-1]
    assert r.final_loss_fp32 < r.loss_curve[0] * 0.7
    assert r.skipped_steps == 0 and r.weights_finite
    assert r.scale_curve == [2.0**16] * 30  # growth_interval 2000 > 30 steps: the scale never grows


def test_forced_overflow_is_counted_as_skipped_steps(problem):
    r = train(problem, ScalerConfig(2.0**32, 2.0, 0.5, 2000), epochs=30)
    drops = sum(1 for a, b in zip([2.0**32] + r.scale_curve, r.scale_curve) if b < a)
    assert r.skipped_steps == drops >= 10
    assert r.scale_curve[r.skipped_steps - 1] == 2.0**32 * 0.5**r.skipped_steps


def test_growth_acts_when_growth_interval_is_short(problem):
    r = train(problem, ScalerConfig(2.0**-4, 2.0, 0.5, 1), epochs=10)
    assert r.scale_curve[:3] == [2.0**-3, 2.0**-2, 2.0**-1]


def test_tiny_scale_underflows_to_zero_gradients(problem):
    r = train(problem, ScalerConfig(2.0**-20, 2.0, 0.5, 2000), epochs=30)
    assert r.zero_grad_fraction == 1.0
    assert r.final_loss_fp32 == pytest.approx(r.loss_curve[0], rel=1e-3)
    assert r.skipped_steps == 0


def test_real_divergence_gives_nonfinite_loss():
    r = train(exploding(42), DEFAULT, epochs=30)
    assert math.isfinite(r.loss_curve[0]) and any(math.isnan(v) for v in r.loss_curve)


def test_bfloat16_runs(problem):
    r = train(problem, DEFAULT, epochs=5, amp_dtype=torch.bfloat16)
    assert r.epochs == 5 and r.weights_finite


def test_deadline_stops_between_steps(problem):
    with pytest.raises(TrialTimeout):
        train(problem, DEFAULT, epochs=30, deadline=0.0)


def test_should_stop_is_asked_only_at_checkpoints(problem):
    asked = []

    def stop(epoch, loss):
        asked.append(epoch)
        return epoch >= 9

    r = train(problem, DEFAULT, epochs=30, checkpoints=(5, 10, 15), should_stop=stop)
    assert asked == [4, 9] and r.stopped_early and r.epochs == 10


def test_gradscaler_line():
    assert DEFAULT.as_code("cpu") == (
        'torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2, backoff_factor=0.5, '
        "growth_interval=2000)"
    )
