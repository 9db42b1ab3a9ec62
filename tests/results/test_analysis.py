"""search.results on synthetic trials: safe ranges (also when they are not intervals), the recommendation."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from search.core import DEFAULTS, ParamRange, ScalerConfig, SpaceConfig, scaler_config
from search.results import (
    best_trial,
    box_corners,
    check_boxes,
    format_value,
    good_trials,
    recommend,
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
    assert "growth_interval 1x" in r.text and "does not show this range failing" in r.text
    assert r.blamed == ((3, ("growth_interval",)),)
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
    assert ranges["growth_factor"].idle_in_good and "the range is only what was tried" in ranges["growth_factor"].text
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
    assert ranges["init_scale"].low is None and "no safe range" in ranges["init_scale"].text
    assert safe_ranges([], SPACE)[0].text == "init_scale: no completed trial yet."


def _line_rows(default_exp: float | None = None) -> list[dict]:
    """Good trials from 2^-8 to 2^19 (the argmin near the top edge), bad ones beyond both edges."""
    rows = [{"exp": e, "value": 0.4203 + 1e-5 * (e % 3)} for e in (-8, -5, -2, 1, 3, 5, 7, 9, 12, 15, 19)]
    rows.append({"exp": 18.6, "value": 0.4201})  # The argmin, 0.4 octaves from the last good trial.
    rows.append({"exp": 22, "value": 0.4717})  # Skips steps: more than 1% behind.
    rows.append({"exp": -12, "value": 1.7, "failure": "underflow"})
    if default_exp is not None:
        rows.append({"exp": default_exp, "value": 0.4203, "baseline": "seed-1"})
    return rows


def test_recommendation_is_the_deepest_good_trial_not_the_argmin():
    trials = _study(_line_rows())
    rec = recommend(trials, SPACE, device_type="cuda")
    assert rec.best_trial == 11 and not rec.keep_default
    # The nearest bad trials are 2^-12 and 2^22: the deepest good trial is the one nearest 2^5.
    assert rec.source_trial == 5 and rec.depth == pytest.approx(17.0)  # 2^5: 17 octaves to either
    assert rec.nearest_bad == 12 and rec.edge["init_scale"] == 2.0**22  # ties: the lower number
    assert rec.config.init_scale == 2.0**5 and rec.config.growth_interval == 2000
    assert len(rec.neighbours) == 12  # every good trial within 17 octaves
    # The line names only what differs from PyTorch's defaults.
    assert rec.code == 'torch.amp.GradScaler("cuda", init_scale=2.0**5)' and rec.verdict == "change"
    assert rec.changed == ("init_scale",)
    assert "deepest inside that region" in rec.text and "has not run" in rec.text


def test_keep_the_default_when_it_is_good_and_deep_enough():
    rec = recommend(_study(_line_rows(default_exp=16)), SPACE)
    assert rec.keep_default and rec.config == ScalerConfig(2.0**16, 2.0, 0.5, 2000)
    assert rec.default_depth == pytest.approx(6.0) and rec.text.startswith("Keep the default")


def test_a_default_close_to_an_edge_is_not_kept():
    rows = _line_rows(default_exp=16) + [{"exp": 17.2, "value": 0.52}]  # bad 1.2 octaves above it
    rec = recommend(_study(rows), SPACE)
    assert not rec.keep_default and rec.default_depth == pytest.approx(1.2)
    assert "close to an edge" in rec.text and rec.config.init_scale == 2.0**3


def test_a_lone_point_far_from_the_failures_needs_neighbours():
    # One good trial far out in growth_interval (few neighbours) against a well-sampled line.
    rows = _line_rows() + [{"exp": 4, "value": 0.4203, "interval": 1, "growth": 8.0}]
    rows += [{"exp": e, "value": 0.9, "interval": 1, "growth": 8.0, "failure": "overflow_churn"} for e in (10, 20)]
    rec = recommend(_study(rows), SPACE)
    assert rec.source_trial != 14 and len(rec.neighbours) >= 3


def test_the_recommendation_is_a_measured_trial_exactly():
    rows = [{"exp": e, "value": 0.42, "backoff": 0.5 + 0.001 * i} for i, e in enumerate((0.3, 2.3, 4.3, 6.3))]
    rows += [{"exp": -3.7, "value": 2.0, "failure": "underflow"}, {"exp": 8.7, "value": 0.9}]
    trials = _study(rows)
    rec = recommend(trials, SPACE)
    # Not rounded to 2^2 / 0.5: a rounded neighbour is a setting no trial ran.
    source = next(t for t in trials if t.number == rec.source_trial)
    assert rec.config == scaler_config(source.params, SPACE)
    assert not math.log2(rec.config.init_scale).is_integer() and rec.config.backoff_factor != 0.5
    assert f"trial #{source.number}'s own, as measured" in rec.text


def test_confirmation_decides():
    trials = _study(_line_rows(default_exp=17.5) + [{"exp": 18.4, "value": 0.9}])
    rec = recommend(trials, SPACE)
    assert not rec.keep_default and rec.confirmed is None
    params = {"init_scale": rec.config.init_scale, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}

    def confirmation(diff: float, significant: bool) -> dict:
        entry = {"label": "recommended", "params": params, "mean_diff": diff, "sd_diff": 1e-4, "n": 5, "p": 0.001 if significant else 0.4, "significant": significant, "default_sd": 0.01}
        return {"comparisons": [entry]}

    overturned = recommend(trials, SPACE, confirmation=confirmation(+4.5e-4, True))
    assert overturned.confirmed == "overturned" and overturned.keep_default
    assert overturned.config == ScalerConfig(2.0**16, 2.0, 0.5, 2000)
    assert "default is significantly better" in overturned.text
    confirmed = recommend(trials, SPACE, confirmation=confirmation(-3e-3, True))
    assert confirmed.confirmed == "confirmed" and not confirmed.keep_default
    assert confirmed.config == rec.config
    same = recommend(trials, SPACE, confirmation=confirmation(-1e-5, False))
    assert same.confirmed == "not better" and same.keep_default and "Keep the default." in same.text
    assert same.verdict == "keep-default" and overturned.verdict == "keep-default" and confirmed.verdict == "change"


def _combination_study():
    # growth x2 is fine at interval 2000 and interval 2 is fine at growth x1.1, but x2 with
    # interval 2 churns: both per-setting ranges contain it, the ranges that are safe together must not.
    rows = [
        {"exp": e, "value": 0.42, "growth": g, "interval": i}
        for e in (0, 2, 4, 6)
        for g, i in ((2.0, 2000), (2.0, 500), (1.1, 2), (1.1, 20), (1.5, 200))
    ]
    rows.append({"exp": 3, "value": 0.9, "growth": 2.0, "interval": 2, "failure": "overflow_churn"})
    return _study(rows)


def test_the_candidate_for_ranges_safe_together_excludes_a_bad_combination():
    trials = _combination_study()
    ranges = {r.param: r for r in safe_ranges(trials, SPACE)}
    assert ranges["growth_interval"].holes == (20,) and ranges["growth_factor"].holes == (20,)
    rec = recommend(trials, SPACE)
    box = rec.candidate
    assert set(box) == {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}
    bad = {"init_scale": 2.0**3, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2}
    assert not all(lo <= bad[p] <= hi for p, (lo, hi) in box.items())
    for p, (lo, hi) in box.items():  # the recommended setting is inside its own box
        assert lo <= getattr(rec.config, p) <= hi
    assert 20 not in rec.together_trials and rec.together_trials
    # Not claimed until its corners are trained: sampled trials cannot vouch for every combination.
    assert rec.together_check == "unchecked" and rec.together == {}
    n = len(box_corners(rec.candidate, rec.config))
    assert n == 8  # backoff_factor is 0.5 in every trial: one end
    assert "a candidate, not checked" in rec.text and f"search.confirm trains its {n} corners" in rec.text


def _corner_runs(boxes_failing: dict[int, str], rec) -> list[dict]:
    """Corner runs for every check box, where box k's first corner fails with the given code."""
    runs = []
    for k, box in enumerate(check_boxes(rec.candidate, rec.config)):
        for i, point in enumerate(box_corners(box, rec.config)):
            runs.append({"point": point, "failure": boxes_failing.get(k, "none") if i == 0 else "none", "value": 0.42})
    return runs


