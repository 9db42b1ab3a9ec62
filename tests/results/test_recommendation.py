"""The verdict and its setting (search.results.recommend): the deepest good trial or PyTorch's default,
what confirmation runs decide, and the ranges safe together around the answer. Synthetic trials; the
measurements behind them are checked with the plain loop in test_minimal.py and test_analysis.py."""

from __future__ import annotations

import math

import pytest
from optuna.distributions import IntDistribution

from search.core import ParamRange, SpaceConfig, scaler_config
from search.results import (
    box_corners,
    check_boxes,
    recommend,
    safe_ranges,
)
from search.scalers import ScalerConfig

from test_analysis import DISTS, SPACE, _by_param, _study


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
    # Distances are read one setting at a time, not as one figure that adds octaves of different settings.
    assert rec.nearest_offsets == {
        "init_scale": 17.0,
        "growth_factor": 0.0,
        "backoff_factor": 0.0,
        "growth_interval": 0.0,
    }
    assert "the nearest trial that is not good, #12, has init_scale 17.0 octaves higher," in rec.text


def test_offsets_read_one_setting_at_a_time_largest_first():
    from search.results import offsets_text

    text = offsets_text(
        {"init_scale": -2.04, "growth_factor": 0.01, "backoff_factor": 1.0, "growth_interval": 9.1}
    )
    assert (
        text
        == "growth_interval 9.1 octaves higher, init_scale 2.0 octaves lower, backoff_factor 1.0 octave"
        " higher"
    )
    assert offsets_text({"init_scale": 0.0}) == "every setting within 0.05 octaves of it"


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
    rows += [
        {"exp": e, "value": 0.9, "interval": 1, "growth": 8.0, "failure": "overflow_churn"} for e in (10, 20)
    ]
    rec = recommend(_study(rows), SPACE)
    assert rec.source_trial != 14 and len(rec.neighbours) >= 3


def test_the_recommendation_is_a_measured_trial_exactly():
    rows = [{"exp": e, "value": 0.42, "backoff": 0.5 + 0.001 * i} for i, e in enumerate((0.3, 2.3, 4.3, 6.3))]
    rows += [{"exp": -3.7, "value": 2.0, "failure": "underflow"}, {"exp": 8.7, "value": 0.9}]
    trials = _study(rows)
    rec = recommend(trials, SPACE)
    # Not rounded to 2^2 / 0.5 until a trial has run that line: a rounding no trial ran is not an answer.
    source = next(t for t in trials if t.number == rec.source_trial)
    assert rec.config == scaler_config(source.params, SPACE)
    assert not math.log2(rec.config.init_scale).is_integer() and rec.config.backoff_factor != 0.5
    assert f"trial #{source.number}'s own; a rounding of its line has not been trained yet" in rec.text
    assert rec.rounding.pending == {
        "init_scale": 2.0 ** round(math.log2(rec.config.init_scale)),
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }


def test_confirmation_decides():
    trials = _study(_line_rows(default_exp=17.5) + [{"exp": 18.4, "value": 0.9}])
    rec = recommend(trials, SPACE)
    assert not rec.keep_default and rec.confirmed is None
    params = {
        "init_scale": rec.config.init_scale,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }

    def confirmation(diff: float, significant: bool) -> dict:
        entry = {
            "label": "recommended",
            "params": params,
            "mean_diff": diff,
            "sd_diff": 1e-4,
            "n": 5,
            "p": 0.001 if significant else 0.4,
            "significant": significant,
            "default_sd": 0.01,
        }
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
    assert (
        same.verdict == "keep-default"
        and overturned.verdict == "keep-default"
        and confirmed.verdict == "change"
    )


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
            runs.append(
                {"point": point, "failure": boxes_failing.get(k, "none") if i == 0 else "none", "value": 0.42}
            )
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
    assert (
        shrunk.together_failed[0]["failure"] == "overflow_churn"
        and "1 corner of larger boxes failed" in shrunk.text
    )
    refuted = recommend(
        trials, SPACE, confirmation={"corners": _corner_runs({k: "underflow" for k in range(4)}, rec)}
    )
    assert (
        refuted.together_check == "refuted" and refuted.together == {} and len(refuted.together_failed) == 4
    )
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
        row = {
            "exp": exp,
            "value": 0.42 if good else 1.9,
            "growth": growth,
            "backoff": backoff,
            "interval": interval,
        }
        rows.append(row if good else {**row, "failure": "underflow" if exp < 0 else "overflow_churn"})
    trials = _study(rows)
    rec = recommend(trials, SPACE)
    values = {
        t.number: (
            2.0 ** rows[t.number]["exp"],
            rows[t.number]["growth"],
            rows[t.number]["backoff"],
            rows[t.number]["interval"],
        )
        for t in trials
    }
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
    assert "init_scale from 2^-8 to 2^19 is good for this task" in r.text


