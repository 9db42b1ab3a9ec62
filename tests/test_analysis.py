"""search.analysis on synthetic trials: safe ranges (also when they are not intervals), plateau middle."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search.analysis import (
    best_trial,
    format_value,
    good_trials,
    recommend,
    safe_ranges,
)
from search.config import DEFAULTS, ParamRange, SpaceConfig

SPACE = DEFAULTS.space
DISTS = {
    "init_scale": FloatDistribution(2.0**-20, 2.0**32, log=True),
    "growth_factor": FloatDistribution(1.01, 8.0, log=True),
    "backoff_factor": FloatDistribution(0.05, 0.95),
    "growth_interval": IntDistribution(1, 2000, log=True),
}


def _study(rows: list[dict], dists: dict = DISTS) -> list[optuna.trial.FrozenTrial]:
    """Trials numbered 0.. in order, each row: value, params (exponent for init_scale) and attrs."""
    study = optuna.create_study()
    for row in rows:
        row = dict(row)
        state = row.pop("state", TrialState.COMPLETE)
        value = row.pop("value", None)
        attrs = {"failure": row.pop("failure", "none"), "nonfinite": row.pop("nonfinite", False)}
        if "baseline" in row:
            attrs["baseline"] = row.pop("baseline")
        params = {
            "growth_factor": row.pop("growth", 2.0),
            "backoff_factor": row.pop("backoff", 0.5),
            "growth_interval": row.pop("interval", 2000),
        }
        if "init_scale_log2" in dists:
            params["init_scale_log2"] = row.pop("exp")
        else:
            params["init_scale"] = 2.0 ** row.pop("exp")
        assert not row, row
        study.add_trial(
            optuna.trial.create_trial(
                state=state,
                value=value if state == TrialState.COMPLETE else None,
                params=params,
                distributions={k: dists[k] for k in params},
                user_attrs=attrs,
            )
        )
    return study.get_trials(deepcopy=False)


def _by_param(ranges):
    return {r.param: r for r in ranges}


def test_safe_range_is_min_to_max_of_the_good_trials():
    trials = _study(
        [
            {"exp": 16, "value": 0.4203, "baseline": "seed-1"},
            {"exp": -4, "value": 0.4204},
            {"exp": 18, "value": 0.4236},  # One skipped step: within 1%.
            {"exp": 24, "value": 0.4717},  # Five skipped steps: 12% worse.
            {"exp": -19, "value": 1.71, "failure": "underflow"},
            {"exp": 30, "value": 16.0, "failure": "nonfinite", "nonfinite": True},
        ]
    )
    ranges = _by_param(safe_ranges(trials, SPACE, tolerance=0.01))
    r = ranges["init_scale"]
    assert (r.low, r.high) == (2.0**-4, 2.0**18)
    assert r.n_good == 3 and r.n_trials == 6
    assert r.is_interval and r.bad_inside == () and r.holes == ()
    assert r.text.startswith("init_scale from 2^-4 to 2^18 is safe for this task: 3 of 6 trials")
    assert "within 1%" in r.text
    # Every good trial has growth_factor 2: a one-point range, said so.
    assert ranges["growth_factor"].text.startswith("growth_factor = 2 is safe")


def test_tolerance_decides_what_is_good():
    trials = _study(
        [
            {"exp": 16, "value": 0.4203},
            {"exp": 18, "value": 0.4236},  # 0.79% worse.
            {"exp": 4, "value": 0.4205},  # 0.05% worse.
        ]
    )
    assert [t.number for t in good_trials(trials, 0.01)] == [0, 1, 2]
    assert [t.number for t in good_trials(trials, 0.001)] == [0, 2]
    tight = _by_param(safe_ranges(trials, SPACE, tolerance=0.001))["init_scale"]
    assert (tight.low, tight.high) == (2.0**4, 2.0**16)
    assert tight.bad_inside == ()  # 2^18 lies outside [2^4, 2^16].
    assert "within 0.1%" in tight.text


def test_bad_trial_inside_the_good_interval_makes_it_no_interval():
    trials = _study(
        [
            {"exp": 0, "value": 0.4203},
            {"exp": 10, "value": 0.4202},  # The best.
            {"exp": 20, "value": 0.4204},
            {"exp": 5, "value": 12.0, "failure": "nonfinite", "nonfinite": True},  # A hole at 2^5.
            {"exp": 15, "value": 0.4205},
        ]
    )
    r = _by_param(safe_ranges(trials, SPACE))["init_scale"]
    assert (r.low, r.high) == (1.0, 2.0**20)
    assert r.bad_inside == (3,) and r.holes == (3,)
    assert not r.is_interval
    assert "not an interval" in r.text and "#3" in r.text
    # The clean stretch around the best (2^10) stops at the hole: 2^10 ... 2^20.
    assert (r.clean_low, r.clean_high) == (2.0**10, 2.0**20)
    assert "from 2^10 to 2^20, no such trial was seen" in r.text
    data = r.to_dict()
    assert data["is_interval"] is False and data["holes"] == [3]


def test_bad_trial_inside_explained_by_another_setting_is_no_hole():
    trials = _study(
        [
            {"exp": 0, "value": 0.4203, "interval": 1000},
            {"exp": 10, "value": 0.4202, "interval": 2000},
            {"exp": 20, "value": 0.4204, "interval": 500},
            # Inside init_scale's safe range, but growth_interval 2 is outside its own (500..2000).
            {"exp": 12, "value": 1.58, "interval": 2, "failure": "overflow_churn"},
        ]
    )
    ranges = _by_param(safe_ranges(trials, SPACE))
    r = ranges["init_scale"]
    assert r.bad_inside == (3,) and r.holes == () and r.is_interval
    assert "growth_interval 1x" in r.text and "not through this one" in r.text
    assert ranges["growth_interval"].bad_inside == ()


def test_only_complete_trials_count():
    trials = _study(
        [
            {"exp": 10, "value": 0.42},
            {"exp": 12, "value": 0.421},
            {"exp": 30, "state": TrialState.RUNNING},
            {"exp": -20, "state": TrialState.WAITING},
            {"exp": 31, "state": TrialState.PRUNED},
            {"exp": -19, "state": TrialState.FAIL},
        ]
    )
    r = _by_param(safe_ranges(trials, SPACE))["init_scale"]
    assert (r.low, r.high, r.n_trials) == (2.0**10, 2.0**12, 2)
    assert best_trial(trials).number == 0


def test_fixed_settings_and_no_good_trial():
    space = SpaceConfig(growth_interval=ParamRange(1, 2000, log=True, fixed=2000))
    dists = {k: v for k, v in DISTS.items() if k != "growth_interval"}
    study = optuna.create_study()
    study.add_trial(
        optuna.trial.create_trial(
            value=1.7,
            params={"init_scale": 2.0**-20, "growth_factor": 2.0, "backoff_factor": 0.5},
            distributions=dists,
            user_attrs={"failure": "underflow", "nonfinite": False},
        )
    )
    ranges = _by_param(safe_ranges(study.trials, space))
    assert ranges["growth_interval"].fixed == 2000
    assert ranges["growth_interval"].text == "growth_interval was fixed at 2000 in this study, not searched."
    assert ranges["init_scale"].low is None and "no safe range" in ranges["init_scale"].text
    assert safe_ranges([], SPACE)[0].text == "init_scale: no completed trial yet."


def _plateau_rows():
    # A plateau of ties from 2^-8 to 2^19 (as on the seed task), the argmin at 2^17 by noise.
    rows = [
        {"exp": -8, "value": 0.42030, "growth": 1.5, "backoff": 0.3, "interval": 10},
        {"exp": 19, "value": 0.42031, "growth": 4.0, "backoff": 0.7, "interval": 1000},
        {"exp": 3, "value": 0.42029, "growth": 2.0, "backoff": 0.5, "interval": 100},
        {"exp": 17, "value": 0.42027, "growth": 3.1, "backoff": 0.62, "interval": 700},  # The argmin.
        {"exp": 16, "value": 0.42030, "growth": 2.0, "backoff": 0.5, "interval": 2000, "baseline": "seed-1"},
        {"exp": 24, "value": 0.4717},  # Skips steps: off the plateau.
        {"exp": -20, "value": 1.7, "failure": "underflow"},
    ]
    return rows


def test_recommendation_is_the_middle_of_the_plateau_not_the_argmin():
    trials = _study(_plateau_rows())
    rec = recommend(trials, SPACE, tie_tolerance=0.001, device_type="cuda")
    assert rec.from_plateau and rec.best_trial == 3
    assert rec.plateau_trials == (0, 1, 2, 3, 4)
    assert rec.plateau["init_scale"] == (2.0**-8, 2.0**19)
    # Middle in log space: 2^((-8 + 19) / 2) = 2^5.5, rounded to a power of two.
    assert rec.centre["init_scale"] == pytest.approx(2.0**5.5)
    assert math.log2(rec.config.init_scale) in (5.0, 6.0)
    # growth: sqrt(1.5 * 4) = 2.449 -> 2.4; backoff linear: (0.3 + 0.7) / 2 = 0.5;
    # growth_interval: the plateau is 10 ... 2000, sqrt(10 * 2000) = 141.4 -> 140.
    assert rec.centre["growth_factor"] == pytest.approx(math.sqrt(6.0))
    assert rec.config.growth_factor == 2.4
    assert rec.config.backoff_factor == 0.5
    assert rec.centre["growth_interval"] == pytest.approx(math.sqrt(20000))
    assert rec.config.growth_interval == 140
    assert rec.config != (2.0**17, 3.1, 0.62, 700)
    assert rec.code == (
        f'torch.amp.GradScaler("cuda", init_scale=2.0**{int(math.log2(rec.config.init_scale))}, '
        "growth_factor=2.4, backoff_factor=0.5, growth_interval=140)"
    )
    assert rec.default_ties and "keeping the default is just as good" in rec.text
    assert "5 trials tie with the best" in rec.text and "middle of the plateau" in rec.text
    assert rec.to_dict()["plateau"]["init_scale"] == [2.0**-8, 2.0**19]


def test_no_plateau_recommends_the_best_trial():
    trials = _study(
        [
            {"exp": 10, "value": 0.40, "growth": 3.0, "backoff": 0.4, "interval": 50},
            {"exp": 12, "value": 0.45},
            {"exp": 14, "value": 0.50},
        ]
    )
    rec = recommend(trials, SPACE)
    assert not rec.from_plateau and rec.best_trial == 0
    assert (rec.config.init_scale, rec.config.growth_factor, rec.config.growth_interval) == (2.0**10, 3.0, 50)
    assert "no plateau to centre on" in rec.text
    assert recommend([], SPACE) is None


def test_rounding_stays_on_a_narrow_plateau():
    rows = [
        {"exp": 10, "value": 0.42, "backoff": 0.512},
        {"exp": 11, "value": 0.42, "backoff": 0.514},
        {"exp": 12, "value": 0.42, "backoff": 0.513},
    ]
    rec = recommend(_study(rows), SPACE)
    # 0.513 rounds to 0.51, outside [0.512, 0.514]: the unrounded middle is kept.
    assert rec.config.backoff_factor == pytest.approx(0.513)
    assert rec.config.init_scale == 2.0**11


def test_powers_of_two_space():
    space = SpaceConfig(init_scale=ParamRange(2.0**-20, 2.0**32, log=True, powers_of_two=True))
    dists = {k: v for k, v in DISTS.items() if k != "init_scale"}
    dists["init_scale_log2"] = IntDistribution(-20, 32)
    rows = [{"exp": e, "value": 0.42} for e in (-8, 0, 7, 19)]
    trials = _study(rows, dists)
    rec = recommend(trials, space)
    assert math.log2(rec.config.init_scale).is_integer()
    r = _by_param(safe_ranges(trials, space))["init_scale"]
    assert (r.low, r.high) == (2.0**-8, 2.0**19)
    assert "init_scale from 2^-8 to 2^19 is safe for this task" in r.text


def test_format_value():
    assert format_value("init_scale", 2.0**16) == "2^16"
    assert format_value("init_scale", 213.66) == "2^7.74"
    assert format_value("growth_interval", 662.0) == "662"
    assert format_value("backoff_factor", 0.46875) == "0.469"
