"""search.results on synthetic trials: safe ranges (also when they are not intervals), the recommendation."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search.core import DEFAULTS, ParamRange, SpaceConfig, scaler_config
from search.results import (
    best_trial,
    format_ends,
    format_range,
    format_value,
    good_trials,
    safe_ranges,
)

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
    assert r.text.startswith("init_scale from 2^-4 to 2^18 is good for this task: 3 of 6 trials")
    assert "within 1%" in r.text
    # Every good trial has growth_factor 2: a one-point range, said so.
    assert ranges["growth_factor"].text.startswith("growth_factor = 2 is good")


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
    assert "another setting outside its good range that acted in its run (growth_interval)" in r.text
    assert "does not show this range failing" in r.text
    assert r.blamed == ((3, ("growth_interval",)),)
    # Two such trials: each setting named with how many of them it explains (it read "growth_interval 2x").
    two = _study(
        [
            {"exp": 0, "value": 0.4203, "interval": 1000},
            {"exp": 10, "value": 0.4202, "interval": 2000},
            {"exp": 20, "value": 0.4204, "interval": 500},
            {"exp": 12, "value": 1.58, "interval": 2, "failure": "overflow_churn"},
            {"exp": 14, "value": 1.61, "interval": 3, "failure": "overflow_churn"},
        ]
    )
    text = _by_param(safe_ranges(two, SPACE))["init_scale"].text
    assert (
        "each of them has another setting outside its good range that acted in its run (growth_interval in 2"
        " of them)"
        in text
    ), text
    assert ranges["growth_interval"].bad_inside == ()


def test_a_setting_that_could_not_act_explains_nothing():
    """The scale curve says which settings acted: growth_factor only if the scale grew, backoff_factor only
    if a step was skipped, growth_interval only if the scale grew or a shorter interval within range would
    have made it grow. A bad trial whose outside settings were all idle is a hole."""
    from search.results import idle_settings, param_values

    trials = _study(
        [
            {"exp": 0, "value": 0.4203, "growth": 1.4},
            {"exp": 10, "value": 0.4202, "growth": 1.5},
            {"exp": 20, "value": 0.4204, "growth": 1.45},
            # Inside init_scale's range; growth 3.7 is outside its range (1.4..1.5) but never acted.
            {"exp": 12, "value": 1.58, "growth": 3.7, "failure": "underflow"},
        ]
    )
    flat = [2.0**12] * 6  # no skip, no growth: 6 unskipped steps in a row
    for t, curve in zip(trials, ([1.0] * 6, [2.0**10] * 6, [2.0**20] * 6, flat)):
        t.user_attrs["scale_curve"] = curve
    ranges = _by_param(safe_ranges(trials, SPACE))
    assert ranges["init_scale"].holes == (3,) and ranges["init_scale"].blamed == ()
    assert "not an interval" in ranges["init_scale"].text
    assert (
        ranges["growth_factor"].idle_in_good
        and "the range is only what was tried" in ranges["growth_factor"].text
    )
    assert ranges["backoff_factor"].idle_in_good and ranges["growth_interval"].idle_in_good
    assert not ranges["init_scale"].idle_in_good

    t, v = trials[3], param_values(trials[3], SPACE)
    wide = {"growth_interval": (3.0, 2000.0)}
    assert idle_settings(t, v, wide) == {"growth_factor", "growth_interval", "backoff_factor"}
    # An interval of 6 or less within range would have grown the scale: then the interval acts.
    assert idle_settings(t, v, {"growth_interval": (3.0, 6.0)}) == {"growth_factor", "backoff_factor"}
    t.user_attrs["scale_curve"] = [2.0**12, 2.0**11, 2.0**11, 2.0**11 * 3.7]  # a skip, then growth
    assert idle_settings(t, v, wide) == frozenset()
    t.user_attrs["scale_curve"] = [2.0**12 * 0.5] + [2.0**11] * 3  # a skip, no growth
    assert idle_settings(t, v, wide) == {"growth_factor", "growth_interval"}
    del t.user_attrs["scale_curve"]  # an old record: nothing is assumed idle
    assert idle_settings(t, v, wide) == frozenset()


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
    assert ranges["init_scale"].low is None and "no good range" in ranges["init_scale"].text
    assert safe_ranges([], SPACE)[0].text == "init_scale: no completed trial yet."


def test_format_value():
    assert format_value("init_scale", 2.0**16) == "2^16"
    assert format_value("init_scale", 213.66) == "2^7.74"
    assert format_value("growth_interval", 662.0) == "662"
    assert format_value("backoff_factor", 0.46875) == "0.469"


def test_two_ends_never_read_as_one_value_unless_they_are():
    """A newcomer read "2^19.70 … 2^19.70" as one value with bad trials at it: two ends get the digits that
    tell them apart; only equal values read as one."""
    assert format_ends("init_scale", 2**19.7012, 2**19.7041) == ("2^19.701", "2^19.704")
    assert format_ends("init_scale", 2.0**16, 2**16.0001) == ("2^16", "2^16.0001")  # not 2^16 and 2^16.00
    assert format_ends("init_scale", 2.0**14, 2.0**18) == ("2^14", "2^18")
    # No digits beyond format_value's where the ends already read apart.
    assert format_ends("init_scale", 2.0**14, 2**18.25) == ("2^14", "2^18.25")
    assert format_ends("growth_factor", 1.234, 2.345) == ("1.23", "2.35")
    assert format_ends("growth_factor", 1.93012, 1.93044) == ("1.9301", "1.9304")
    assert format_ends("backoff_factor", 0.5, 0.5) == ("0.5", "0.5")
    assert format_range("init_scale", 2**19.7012, 2**19.7041) == "2^19.701..2^19.704"
    assert format_range("init_scale", 2**19.7, 2**19.7) == "2^19.70"
    assert format_range("growth_interval", 3.0, 4.0) == "3..4"
    # In the safe range's words: the newcomer's case, two good trials 0.003 octaves apart, a bad one between.
    rows = [{"value": 0.10, "exp": 19.7012}, {"value": 0.10, "exp": 19.7041}, {"value": 0.9, "exp": 19.703}]
    text = _by_param(safe_ranges(_study(rows), SPACE))["init_scale"].text
    assert text.startswith("init_scale from 2^19.701 to 2^19.704 is good") and "(#2)" in text, text


# -- the safe ranges' words against the plain loop ------------------------------------------------


@pytest.fixture(scope="module")
def sum_trials() -> list[optuna.trial.FrozenTrial]:
    """deep-mlp-sum (the default is not the best there), the seed's baselines and 12 random settings,
    recorded as the service records trials."""
    import torch

    from search.core import baseline_trials, distributions
    from search.tasks import build_problem, resolve_task
    from search.training import run_steps, run_trial

    problem = build_problem(resolve_task("deep-mlp-sum"), "deep-mlp-sum", 42)
    dists = distributions(SPACE)
    sampler = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    points = [params for _, params in baseline_trials(SPACE)[0]] + [
        sampler.ask(dists).params for _ in range(12)
    ]
    store = optuna.create_study()
    for params in points:
        out = run_trial(
            problem,
            scaler_config(params, SPACE),
            steps=run_steps(problem, 0, 0),
            amp_dtype=torch.float16,
            penalty=DEFAULTS.penalty,
            device_label="cpu",
        )
        store.add_trial(
            optuna.trial.create_trial(
                value=out.value, params=params, distributions=dists, user_attrs=out.user_attrs
            )
        )
    return store.get_trials()


# Plain runs of deep-mlp-sum by their settings, shared by both tolerances (a run depends on nothing else).
_PLAIN_SUM_RUNS: dict[tuple, object] = {}


@pytest.mark.parametrize("tolerance", [0.01, 0.2])
def test_what_the_safe_ranges_say_of_each_setting_holds_in_the_plain_loop(sum_trials, tolerance):
    """A setting said to be idle in a trial changes nothing there when moved into its safe range; one
    blamed for a bad trial does change its run; a hole is bad with every setting moved into its range; a
    range said to be only what was tried runs the same for good trials well outside it."""
    from search.results import param_values
    from search.tasks import build_problem, resolve_task

    from plain_loop import plain_fp32_zero_fraction, plain_run

    problem = build_problem(resolve_task("deep-mlp-sum"), "deep-mlp-sum", 42)
    steps = len(sum_trials[0].user_attrs["loss_curve"])
    zeros = plain_fp32_zero_fraction(problem, steps)
    ranges = {r.param: r for r in safe_ranges(sum_trials, SPACE, tolerance)}
    bounds = {p: (r.low, r.high) for p, r in ranges.items()}
    values = {t.number: param_values(t, SPACE) for t in sum_trials}
    best = min(t.value for t in sum_trials)
    cache = _PLAIN_SUM_RUNS

    def plain(v: dict):
        key = tuple(sorted(v.items()))
        if key not in cache:
            cache[key] = plain_run(
                problem,
                v["init_scale"],
                v["growth_factor"],
                v["backoff_factor"],
                int(round(v["growth_interval"])),
                steps,
                fp32_zeros=zeros,
            )
        return cache[key]

    def moved(number: int, settings) -> dict:
        v = dict(values[number])
        for q in settings:
            v[q] = min(max(v[q], bounds[q][0]), bounds[q][1])
        return v

    def same(a, b) -> bool:
        return a.losses == b.losses and a.scales == b.scales and a.skipped == b.skipped

    blamed = {(n, q) for r in ranges.values() for n, qs in r.blamed for q in qs}
    for n, q in blamed:  # it acted: moved into its range, the run changes
        assert not same(plain(moved(n, [q])), plain(values[n])), (n, q)
    idle_seen = 0
    for r in ranges.values():
        for n in r.bad_inside:
            outside = [q for q, (lo, hi) in bounds.items() if q != r.param and not lo <= values[n][q] <= hi]
            idle = [q for q in outside if (n, q) not in blamed]
            if idle:  # said not to act: moved into range, the run is the same
                idle_seen += 1
                assert same(plain(moved(n, idle)), plain(values[n])), (n, idle)
        for n in r.holes:  # every setting inside its range, and still not good
            run = plain(moved(n, bounds))
            assert run.failure != "none" or run.objective > best + tolerance * abs(best), (r.param, n)
        if r.idle_in_good:  # far outside the range tried, the good trials run the same
            for t in good_trials(sum_trials, tolerance):
                v = dict(values[t.number])
                v[r.param] = {"growth_factor": 7.3, "backoff_factor": 0.93, "growth_interval": 1999}[r.param]
                assert same(plain(v), plain(values[t.number])), (r.param, t.number)
    # Each kind of claim was made and checked at least once (at 1%: idle ranges; at 20%: holes).
    assert blamed and idle_seen
    if tolerance == 0.01:
        assert any(r.idle_in_good for r in ranges.values())
    else:
        assert any(r.holes for r in ranges.values())