def test_the_default_alone_is_not_kept_on_its_own_word():
    """A run stopped after the default's trial: one good trial is not a region, whatever its depth."""
    trials = _study(
        [
            {"exp": 16, "value": 0.4203, "baseline": "seed-1"},
            {"exp": -12, "value": 1.7, "failure": "underflow"},
        ]
    )
    rec = recommend(trials, SPACE)
    # Chosen as the deepest good trial, not kept for its depth; being the default, the verdict keeps it.
    assert rec.neighbours == (0,) and rec.source_trial == 0 and rec.verdict == "keep-default"
    assert (
        "Only 1 good trial around any good trial" in rec.text
        and "Trial #0 is PyTorch's default: keep" in rec.text
    )
    with_support = _study(
        [
            {"exp": 16, "value": 0.4203, "baseline": "seed-1"},
            {"exp": 15, "value": 0.4203},
            {"exp": 17, "value": 0.4204},
            {"exp": -12, "value": 1.7, "failure": "underflow"},
        ]
    )
    assert recommend(with_support, SPACE).keep_default


def test_an_init_scale_below_1_is_named_for_what_it_does():
    """Good trials from 2^-6 to 2^-1 only (above, every trial churns): the answer scales gradients down."""
    rows = [
        {"exp": e, "value": 0.4203 + 1e-5 * i} for i, e in enumerate((-6.3, -5.3, -4.3, -3.3, -2.3, -1.3))
    ]
    rows += [
        {"exp": 3.7, "value": 0.9, "failure": "overflow_churn"},
        {"exp": -15.7, "value": 1.7, "failure": "underflow"},
    ]
    rec = recommend(_study(rows), SPACE)
    assert rec.verdict == "change" and rec.config.init_scale < 1
    assert (
        f"Its init_scale, {rec.config.init_scale:.4g}, is below 1: GradScaler multiplies the loss" in rec.text
    )


def test_a_candidate_box_around_a_minimal_change_holds_its_centre():
    """The minimal change puts growth_interval back to 2000 where the safe trials near the chosen one ran
    5-50: the candidate's range for it must still be a range holding the centre, not (ball low, 50) inverted.
    """
    from optuna.distributions import FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    from search.core import DEFAULTS
    from search.results._landscape import Landscape
    from search.results._together import candidate_box
    from search.scalers import ScalerConfig

    dists = {
        "init_scale": FloatDistribution(2.0**-20, 2.0**32, log=True),
        "growth_factor": FloatDistribution(1.01, 8.0, log=True),
        "backoff_factor": FloatDistribution(0.05, 0.95),
        "growth_interval": IntDistribution(1, 2000, log=True),
    }
    trials = []
    for number, (scale, interval, failure) in enumerate(
        [(3000.0, 5, "none"), (3100.0, 20, "none"), (2900.0, 50, "none"), (2.0**-18, 30, "underflow")]
    ):
        made = create_trial(
            state=TrialState.COMPLETE,
            value=1.0 if failure == "none" else 2.0,
            distributions=dists,
            params={
                "init_scale": scale,
                "growth_factor": 2.0,
                "backoff_factor": 0.5,
                "growth_interval": interval,
            },
            user_attrs={"failure": failure, "nonfinite": False},
        )
        made.number = number
        trials.append(made)
    landscape = Landscape.of(trials, DEFAULTS.space, 0.01)
    box = candidate_box(landscape, 1, ScalerConfig(3100.0, 2.0, 0.5, 2000), DEFAULTS.space)
    assert box is not None
    for name, (low, high) in box.items():
        assert low <= high, (name, low, high)
    assert box["growth_interval"][0] <= 2000 <= box["growth_interval"][1]
