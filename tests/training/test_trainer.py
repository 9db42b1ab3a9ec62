import math
import time

import pytest
import torch

from search.scalers import ScalerConfig
from search.tasks.seed_mlp import build
from search.training import TrialTimeout, train

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
    assert len(r.loss_curve) == len(r.scale_curve) == r.steps == 30
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
    assert r.steps == 5 and r.weights_finite


def test_timeout_stops_between_steps(problem):
    with pytest.raises(TrialTimeout):
        train(problem, DEFAULT, epochs=30, timeout=1e-9)


@pytest.mark.parametrize("population", [False, True], ids=["trial", "population"])
def test_timeout_does_not_count_the_shared_fp32_reference(problem, monkeypatch, population):
    """--trial-timeout limits a trial's own training: the fp32 reference run, which the process's
    first trial computes for all, is outside it (it used to fail the first trial of each process)."""
    from search.training import _population, _trainer, train_population

    real = _trainer.fp32_zero_fraction

    def slow_reference(*args, **kwargs):
        time.sleep(0.6)  # a reference far longer than the limit below
        return real(*args, **kwargs)

    monkeypatch.setattr(_trainer, "fp32_zero_fraction", slow_reference)
    monkeypatch.setattr(_population, "fp32_zero_fraction", slow_reference)
    start = time.perf_counter()
    if population:
        (result,) = train_population(problem, [DEFAULT], epochs=3, timeout=0.5)
    else:
        result = train(problem, DEFAULT, epochs=3, timeout=0.5)
    assert time.perf_counter() - start > 0.6  # the reference really ran before the trial's clock
    assert result.steps == 3 and result.train_seconds < 0.5


def test_should_stop_is_asked_only_at_checkpoints(problem):
    asked = []

    def stop(epoch, loss):
        asked.append(epoch)
        return epoch >= 9

    r = train(problem, DEFAULT, epochs=30, checkpoints=(5, 10, 15), should_stop=stop)
    assert asked == [4, 9] and r.stopped_early and r.steps == 10


def test_gradscaler_line():
    assert (
        DEFAULT.as_code("cpu")
        == 'torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_factor=2, backoff_factor=0.5, '
        "growth_interval=2000)"
    )


@pytest.mark.parametrize(
    "cfg",
    [
        ScalerConfig(812458.9183600853, 2.9040976774470755, 0.32688828838302414, 1000),
        ScalerConfig(8.056740244482309e-05, 1.05, 0.3, 7),
        ScalerConfig(7022299.065740859, 1.0560670935705447, 0.367, 214),
    ],
)
def test_gradscaler_line_reproduces_the_setting(cfg):
    """Pasting the line builds a GradScaler with the measured scale (float32) and factors, exactly."""
    line = cfg.as_code("cpu")
    scaler = eval(line, {"torch": torch})
    held = scaler.scale(torch.ones((), dtype=torch.float32)).item()  # the float32 scale it multiplies by
    assert held == torch.tensor(cfg.init_scale, dtype=torch.float32).item()
    assert (
        scaler.get_growth_factor() == cfg.growth_factor and scaler.get_backoff_factor() == cfg.backoff_factor
    )
    assert scaler.get_growth_interval() == cfg.growth_interval
    assert len(line) < 150, line  # still short where short values reproduce it


# -- mini-batches, accumulation, clipping -------------------------------------------------------


def _minibatch(problem, **changes):
    from dataclasses import replace

    return replace(problem, **changes)


def test_batch_plan_is_the_same_for_every_trial_and_covers_each_epoch():
    from search.training import batch_plan

    problem = _minibatch(build(42), batch_size=500, accumulation_steps=2, shuffle_seed=7)
    plan = batch_plan(problem, epochs=3)
    again = batch_plan(problem, epochs=3)
    assert len(plan) == 3 * 3  # ceil(2048 / 500) = 5 micro-batches, 2 per step -> 3 steps per epoch
    assert all(torch.equal(a, b) for sa, sb in zip(plan, again) for a, b in zip(sa, sb))
    first_epoch = torch.cat([i for step in plan[:3] for i in step])
    assert sorted(first_epoch.tolist()) == list(range(2048))
    assert len(batch_plan(problem, epochs=3, steps=4)) == 4
    assert batch_plan(build(42), epochs=5) == [[None]] * 5  # Full batch: one step per epoch.


