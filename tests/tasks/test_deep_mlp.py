"""The deep-mlp task: a problem where the fp16 loss scale decides, measured on real runs.

Every number asserted here comes from a real training run through the real objective
(``run_trial`` with the default penalty), or from a real backward pass; nothing is hard-coded.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from search.core import DEFAULTS
from search.scalers import ScalerConfig
from search.tasks import BUILTIN_TASKS, build_problem, resolve_task
from search.tasks.deep_mlp import (
    EVAL_SAMPLES,
    LARGE,
    SMALL,
    SPIKE_FACTOR,
    SPIKE_OUTLIERS,
    build,
    build_large,
    build_spikes,
    build_sum,
)
from search.training import batch_plan, run_steps, run_trial, train

DEFAULT = ScalerConfig(2.0**16, 2.0, 0.5, 2000)  # PyTorch's GradScaler defaults
GOOD = ScalerConfig(2.0**20, 2.0, 0.5, 2000)
FP16_SMALLEST_SUBNORMAL = 2.0**-24


@pytest.fixture(scope="module")
def problem():
    return build(42)


@pytest.fixture(scope="module")
def runs(problem):
    """Real trials, each run once and shared by the tests below (about 0.3 s each)."""
    cache = {}

    def get(config: ScalerConfig):
        if config not in cache:
            cache[config] = run_trial(
                problem,
                config,
                steps=run_steps(problem, 0, 0),  # the task's own default, as `--epochs 0` does
                amp_dtype=torch.float16,
                penalty=DEFAULTS.penalty,
                device_label="cpu",
            )
        return cache[config]

    return get


def test_builtin_names_resolve_to_this_module():
    variants = (("deep-mlp", build), ("deep-mlp-large", build_large), ("deep-mlp-spikes", build_spikes))
    for name, builder in variants + (("deep-mlp-sum", build_sum),):
        assert name in BUILTIN_TASKS
        assert resolve_task(name) is builder
        assert build_problem(resolve_task(name), name, 42).fingerprint() == builder(42).fingerprint()


def test_deterministic_in_the_seed_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = build(42), build(42)
    assert torch.equal(torch.random.get_rng_state(), before), "building must not consume the global RNG"
    assert a.fingerprint() == b.fingerprint()
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()):
        assert torch.equal(x, y)
    assert build(43).fingerprint() != a.fingerprint()
    # The mini-batch order comes from the seed too.
    assert [i.tolist() for i in batch_plan(a, 1)[0]] == [i.tolist() for i in batch_plan(b, 1)[0]]
    assert not torch.equal(batch_plan(build(43), 1)[0][0], batch_plan(a, 1)[0][0])


def test_the_epochs_default_gives_the_intended_steps(problem, runs):
    steps = SMALL.epochs * math.ceil(SMALL.samples / SMALL.batch_size)
    assert problem.epochs == SMALL.epochs and len(batch_plan(problem, problem.epochs)) == steps == 256
    assert len(runs(GOOD).user_attrs["loss_curve"]) == steps


def test_first_layer_gradient_is_below_fp16_without_a_large_scale(problem):
    # The WHY of the docstring, measured in fp32 at the initial weights: the gradient reaching
    # the first layer is far below fp16's smallest subnormal, the output bias's far above it.
    model = copy.deepcopy(problem.model)
    idx = batch_plan(problem, 1)[0][0]
    h, outputs = problem.inputs[idx], []
    for module in model:
        h = module(h)
        if isinstance(module, nn.Linear):
            h.retain_grad()
            outputs.append(h)
    problem.loss_fn(h, problem.targets[idx]).backward()
    first_layer = float(outputs[0].grad.abs().max())
    head_bias = float(model[-1].bias.grad.abs().max())
    assert 0 < first_layer * 2.0**16 < FP16_SMALLEST_SUBNORMAL / 2  # rounds to 0 at the default scale
    assert first_layer * 2.0**20 > FP16_SMALLEST_SUBNORMAL
    assert head_bias * 2.0**20 < 65504 < head_bias * 2.0**26


def test_default_scaler_underflows_and_a_good_scale_wins_by_far(runs):
    default, good = runs(DEFAULT), runs(GOOD)
    d, g = default.user_attrs, good.user_attrs
    assert d["failure"] == "underflow" and not d["learned"]
    assert d["zero_grad_fraction"] > 0.95  # every trunk gradient is exactly zero in fp16
    assert d["skipped_steps"] == 0  # no overflow: the default fails silently
    assert g["failure"] == "none" and g["learned"]
    assert g["zero_grad_fraction"] < 0.05
    assert g["final_loss"] < 0.2 * d["final_loss"]
    assert default.value - good.value > 1.0  # the silent-failure penalty plus a much worse loss


def test_too_low_underflows_and_too_high_skips(runs):
    low = runs(ScalerConfig(2.0**-20, 2.0, 0.5, 2000)).user_attrs
    assert low["failure"] == "underflow" and low["zero_grad_fraction"] > 0.99
    high = runs(ScalerConfig(2.0**32, 2.0, 0.5, 2000))
    h, g = high.user_attrs, runs(GOOD).user_attrs
    assert h["skipped_steps"] >= 8 > g["skipped_steps"]
    # GradScaler backs off from 2^32 one halving per skipped step, from the very first step.
    assert h["scale_curve"][:8] == [2.0 ** (32 - i) for i in range(1, 9)]
    assert h["learned"] and h["failure"] == "none"
    assert high.value > h["final_loss"]  # the objective charges the skipped steps


def test_growth_interval_decides_at_a_too_low_init_scale(runs):
    never = runs(DEFAULT).user_attrs  # 2^16 with growth_interval 2000: never grows in 256 steps
    grows = runs(ScalerConfig(2.0**16, 2.0, 0.5, 10))
    g = grows.user_attrs
    assert max(never["scale_curve"]) == 2.0**16 and never["failure"] == "underflow"
    assert max(g["scale_curve"]) >= 2.0**19  # grew into the window...
    assert g["failure"] == "none" and g["learned"]  # ...and learned there
    assert runs(DEFAULT).value - grows.value > 1.0


def test_large_variant_builds_and_trains_two_steps_on_cpu():
    problem = build_large(42)
    assert problem.inputs.shape == (LARGE.samples, 16)
    assert LARGE.width == 4 * SMALL.width and LARGE.samples > SMALL.samples and LARGE.epochs >= SMALL.epochs
    assert problem.fingerprint() == build_large(42).fingerprint() != build(42).fingerprint()
    result = train(problem, GOOD, epochs=problem.epochs, steps=2)
    assert result.steps == 2 and len(result.loss_curve) == 2
    assert all(math.isfinite(v) for v in result.loss_curve) and result.weights_finite


def test_variants_are_deep_mlp_with_one_change_each(problem):
    # deep-mlp-spikes and deep-mlp-sum draw exactly deep-mlp's data and weights (so deep-mlp's own
    # fingerprint, which resumes check, is unchanged by them) and change one thing each.
    spikes, summed = build_spikes(42), build_sum(42)
    for variant in (spikes, summed):
        assert torch.equal(variant.inputs, problem.inputs)
        for x, y in zip(variant.model.state_dict().values(), problem.model.state_dict().values()):
            assert torch.equal(x, y)
    # (A loss function is not part of a fingerprint: the task name recorded in the study is what
    # tells deep-mlp-sum from deep-mlp on a resume.)
    assert spikes.fingerprint() != problem.fingerprint()
    changed = (spikes.targets != problem.targets).any(dim=1)
    assert int(changed.sum()) == SPIKE_OUTLIERS
    assert torch.allclose(spikes.targets[changed], problem.targets[changed] * SPIKE_FACTOR)
    assert spikes.eval_inputs.shape == (EVAL_SAMPLES, problem.inputs.shape[1])
    assert spikes.eval_targets.std() == pytest.approx(1.0, abs=0.1)  # clean, standardised like training
    assert torch.equal(summed.targets, problem.targets)
    assert len(batch_plan(summed, summed.epochs)) == 64
    out, y = torch.zeros(64, 64), problem.targets[:64]
    assert float(summed.loss_fn(out, y)) == pytest.approx(64 * 64 * float(problem.loss_fn(out, y)), rel=1e-5)
