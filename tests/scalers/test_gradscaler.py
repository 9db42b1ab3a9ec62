"""GradScaler's rule against torch's own class: its defaults, its written line, and the settings it owns."""

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
