"""GradScaler's rule against torch's own class: its defaults, its written line, and the settings it owns."""

import math
import random

import pytest
import torch

from search.core import SEED_BASELINES, SpaceConfig, baseline_trials, setting_of
from search.scalers import GRADSCALER, RULES, TORCH, ScalerConfig


def test_defaults_are_torchs_own():
    scaler = torch.amp.GradScaler("cpu")
    assert GRADSCALER.default == {
        "init_scale": scaler._init_scale,
        "growth_factor": scaler.get_growth_factor(),
        "backoff_factor": scaler.get_backoff_factor(),
        "growth_interval": scaler.get_growth_interval(),
    }
    assert SEED_BASELINES[0] == (GRADSCALER.default_tag, ScalerConfig(**GRADSCALER.default))


def test_the_written_line_builds_the_same_scaler():
    setting = ScalerConfig(0.3621, 1.966, 0.37, 13)
    built = eval(setting.as_code("cpu"), {"torch": torch})
    assert built._init_scale == pytest.approx(0.3621, rel=1e-7)
    assert torch.tensor(built._init_scale, dtype=torch.float32) == torch.tensor(0.3621, dtype=torch.float32)
    assert (built.get_growth_factor(), built.get_backoff_factor(), built.get_growth_interval()) == (
        1.966,
        0.37,
        13,
    )


def test_every_rule_owns_its_settings_space_and_baselines():
    space = SpaceConfig()
    for name, rule in RULES.items():
        setting = rule.setting(rule.default)
        assert setting.rule == name and dict(setting.values) == rule.default
        assert rule.block(rule.default) == setting.block()
        kept, notes = baseline_trials(space, name)
        assert [tag for tag, _ in kept] == [tag for tag, _ in rule.baselines] and notes == []
        for tag, params in kept:
            assert dict(setting_of(params, space, name).values) == dict(dict(rule.baselines)[tag])
    assert (
        RULES[TORCH].setting(GRADSCALER.default).make() is None
    )  # GradScaler's own update() moves the scale.
    assert all(RULES[name].setting(RULES[name].default).make() is not None for name in RULES if name != TORCH)


def _torch_scales(setting: ScalerConfig, overflows: list[bool]) -> list[float]:
    """The scale before each step and after the last, as torch's own GradScaler moves it: a real backward pass
    whose gradient is infinite on the steps marked as overflows."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", **setting.values)
    scales = []
    for overflow in overflows:
        scales.append(scaler.get_scale())
        optimizer.zero_grad()
        loss = (weight * (math.inf if overflow else 1.0)).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    # Before the first step get_scale() returns init_scale as given; the scaler holds it as float32.
    return [torch.tensor(scale, dtype=torch.float32).item() for scale in scales + [scaler.get_scale()]]


@pytest.mark.parametrize(
    "setting",
    [
        ScalerConfig(1234.5, 1.37, 0.31, 3),
        ScalerConfig(0.3621, 2.9, 0.77, 1),
        ScalerConfig(3.0e38, 1.9, 0.5, 2),  # a growth past float32's largest is not taken
        ScalerConfig(2.0**-126 * 1.5, 3.3, 0.05, 5),  # backs off into float32's subnormals
    ],
)
def test_the_replayed_arithmetic_is_torchs_own_step_for_step(setting):
    """The answer's replay (:class:`GradScalerScale`) against torch's GradScaler on one overflow sequence: the
    same float32 scale before every one of 60 steps, on settings that are not powers of two."""
    generator = random.Random(7)
    overflows = [generator.random() < 0.3 for _ in range(60)]
    replayed = GRADSCALER.replay(setting.values)
    scales = []
    for overflow in overflows:
        scales.append(replayed.scale)
        replayed.update(overflow)
    assert scales + [replayed.scale] == _torch_scales(setting, overflows)