def test_checked_corners_decide_the_ranges_safe_together():
    trials = _combination_study()
    rec = recommend(trials, SPACE)
    boxes = check_boxes(rec.candidate, rec.config)
    assert len(boxes) == 4 and boxes[0] == rec.candidate
    for small, large in zip(boxes[1:], boxes):  # each box inside the one before, around the setting
        for p, (lo, hi) in small.items():
            assert large[p][0] <= lo <= getattr(rec.config, p) <= hi <= large[p][1]
    held = recommend(trials, SPACE, confirmation={"corners": _corner_runs({}, rec)})
    assert held.together_check == "checked" and held.together == rec.candidate and not held.together_failed
    assert "checked, all 8 corners trained without failure" in held.text
    shrunk = recommend(trials, SPACE, confirmation={"corners": _corner_runs({0: "overflow_churn"}, rec)})
    assert shrunk.together_check == "checked" and shrunk.together == boxes[1]
    assert shrunk.together_failed[0]["failure"] == "overflow_churn" and "1 corner of larger boxes failed" in shrunk.text
    refuted = recommend(trials, SPACE, confirmation={"corners": _corner_runs({k: "underflow" for k in range(4)}, rec)})
    assert refuted.together_check == "refuted" and refuted.together == {} and len(refuted.together_failed) == 4
    assert "No ranges that are safe together" in refuted.text
    partial = recommend(trials, SPACE, confirmation={"corners": _corner_runs({}, rec)[:5]})
    assert partial.together_check == "unchecked" and partial.together == {}


