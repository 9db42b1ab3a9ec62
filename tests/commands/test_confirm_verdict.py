"""search.confirm's verdict: the paired test, which configurations it confirms, and the default run
confirmed (the issue's bar, and its ranges that are safe together against the plain loop)."""

from __future__ import annotations

import math
import pathlib

import numpy as np
import optuna
import pytest
from scipy import stats

from search.results import DEFAULT_LABEL, paired_test, select_candidates, summarize_confirmation

from conftest import built_once, run_cli

# -- the paired test ---------------------------------------------------------------------------


def test_paired_test_matches_scipy_and_handles_ties():
    best = [0.40, 0.41, 0.43, 0.39, 0.42]
    default = [0.42, 0.43, 0.44, 0.41, 0.45]
    t, p, test = paired_test(best, default)
    expected = stats.ttest_rel(best, default)
    assert (t, p) == pytest.approx((expected.statistic, expected.pvalue)) and p < 0.05
    assert test.startswith("paired t-test over 5 seeds, two-sided")
    # Two-sided: the default being better is significant too, with the same p.
    assert paired_test(default, best)[1] == pytest.approx(p) and paired_test(default, best)[
        0
    ] == pytest.approx(-t)
    noisy = [0.43, 0.40, 0.46, 0.38, 0.45]
    assert paired_test(noisy, default)[1] > 0.05
    t, p, test = paired_test(default, default)
    assert math.isnan(t) and p == 1.0 and "tie" in test
    t, p, _ = paired_test([0.4], [0.5])
    assert math.isnan(t) and math.isnan(p)


def test_the_recommendation_is_confirmed_too_unless_it_is_the_default():
    from search.core import DEFAULTS
    from search.results import recommended_candidate

    from test_recommendation import _line_rows, _study

    settings = DEFAULTS
    rec = recommended_candidate(_study(_line_rows()), settings)
    assert rec is not None and rec.label == "recommended (#5)"
    assert rec.params == {
        "init_scale": 2.0**5,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
    }
    chosen, _ = select_candidates(_study(_line_rows()), settings, top=12)  # #5 is among the top 12 already
    assert not any(c.label.startswith("recommended") for c in chosen) and "best-12 (#5)" not in chosen
    chosen, _ = select_candidates(_study(_line_rows()), settings, top=1)
    assert [c.label for c in chosen] == ["best-1 (#11)", "recommended (#5)", DEFAULT_LABEL]
    assert recommended_candidate(_study(_line_rows(default_exp=16)), settings) is None  # keep the default


# -- ranges that are safe together, against the plain loop ----------------------------------------


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> pathlib.Path:
    """The default run (100 seed-mlp trials, docs/optimize.md), confirmed with search.confirm's defaults.

    Not made smaller: the issue's bar is about this run, its trial count and confirmation defaults included.
    Built once per session (conftest.built_once): the longest set-up of the suite is not repeated by a
    pytest-xdist worker that takes over some of this file's tests.
    """

    def default_run(directory: pathlib.Path) -> None:
        proc = run_cli(["--trials", "100", "--quiet"], directory)
        assert proc.returncode == 0, proc.stderr
        proc = run_cli(["--quiet"], directory, module="search.confirm")
        assert proc.returncode == 0, proc.stderr

    return built_once(tmp_path_factory, "default-run", default_run)


def test_default_run_confirmed_is_keep_the_default_or_not_worse(default_run):
    """The issue's bar: after confirmation, a default run either keeps the default or recommends a
    setting that is not worse than the default on new seeds."""
    from search.results import recommend
    from search.storage import settings_of

    url = f"sqlite:///{default_run / 'study.db'}"
    search = optuna.load_study(storage=url, study_name="seed-mlp")
    data = summarize_confirmation(url, "seed-mlp")
    rec = recommend(search.get_trials(), settings_of(search).space, confirmation=data)
    if not rec.keep_default:
        entry = next(c for c in data["comparisons"] if c["label"].startswith("recommended"))
        assert not (entry["significant"] and entry["mean_diff"] > 0), entry


