"""The diagnosis's evidence against a plain loop written here: every step's scale and skip, each parameter's
zeros, overflows and largest unscaled gradient, each layer's largest forward output and where the forward pass
first overflowed, on settings that are not powers of two.

The plain loop shares nothing with the trainer or the observer but the Problem: it draws the batches itself
(tests/plain_loop.py's documented order), runs a ``Sequential`` layer by layer (no hooks) under fp16 autocast,
reads every gradient on the host, and decides a skip from the gradients themselves.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from search.diagnosis import diagnosis_runs
from search.scalers import ScalerConfig
from search.tasks.deep_mlp import build as build_deep
from search.tasks.seed_mlp import build as build_seed

from plain_loop import _batches


def plain_watch(problem, init, growth, backoff, interval, steps, amp=torch.float16):
    """Per step: the scale used, the skip, and per parameter (zeros, non-finite, largest finite |g| / scale);
    per layer the largest finite output and whether it was finite; the first layer whose output went
    non-finite.
    """
    model = copy.deepcopy(problem.model)
    named = list(model.named_parameters())
    optimizer = problem.make_optimizer([p for _, p in named])
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=init, growth_factor=growth, backoff_factor=backoff, growth_interval=interval
    )
    out = []
    for micro in _batches(problem, steps):
        optimizer.zero_grad(set_to_none=True)
        scale = scaler.get_scale()
        layers, origin = {}, None
        for index in micro:
            x, y = (
                (problem.inputs, problem.targets)
                if index is None
                else (problem.inputs[index], problem.targets[index])
            )
            with torch.autocast("cpu", dtype=amp or torch.float16, enabled=amp is not None):
                h = x
                for name, module in model.named_children():
                    finite_in = bool(torch.isfinite(h).all())
                    h = module(h)
                    finite = bool(torch.isfinite(h).all())
                    top = float(h.detach().abs().max()) if finite else 0.0  # read where every entry is finite
                    old = layers.get(name, (0.0, True))
                    layers[name] = (max(old[0], top), old[1] and finite)
                    if origin is None and finite_in and not finite:
                        origin = name
                loss = problem.loss_fn(h, y) / len(micro)
            scaler.scale(loss).backward()
        grads = {}
        for name, p in named:
            g = p.grad.double()
            good = g[torch.isfinite(g) & (g != 0)].abs() / scale
            grads[name] = (
                int((p.grad == 0).sum()),
                not bool(torch.isfinite(p.grad).all()),
                float(good.max()) if good.numel() else math.nan,
            )
        skipped = any(bad for _, bad, _ in grads.values())
        scaler.step(optimizer)
        scaler.update()
        out.append({"scale": scale, "skipped": skipped, "grads": grads, "layers": layers, "origin": origin})
    return out


@pytest.mark.parametrize(
    "build, setting, steps",
    [
        (build_seed, ScalerConfig(3.1e5, 1.7, 0.35, 3), 30),  # grows into overflows every few steps
        (build_deep, ScalerConfig(9.3e4, 2.3, 0.6, 7), 24),  # underflows in its trunk, then grows out of it
    ],
)
def test_the_fp16_runs_evidence_is_a_plain_loops(build, setting, steps):
    problem = build(42)
    runs = diagnosis_runs(problem, setting, steps=steps, controls=("fp32",))
    plain = plain_watch(
        problem,
        setting.init_scale,
        setting.growth_factor,
        setting.backoff_factor,
        setting.growth_interval,
        steps,
    )
    fp16 = runs.fp16
    assert list(fp16.scales) == [s["scale"] for s in plain]
    assert list(fp16.skipped) == [s["skipped"] for s in plain]
    kept = [s for s in plain if not s["skipped"]]
    for p in fp16.parameters:
        assert p.overflow_steps == tuple(i for i, s in enumerate(plain) if s["grads"][p.name][1])
        assert p.zero_share == pytest.approx(sum(s["grads"][p.name][0] for s in kept) / (p.size * len(kept)))
        largest = [s["grads"][p.name][2] for s in kept if math.isfinite(s["grads"][p.name][2])]
        assert p.largest == pytest.approx(max(largest), rel=1e-6) if largest else math.isnan(p.largest)
    for step, s in zip(fp16.step_largest, plain, strict=True):  # Per step, over parameters: spike by spike.
        finite = [g[2] for g in s["grads"].values() if math.isfinite(g[2])]
        assert (
            step == pytest.approx(max(finite), rel=1e-6) if finite and not s["skipped"] else math.isnan(step)
        )
    for layer in fp16.layers:
        assert layer.largest == pytest.approx(max(s["layers"][layer.name][0] for s in plain), rel=1e-6)
        assert layer.nonfinite_steps == tuple(
            i for i, s in enumerate(plain) if not s["layers"][layer.name][1]
        )
    # The settings chosen so that both runs show something: skips in one, underflowing zeros in the other.
    assert fp16.skipped_steps > 0 or any(p.zero_share > 0.5 for p in fp16.parameters)
    assert runs.bf16 is None and runs.fp32.label == "fp32"


def test_the_fp32_control_is_a_plain_fp32_loop_and_counts_what_rounds_at_the_fp16_scale():
    """deep-mlp's first step at 9.3e4 (2^16.5): the share of the input layer's true gradients at or below
    2^-25 once scaled, counted by hand, is the control's ``would_round_share``; its largest gradient is the
    plain loop's.
    """
    problem = build_deep(42)
    setting = ScalerConfig(9.3e4, 2.0, 0.5, 2000)
    runs = diagnosis_runs(problem, setting, steps=12, controls=("fp32",))
    plain = plain_watch(problem, 1.0, 2.0, 0.5, 2**30, 12, amp=None)
    model = copy.deepcopy(problem.model)
    x, y = problem.inputs[_batches(problem, 1)[0][0]], problem.targets[_batches(problem, 1)[0][0]]
    problem.loss_fn(model(x), y).backward()
    for (name, p), mine in zip(model.named_parameters(), runs.fp32.parameters, strict=True):
        nonzero = p.grad[p.grad != 0].double().abs()
        expected = (
            float((nonzero * setting.init_scale <= 2.0**-25).sum() / nonzero.numel())
            if nonzero.numel()
            else math.nan
        )
        assert mine.name == name
        assert (
            mine.would_round_share == pytest.approx(expected)
            if nonzero.numel()
            else math.isnan(mine.would_round_share)
        )
        assert mine.largest == pytest.approx(
            max(s["grads"][name][2] for s in plain if math.isfinite(s["grads"][name][2])), rel=1e-6
        )
    first = runs.fp32.parameters[0]
    assert (
        first.name == "0.weight" and first.would_round_share > 0.3
    )  # the input layer's gradient sits near 2^-41


def test_the_forward_overflow_is_placed_where_a_plain_layer_by_layer_pass_first_overflows():
    from tasks_for_tests import activation_overflow

    problem = activation_overflow(42)
    setting = ScalerConfig(7.7e3, 2.0, 0.5, 5)
    runs = diagnosis_runs(problem, setting, steps=6, controls=("fp32",))
    plain = plain_watch(problem, 7.7e3, 2.0, 0.5, 5, 6)
    origins = runs.fp16.forward_origins()
    assert (
        origins == {"0": tuple(i for i, s in enumerate(plain) if s["origin"] == "0")}
        and len(origins["0"]) == 6
    )
    fp32_first = next(layer for layer in runs.fp32.layers if layer.name == "0")
    assert fp32_first.largest > 65504  # The fp32 control's outputs there: beyond fp16's range.