@pytest.mark.parametrize("seed", range(20))
def test_no_failed_trial_inside_the_candidate(seed):
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(40):
        exp, growth = rng.uniform(-20, 32), 2 ** rng.uniform(0.02, 2.99)
        backoff, interval = rng.uniform(0.05, 0.95), int(2 ** rng.uniform(0, 10.9))
        # A made-up task: bad below 2^-5, above 2^25 and where fast growth meets short intervals.
        good = -5 < exp < 25 and not (growth > 1.8 and interval < 8)
        row = {"exp": exp, "value": 0.42 if good else 1.9, "growth": growth, "backoff": backoff, "interval": interval}
        rows.append(row if good else {**row, "failure": "underflow" if exp < 0 else "overflow_churn"})
    trials = _study(rows)
    rec = recommend(trials, SPACE)
    values = {t.number: (2.0 ** rows[t.number]["exp"], rows[t.number]["growth"], rows[t.number]["backoff"], rows[t.number]["interval"]) for t in trials}
    order = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
    for number, point in values.items():
        inside = all(rec.candidate[p][0] <= v <= rec.candidate[p][1] for p, v in zip(order, point))
        assert inside == (number in rec.together_trials)
        if inside:
            assert "failure" not in rows[number], (number, point, rec.candidate)


def test_no_good_trial_and_no_trial():
    rec = recommend(_study([{"exp": -20, "value": 1.7, "failure": "underflow"}]), SPACE)
    assert rec.best_trial == 0 and "No setting is safe here: no trial is good (1 underflow)" in rec.text
    assert rec.verdict == "none-safe" and not rec.safe
    assert recommend([], SPACE) is None


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
    points = [params for _, params in baseline_trials(SPACE)[0]] + [sampler.ask(dists).params for _ in range(12)]
    store = optuna.create_study()
    for params in points:
        out = run_trial(problem, scaler_config(params, SPACE), steps=run_steps(problem, 0, 0), amp_dtype=torch.float16,
                        penalty=DEFAULTS.penalty, device_label="cpu")
        store.add_trial(optuna.trial.create_trial(value=out.value, params=params, distributions=dists, user_attrs=out.user_attrs))
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
            cache[key] = plain_run(problem, v["init_scale"], v["growth_factor"], v["backoff_factor"],
                                   int(round(v["growth_interval"])), steps, fp32_zeros=zeros)
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


def test_the_default_alone_is_not_kept_on_its_own_word():
    """A run stopped after the default's trial: one good trial is not a region, whatever its depth."""
    trials = _study([{"exp": 16, "value": 0.4203, "baseline": "seed-1"}, {"exp": -12, "value": 1.7, "failure": "underflow"}])
    rec = recommend(trials, SPACE)
    # Chosen as the deepest good trial, not kept for its depth; being the default, the verdict keeps it.
    assert rec.neighbours == (0,) and rec.source_trial == 0 and rec.verdict == "keep-default"
    assert "Only 1 good trial around any good trial" in rec.text and "Trial #0 is PyTorch's default: keep" in rec.text
    with_support = _study(
        [{"exp": 16, "value": 0.4203, "baseline": "seed-1"}, {"exp": 15, "value": 0.4203}, {"exp": 17, "value": 0.4204},
         {"exp": -12, "value": 1.7, "failure": "underflow"}]
    )
    assert recommend(with_support, SPACE).keep_default