def test_ranges_safe_together_hold_in_the_plain_loop(default_run):
    """The checked box's corners and random points inside it train without failure in the independent
    plain loop; every corner search.confirm saw fail fails there too."""
    from search.results import recommend
    from search.storage import settings_of
    from search.tasks.seed_mlp import build

    from plain_loop import plain_fp32_zero_fraction, plain_run

    url = f"sqlite:///{default_run / 'study.db'}"
    search = optuna.load_study(storage=url, study_name="seed-mlp")
    rec = recommend(
        search.get_trials(), settings_of(search).space, confirmation=summarize_confirmation(url, "seed-mlp")
    )
    assert rec.together_check == "checked", rec.text
    problem = build(42)
    zeros = plain_fp32_zero_fraction(problem, 30)
    order = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")

    def plain(point: dict) -> str:
        return plain_run(
            problem,
            *(point[p] for p in order[:3]),
            int(round(point["growth_interval"])),
            30,
            fp32_zeros=zeros,
        ).failure

    from search.results import box_corners

    rng = np.random.default_rng(7)
    inside = []
    for _ in range(12):  # log-uniform inside the box
        point = {p: float(getattr(rec.config, p)) for p in order}
        for p, (lo, hi) in rec.together.items():
            point[p] = float(2 ** rng.uniform(math.log2(lo), math.log2(hi)))
        inside.append(point)
    for point in box_corners(rec.together, rec.config) + inside:
        assert plain(point) == "none", point
    for failed in rec.together_failed:
        assert plain(failed["point"]) == failed["failure"], failed

    # A range called idle in the box says nothing: moving that setting across the box leaves the runs
    # inside the same, step for step (the plain loop's losses and scales); a range not called idle
    # changes the run of some trial inside.
    runs = {t.number: t for t in search.get_trials()}

    def point_of(number: int) -> dict:
        point = {q: float(runs[number].params.get(q, getattr(rec.config, q))) for q in order}
        if "init_scale_log2" in runs[number].params:
            point["init_scale"] = 2.0 ** runs[number].params["init_scale_log2"]
        return point

    def same_across(p: str, number: int) -> bool:
        """Whether moving ``p`` from the box's low end to its high end leaves the run the same, the
        growth factor at the box's shortest interval (where growth, if any, happens soonest)."""
        base = point_of(number)
        if p == "growth_factor" and "growth_interval" in rec.together:
            base["growth_interval"] = rec.together["growth_interval"][0]
        lo, hi = (dict(base, **{p: v}) for v in rec.together[p])
        a = plain_run(problem, *(lo[q] for q in order[:3]), int(lo["growth_interval"]), 30)
        b = plain_run(problem, *(hi[q] for q in order[:3]), int(hi["growth_interval"]), 30)
        return (a.losses, a.scales) == (b.losses, b.scales)

    for p in (q for q in rec.together if q != "init_scale"):
        if p in rec.together_idle:
            assert all(same_across(p, n) for n in rec.together_trials[:4]), p
        else:  # Not called idle: some run inside uses it.
            assert not all(same_across(p, n) for n in rec.together_trials), p


def test_after_confirmation_every_output_gives_the_same_verdict(default_run, tmp_path):
    """search.confirm's verdict, the summary search.optimize prints again, --best-out, the dashboard note
    (rewritten by confirm) and the report all say the same, from the same confirmation runs."""
    import json
    import shutil

    from optuna_dashboard import get_note

    default_run = shutil.copytree(default_run, tmp_path / "run")  # it writes: a copy of the shared run

    confirm = run_cli(["--quiet"], default_run, module="search.confirm")  # runs nothing: all stored
    assert confirm.returncode == 0, confirm.stderr
    assert "this run: nothing to run" in confirm.stdout
    verdict_block = confirm.stdout[confirm.stdout.index("  verdict: ") :].rstrip("\n")
    again = run_cli(["--trials", "100", "--quiet", "--best-out", "best.json"], default_run)
    assert again.returncode == 0, again.stderr
    assert verdict_block in again.stdout
    note = get_note(optuna.load_study(storage=f"sqlite:///{default_run / 'study.db'}", study_name="seed-mlp"))
    assert verdict_block in note
    best = json.loads((default_run / "best.json").read_text())
    verdict = best["verdict"]
    assert verdict in ("keep-default", "change")  # seed-mlp: the default is good, no run needs "none-safe"
    first = verdict_block.splitlines()[0]
    report = run_cli(
        ["--study-name", "seed-mlp", "--out", "report.html"], default_run, module="search.report"
    )
    assert report.returncode == 0, report.stderr
    page = (default_run / "report.html").read_text()
    if verdict == "keep-default":
        assert first == "  verdict: keep the default" and "Verdict: keep PyTorch&#x27;s default" in page
        assert best["paste"]["torch"].endswith('scaler = torch.amp.GradScaler("cpu")')
    else:
        changed = ", ".join(best["recommended"]["cpu"]["changed"])
        assert first == f"  verdict: change {changed}" and f"Verdict: change {changed}" in page
        assert best["recommended"]["cpu"]["confirmed"] == "confirmed"  # only a change new seeds found better
