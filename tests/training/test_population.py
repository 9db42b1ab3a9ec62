"""Population mode (search/population.py) against the ordinary trainer, member by member, on the CPU.

Every member of a population must measure what :func:`search.training._trainer.train` measures for its setting
alone: the same skipped steps, the same float32 scale curve and the same failure code, exactly; the
zero-gradient fraction is compared exactly too. Settings are non-powers of two, and include ones that
skip and recover, one that underflows and one that churns.

Measured tolerance of the losses (torch 2.13.0+cpu, AMD EPYC, one thread):

* MSE tasks (deep-mlp, deep-mlp-sum, and every variant below with an MSE loss): **bitwise equal**,
  loss curves and evaluations included. The batched fp16 ``baddbmm``/``bmm`` give the bits ``addmm``/
  ``mm`` give, and every elementwise kernel is the same op.
* seed-mlp (cross-entropy): weights bitwise equal (``final_loss_fp32``, evaluated per member with the
  trainer's own kernels, is equal), but the recorded loss *values* differ by at most 2.3e-7 relative
  (40 sampled settings x 30 steps; 2.5e-7 in a second sample of 12): ``nll_loss``'s forward sums the
  batch in its own cascade order, the population sums each member's slice with ``mean``. The loss's
  gradient does not depend on that sum, so nothing else moves. These tests allow 1e-6 relative there
  (the last-step evaluation of a full-batch task is the last loss, so its objective value carries the
  same 2e-7).

What the CPU cannot show: on CUDA, cuBLAS may pick other GEMM algorithms for the batched shapes, so
the bitwise claims above are not claims about a GPU.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import examples.noisy_regression
from search.core import PenaltyConfig
from search.scalers import ScalerConfig
from search.tasks.deep_mlp import build as build_deep
from search.tasks.deep_mlp import build_sum
from search.tasks.seed_mlp import build as build_seed
from search.training import PopulationError, TrainResult, assess, check_population, train, train_population
from search.training._population_scaler import _update_scale

from conftest import CE_LOSS_REL


def _sampled(n: int, seed: int, low: float, high: float) -> list[ScalerConfig]:
    rng = np.random.default_rng(seed)
    return [
        ScalerConfig(
            init_scale=float(2.0 ** rng.uniform(low, high)),
            growth_factor=float(rng.uniform(1.1, 4.0)),
            backoff_factor=float(rng.uniform(0.1, 0.9)),
            growth_interval=int(rng.choice([1, 3, 7, 19, 2000])),
        )
        for _ in range(n)
    ]


def _assert_member_equals_trainer(
    member: TrainResult, ordinary: TrainResult, where: str, *, exact_losses: bool
) -> str:
    penalty = PenaltyConfig()
    mine, theirs = assess(member, penalty), assess(ordinary, penalty)
    assert member.skipped == ordinary.skipped, where
    assert member.skipped_steps == ordinary.skipped_steps, where
    assert member.scale_curve == ordinary.scale_curve, where  # float32 values, exactly
    assert member.zero_grad_fraction == ordinary.zero_grad_fraction, where
    assert member.fp32_zero_fraction == ordinary.fp32_zero_fraction, where
    assert (member.steps, member.evaluation, member.weights_finite) == (
        ordinary.steps,
        ordinary.evaluation,
        ordinary.weights_finite,
    ), where
    assert (mine.failure, mine.nonfinite, mine.learned) == (
        theirs.failure,
        theirs.nonfinite,
        theirs.learned,
    ), where
    assert member.final_loss_fp32 == ordinary.final_loss_fp32 or math.isnan(ordinary.final_loss_fp32), where
    if exact_losses:
        assert member.loss_curve == ordinary.loss_curve, where
        assert (member.eval_loss, member.eval_median) == (ordinary.eval_loss, ordinary.eval_median), where
        assert mine.value == theirs.value, where
    else:
        finite = [(a, b) for a, b in zip(member.loss_curve, ordinary.loss_curve) if math.isfinite(b)]
        assert [a for a, _ in finite] == pytest.approx([b for _, b in finite], rel=CE_LOSS_REL), where
        assert member.eval_loss == pytest.approx(ordinary.eval_loss, rel=CE_LOSS_REL), where
        assert mine.value == pytest.approx(theirs.value, rel=CE_LOSS_REL), where
    return theirs.failure


def _compare(
    problem,
    configs: list[ScalerConfig],
    steps: int,
    *,
    exact_losses: bool,
    amp_dtype: torch.dtype = torch.float16,
) -> list[tuple[str, int]]:
    population = train_population(problem, configs, epochs=problem.epochs, steps=steps, amp_dtype=amp_dtype)
    assert len(population) == len(configs)
    seen = []
    for cfg, member in zip(configs, population):
        ordinary = train(problem, cfg, epochs=problem.epochs, steps=steps, amp_dtype=amp_dtype)
        failure = _assert_member_equals_trainer(
            member, ordinary, f"{cfg} on {steps} steps", exact_losses=exact_losses
        )
        seen.append((failure, ordinary.skipped_steps))
    return seen


def test_scale_update_is_amp_update_scale_for_every_member():
    """Float64 products rounded once to float32, growth held back where float32 would overflow to inf."""
    rng = np.random.default_rng(5)
    n = 400
    scales = np.concatenate(
        [2.0 ** rng.uniform(-130, 128, n - 6), [3.4e38, 2.0**127, 1.7e38, 1e-45, 3e-39, 65504.0]]
    )
    scale = torch.tensor(scales, dtype=torch.float32)
    found_inf = torch.tensor(rng.random(n) < 0.4)
    found_inf[-6:] = False
    interval = torch.tensor(rng.integers(1, 9, n), dtype=torch.int32)
    # Half of them reach their growth interval now (the last six among them: three would pass float32's max).
    tracker = torch.where(
        torch.tensor(rng.random(n) < 0.5), interval - 1, torch.tensor(rng.integers(0, 9, n)) % interval
    )
    tracker[-6:] = interval[-6:] - 1
    tracker = tracker.to(torch.int32)
    growth = torch.tensor(rng.uniform(1.01, 5.0, n), dtype=torch.float64)
    backoff = torch.tensor(rng.uniform(0.05, 0.99, n), dtype=torch.float64)
    new_scale, new_tracker = _update_scale(scale, tracker, found_inf, growth, backoff, interval)
    grew = held = 0
    for i in range(n):
        s, t = scale[i].clone(), tracker[i].clone()
        torch._amp_update_scale_(
            s, t, found_inf[i].float(), float(growth[i]), float(backoff[i]), int(interval[i])
        )
        assert (new_scale[i].item(), new_tracker[i].item()) == (s.item(), t.item()), i
        grew += bool(not found_inf[i] and new_scale[i] != scale[i])
        held += bool(
            not found_inf[i] and int(tracker[i]) + 1 == int(interval[i]) and new_scale[i] == scale[i]
        )
    assert grew > 50 and held >= 1  # both branches of the growth were exercised
    # float32 multiplication would differ: the kernel multiplies in float64 and rounds once.
    in_float32 = (scale * backoff.float())[found_inf]
    assert not torch.equal(in_float32, new_scale[found_inf])


def test_seed_mlp_members_equal_ordinary_trials():
    problem = build_seed(42)
    # 4 draws (underflow, a recovery from skips, one more underflow, a grower that skips) beside the
    # hand-picked cases below, which already hold every failure code; each member costs a second run.
    configs = _sampled(4, seed=11, low=-20, high=40) + [
        ScalerConfig(1.787735685558448e-05, 2.548, 0.581, 19),  # underflows
        ScalerConfig(3.2393562610e8, 2.692, 0.885, 7),  # churns: every step overflows
        ScalerConfig(4.219e-05, 3.79, 0.156, 1),  # grows every step, overflows, backs off, grows again
        ScalerConfig(8.056740244482309e-05, 2, 0.5, 2000),  # float32 rounds this init_scale
        ScalerConfig(3.1e38, 2.9, 0.3, 1),  # near float32's max: skips until it has backed off far enough
    ]
    seen = _compare(problem, configs, 30, exact_losses=False)
    failures = {failure for failure, _ in seen}
    assert {"none", "underflow", "overflow_churn"} <= failures
    assert any(failure == "none" and skips > 0 for failure, skips in seen)


def test_deep_mlp_members_equal_ordinary_trials():
    problem = build_deep(42)
    configs = [
        ScalerConfig(2.0**16, 2.0, 0.5, 2000),  # PyTorch's default underflows here
        ScalerConfig(3.1e5, 1.7, 0.37, 2000),  # inside the window
        ScalerConfig(7.3e7, 2.3, 0.61, 9),  # skips while it backs off, then grows again
        ScalerConfig(4.4e4, 3.1, 0.45, 6),  # escapes underflow by growing
        ScalerConfig(6.5e12, 2.0, 0.93, 1),  # churns
    ]
    seen = _compare(problem, configs, 40, exact_losses=True)
    assert [failure for failure, _ in seen] == ["underflow", "none", "none", "none", "overflow_churn"]
    assert seen[2][1] > 0 and seen[3][1] > 0


def test_deep_mlp_sum_members_equal_ordinary_trials():
    problem = build_sum(42)
    configs = [
        ScalerConfig(2.0**16, 2.0, 0.5, 2000),  # backs off from the first step
        ScalerConfig(5.7e2, 1.6, 0.4, 700),  # the window
        ScalerConfig(3.3e1, 2.0, 0.5, 2000),  # underflows
        ScalerConfig(9.1e5, 2.2, 0.93, 2000),  # churns
    ]
    seen = _compare(problem, configs, 64, exact_losses=True)
    assert [failure for failure, _ in seen] == ["none", "none", "underflow", "overflow_churn"]
    assert seen[0][1] >= 6


@pytest.mark.parametrize(
    "variant",
    ["sgd-nesterov-decay", "adamw-amsgrad", "accumulation-clip-own-loss", "activations"],
)
def test_optimizer_and_model_variants_equal_ordinary_trials(variant):
    seed, deep = build_seed(42), build_deep(42)
    problem, exact = {
        "sgd-nesterov-decay": (
            replace(
                seed,
                make_optimizer=lambda p: torch.optim.SGD(
                    p, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3
                ),
            ),
            False,
        ),
        "adamw-amsgrad": (
            replace(
                deep,
                make_optimizer=lambda p: torch.optim.AdamW(
                    p, lr=0.01, weight_decay=0.1, amsgrad=True, eps=1e-20
                ),
            ),
            True,
        ),
        # A loss the population cannot vectorise is called per member; clipping is per member.
        "accumulation-clip-own-loss": (
            replace(
                deep,
                accumulation_steps=2,
                grad_clip=0.05,
                loss_fn=lambda out, y: nn.functional.l1_loss(out, y),
            ),
            True,
        ),
        "activations": (
            replace(
                deep,
                model=nn.Sequential(
                    deep.model[0],
                    nn.GELU(),
                    deep.model[2],
                    nn.SiLU(),
                    deep.model[4],
                    nn.Sigmoid(),
                    deep.model[6],
                    nn.LeakyReLU(0.1),
                    deep.model[8],
                    nn.ReLU(),
                    deep.model[10],
                ),
            ),
            True,
        ),
    }[variant]
    configs = [
        ScalerConfig(7.3e7, 2.3, 0.61, 3),
        ScalerConfig(1.37 * 2.0**19, 1.9, 0.45, 4),
        ScalerConfig(3.3e2, 1.7, 0.3, 2),
    ]
    seen = _compare(problem, configs, 16, exact_losses=exact)
    assert any(skips > 0 for _, skips in seen)


def test_bfloat16_members_equal_ordinary_trials():
    # The same kernels in bfloat16 (measured bitwise on deep-mlp; seed-mlp's cross-entropy values within
    # 2e-7).
    seen = _compare(
        build_deep(42),
        [ScalerConfig(3.1e5, 1.7, 0.37, 3), ScalerConfig(7.3e7, 2.3, 0.61, 2)],
        12,
        exact_losses=True,
        amp_dtype=torch.bfloat16,
    )
    # Both members compared (each equal to its ordinary trial, asserted inside _compare); bfloat16 has
    # float32's exponent range, so neither scale overflows here.
    assert len(seen) == 2 and all(skips == 0 for _, skips in seen)


def test_one_members_overflow_does_not_touch_another():
    """Member k's skip skips member k's step only: a member's run is the same alone and beside a churning one.
    """
    problem = build_sum(42)
    good = ScalerConfig(5.7e2, 1.6, 0.4, 3)
    churning = ScalerConfig(3.0e38, 1.5, 0.99, 1)
    alone = train_population(problem, [good], epochs=problem.epochs, steps=12)[0]
    beside = train_population(problem, [churning, good, churning], epochs=problem.epochs, steps=12)
    assert beside[0].skipped_steps == beside[2].skipped_steps == 12
    assert beside[1].loss_curve == alone.loss_curve and beside[1].scale_curve == alone.scale_curve
    assert beside[1].eval_loss == alone.eval_loss and beside[1].skipped == alone.skipped
    # A member that skipped every step kept its initial weights and moments, as if step() never ran.
    initial = problem.loss_fn(problem.model(problem.inputs).float(), problem.targets).item()
    assert beside[0].final_loss_fp32 == initial


def test_a_stopped_member_ends_like_a_pruned_trial():
    problem = build_deep(42)
    configs = [ScalerConfig(3.1e5, 1.7, 0.37, 2000), ScalerConfig(7.3e7, 2.3, 0.61, 9)]
    asked: list[tuple[int, int]] = []

    def stop_first_at_8(member: int, step: int, loss: float) -> bool:
        asked.append((member, step))
        return member == 0 and step == 7

    population = train_population(
        problem, configs, epochs=problem.epochs, steps=16, checkpoints=(4, 8, 12), should_stop=stop_first_at_8
    )
    pruned = train(
        problem,
        configs[0],
        epochs=problem.epochs,
        steps=16,
        checkpoints=(4, 8, 12),
        should_stop=lambda step, loss: step == 7,
    )
    full = train(problem, configs[1], epochs=problem.epochs, steps=16)
    assert asked == [(0, 3), (1, 3), (0, 7), (1, 7), (1, 11)]
    assert population[0].stopped_early and population[0].steps == 8
    assert population[0].loss_curve == pruned.loss_curve and population[0].eval_loss == pruned.eval_loss
    assert not population[1].stopped_early
    assert population[1].loss_curve == full.loss_curve and population[1].scale_curve == full.scale_curve


def test_what_cannot_be_vectorised_gets_one_clear_line():
    seed = build_seed(42)
    cases = [
        ("Block", examples.noisy_regression.build(42), torch.float16),  # residual blocks with LayerNorm
        ("RMSprop", replace(seed, make_optimizer=lambda p: torch.optim.RMSprop(p, lr=0.01)), torch.float16),
        (
            "buffers",
            replace(seed, model=nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))),
            torch.float16,
        ),
        (
            "2 parameter groups",
            replace(
                seed,
                make_optimizer=lambda p: torch.optim.SGD(
                    [{"params": list(p)[:2]}, {"params": list(seed.model.parameters())[2:]}], lr=0.1
                ),
            ),
            torch.float16,
        ),
        ("not None", seed, None),  # fp32 trials are the ordinary trainer's
    ]
    for expected, problem, amp_dtype in cases:
        with pytest.raises(PopulationError) as caught:
            check_population(problem, amp_dtype)
        message = str(caught.value)
        assert expected in message, message
        assert "\n" not in message and len(message) < 200, message
    with pytest.raises(PopulationError, match="RMSprop"):
        train_population(cases[1][1], [ScalerConfig(2.0**16, 2.0, 0.5, 2000)], epochs=1)
    check_population(seed)  # the built-in tasks can
    check_population(build_sum(42))


def test_train_seconds_leave_out_the_references_shared_by_every_trial(monkeypatch):
    """As for ordinary trials: the first population of a process does not carry the once-per-problem
    references."""
    import time

    import search.training._population

    from conftest import slowed

    problem = build_deep(7)
    zeros, initial = (
        search.training._population.fp32_zero_fraction,
        search.training._population.initial_evaluation,
    )

    # 0.5 s each: either one inside train_seconds would be 7x the ~0.07 s the population's 8 steps take.
    monkeypatch.setattr(search.training._population, "fp32_zero_fraction", slowed(zeros, 0.5))
    monkeypatch.setattr(search.training._population, "initial_evaluation", slowed(initial, 0.5))
    begin = time.perf_counter()
    results = train_population(
        problem,
        [ScalerConfig(3.1e4, 1.7, 0.3, 9), ScalerConfig(97.0, 2.3, 0.61, 3)],
        epochs=problem.epochs,
        steps=8,
        amp_dtype=torch.float16,
    )
    assert time.perf_counter() - begin > 1.0
    assert all(r.train_seconds < 0.5 for r in results)
    assert all(r.fp32_zero_fraction == zeros(problem, problem.epochs, 8) for r in results)
    assert all(r.initial_eval_loss == initial(problem).loss for r in results)
