import optuna
import pytest

from search.core import (
    DEFAULTS,
    SEED_BASELINES,
    ParamRange,
    SpaceConfig,
    baseline_trials,
    distributions,
    growth_note,
    holding,
    scaler_config,
    suggest,
)


def test_default_space_searches_all_four_including_growth_interval():
    d = distributions(DEFAULTS.space)
    assert set(d) == {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}
    assert d["init_scale"].low == 2.0**-20 and d["init_scale"].high == 2.0**32 and d["init_scale"].log
    assert isinstance(d["growth_interval"], optuna.distributions.IntDistribution)
    assert d["growth_interval"].low == 1 and d["growth_interval"].high == 2000


def test_suggest_returns_values_inside_the_space():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        cfg = suggest(study.ask(), DEFAULTS.space)
        assert 2.0**-20 <= cfg.init_scale <= 2.0**32
        assert 1 < cfg.growth_factor <= 8 and 0 < cfg.backoff_factor < 1
        assert 1 <= cfg.growth_interval <= 2000 and isinstance(cfg.growth_interval, int)


def test_powers_of_two_and_fixed_values():
    space = SpaceConfig(
        init_scale=ParamRange(2.0**-3, 2.0**5, log=True, powers_of_two=True),
        growth_interval=ParamRange(1, 2000, log=True, fixed=50),
    )
    d = distributions(space)
    assert "growth_interval" not in d and d["init_scale_log2"].low == -3 and d["init_scale_log2"].high == 5
    cfg = scaler_config({"init_scale_log2": 4, "growth_factor": 2.0, "backoff_factor": 0.5}, space)
    assert cfg.init_scale == 16.0 and cfg.growth_interval == 50


def test_baselines_are_the_seed_table_with_pytorch_default_interval():
    kept, notes = baseline_trials(DEFAULTS.space)
    assert [tag for tag, _ in kept] == ["seed-1", "seed-2", "seed-3", "seed-4", "seed-5"]
    assert kept[0][1] == {
        "init_scale": 2.0**16,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    assert kept[4][1]["growth_factor"] == 4.0 and kept[4][1]["backoff_factor"] == 0.25
    assert notes == [] and all(cfg.growth_interval == 2000 for _, cfg in SEED_BASELINES)


def test_baselines_outside_a_narrowed_space_are_left_out_with_a_note():
    space = SpaceConfig(init_scale=ParamRange(2.0**10, 2.0**20, log=True))
    kept, notes = baseline_trials(space)
    assert [tag for tag, _ in kept] == ["seed-1", "seed-4", "seed-5"]
    assert notes == [
        "baseline seed-2 left out: init_scale outside the search space",
        "baseline seed-3 left out: init_scale outside the search space",
    ]


def test_the_default_outside_a_narrowed_space_is_kept_and_stored_within_a_widened_range():
    space = SpaceConfig(init_scale=ParamRange(2.0**18, 2.0**22, log=True))
    kept, notes = baseline_trials(space)
    assert [tag for tag, _ in kept] == ["seed-1"] and kept[0][1]["init_scale"] == 2.0**16
    assert notes[0] == (
        "baseline seed-1 (PyTorch's default): init_scale outside the search space, trained there all the"
        " same, so the answer is seen beside the default"
    )
    assert all(" left out: " in n for n in notes[1:]) and len(notes) == 5
    dists = distributions(space)
    held = holding(kept[0][1], dists)
    assert held["init_scale"].low == 2.0**16 and held["init_scale"].high == 2.0**22 and held["init_scale"].log
    assert held["growth_factor"] is dists["growth_factor"]  # a value inside: the distribution as it was


@pytest.mark.parametrize("fixed, low, expect", [(2000, 1, True), (None, 1, False), (None, 40, True)])
def test_growth_note(fixed, low, expect):
    space = SpaceConfig(growth_interval=ParamRange(low, 2000, log=True, fixed=fixed))
    note = growth_note(space, 30)
    assert (note is not None) == expect
    if expect:
        assert "growth_factor cannot matter" in note