def test_accumulating_two_halves_is_one_full_batch_step():
    problem = build(42)
    order = _minibatch(problem, batch_size=1024, accumulation_steps=2)
    cfg = ScalerConfig(2.0**10, 2.0, 0.5, 2000)
    full = train(problem, cfg, epochs=1, amp_dtype=torch.bfloat16)
    halves = train(order, cfg, epochs=1, amp_dtype=torch.bfloat16)
    # Loss of the step = mean of the two half-batch losses = the full-batch loss (bf16 rounding apart).
    assert halves.steps == 1 and abs(halves.loss_curve[0] - full.loss_curve[0]) < 1e-2
    assert abs(halves.final_loss_fp32 - full.final_loss_fp32) < 1e-2


def test_clipping_uses_unscaled_gradients():
    """After scaler.unscale_, clip_grad_norm_ caps the *true* gradient: one SGD step moves the
    weights by exactly lr * clip. Clipping the scaled gradients would move them 2^16 times less."""
    trained: list[torch.nn.Parameter] = []

    def sgd(params):  # The trainer hands the optimizer the trial's own copy of the weights.
        trained.extend(params)
        return torch.optim.SGD(trained, lr=0.1)

    problem = _minibatch(build(42), grad_clip=1e-3, make_optimizer=sgd)
    before = [p.detach().clone() for p in problem.model.parameters()]
    result = train(problem, ScalerConfig(2.0**16, 2.0, 0.5, 2000), epochs=1)
    assert result.skipped_steps == 0
    moved = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(trained, before)))
    assert float(moved) == pytest.approx(0.1 * 1e-3, rel=0.02)  # lr 0.1 x clip 1e-3


def test_train_seconds_leave_out_the_references_shared_by_every_trial(monkeypatch):
    """The fp32 zero fraction and the initial weights' evaluation are computed once per problem: the first
    trial of a process must not carry them in its train_seconds (it showed 0.59 s against 0.36 s)."""
    import time

    import search.training._trainer
    from search.tasks.deep_mlp import build as build_deep

    from conftest import slowed

    problem = build_deep(7)
    zeros, initial = search.training._trainer.fp32_zero_fraction, search.training._trainer.initial_evaluation

    # 0.5 s each: either one inside train_seconds would be 10x the ~0.05 s the 8 steps take.
    monkeypatch.setattr(search.training._trainer, "fp32_zero_fraction", slowed(zeros, 0.5))
    monkeypatch.setattr(search.training._trainer, "initial_evaluation", slowed(initial, 0.5))
    begin = time.perf_counter()
    result = train(problem, ScalerConfig(3.1e4, 1.7, 0.3, 9), epochs=problem.epochs, steps=8)
    assert time.perf_counter() - begin > 1.0  # Both references really ran in the call...
    assert result.train_seconds < 0.5  # ...outside the trial's own time,
    assert result.fp32_zero_fraction == zeros(problem, problem.epochs, 8)  # and their values are the trial's.
    assert result.initial_eval_loss == initial(problem).loss


def test_the_seed_baselines_2_8_and_2_16_tie_exactly_when_neither_skips():
    """Common random numbers on the seed task: scales that neither skip nor lose a gradient bit give the
    same run, step for step (issue 26: the ties the summary reports are exact, not noise)."""
    seed_task = build(42)
    low = train(seed_task, ScalerConfig(2.0**8, 2.0, 0.5, 2000), epochs=30)
    default = train(seed_task, ScalerConfig(2.0**16, 2.0, 0.5, 2000), epochs=30)
    assert low.skipped_steps == default.skipped_steps == 0
    assert low.loss_curve == default.loss_curve and low.eval_loss == default.eval_loss
