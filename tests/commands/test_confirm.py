"""search.confirm: real studies, real runs, real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import optuna
import pytest
import sqlalchemy
import torch
from optuna.trial import TrialState
from scipy import stats

from search.confirm import main
from search.results import DEFAULT_LABEL, paired_test, select_candidates, summarize_confirmation

from conftest import cli_env, real_study, run_cli

SIBLING = "seed-mlp.confirm"


def run_confirm(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """Runs ``search.confirm``'s ``main(ARGS)`` in ``cwd``, in this process."""
    return run_cli(args, cwd, module="search.confirm")


def _trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(storage=url, study_name=name).get_trials(deepcopy=False)


def _fingerprint(url: str, name: str = "seed-mlp") -> list[tuple]:
    """What must not change in the search study: every trial's state, value, params and attrs."""
    return [
        (t.number, t.state, t.value, t.params, t.distributions, t.user_attrs, t.system_attrs)
        for t in _trials(url, name)
    ]


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> pathlib.Path:
    """A real 12-trial seed-mlp study (5 baselines + 7 TPE trials)."""
    return real_study(tmp_path_factory, "searched", 12)


@pytest.fixture
def study_dir(searched, tmp_path) -> pathlib.Path:
    shutil.copy(searched / "study.db", tmp_path / "study.db")
    return tmp_path


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# -- the whole cycle on SQLite: run, check, re-run, extend ------------------------------------


def test_confirm_runs_every_config_on_every_seed_apart_from_the_search(study_dir):
    url = f"sqlite:///{study_dir / 'study.db'}"
    before = _fingerprint(url)
    search = optuna.load_study(storage=url, study_name="seed-mlp")
    complete = [t for t in search.trials if t.state == TrialState.COMPLETE]

    proc = run_confirm(["--top", "2", "--seeds", "3", "--json", "out.json"], study_dir)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _fingerprint(url) == before  # The search study is untouched.
    assert optuna.load_study(storage=url, study_name="seed-mlp").best_value == search.best_value

    sibling = optuna.load_study(storage=url, study_name=SIBLING)
    assert sibling.direction == optuna.study.StudyDirection.MINIMIZE
    every = sibling.get_trials(deepcopy=False)
    assert all(t.state == TrialState.COMPLETE for t in every)
    trials = [t for t in every if t.user_attrs.get("check") != "corner"]
    corners = [t for t in every if t.user_attrs.get("check") == "corner"]
    assert len(trials) == 9
    # The corners of the ranges that may be safe together, on the search's own data (seed 42).
    assert corners and all(t.user_attrs["data_seed"] == 42 for t in corners)
    points = [tuple(sorted(t.user_attrs["point"].items())) for t in corners]
    # A box's corners: two values in every setting whose range is not one value (growth_interval is when
    # every failure-free trial near the setting has 2000), so 2**d corners per box checked.
    varying = sum(len({dict(p)[k] for p in points}) > 1 for k in dict(points[0]))
    assert len(points) == len(set(points)) and len(points) % 2**varying == 0
    assert sibling.user_attrs["source_study"] == "seed-mlp"
    assert sibling.user_attrs["seeds"] == [43, 44, 45]
    assert sibling.user_attrs["top"] == 2 and sibling.user_attrs["epochs"] == 30

    # The two lowest-objective distinct configurations (earliest trial first on ties) and the default.
    ranked = sorted(complete, key=lambda t: (t.value, t.number))
    best1 = ranked[0]
    best2 = next(t for t in ranked if t.params != best1.params)
    labels = {f"best-1 (#{best1.number})": best1, f"best-2 (#{best2.number})": best2, DEFAULT_LABEL: None}
    assert {t.user_attrs["config"] for t in trials} == set(labels)
    pairs = {(t.user_attrs["config"], t.user_attrs["data_seed"]) for t in trials}
    assert pairs == {(label, seed) for label in labels for seed in (43, 44, 45)}
    for t in trials:
        source = labels[t.user_attrs["config"]]
        assert t.user_attrs["source_trial"] == (source.number if source else None)
        if source is not None:
            assert t.params == source.params and t.distributions == source.distributions
        else:
            assert t.params == {
                "init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000
            }
        run_attrs = ("final_loss", "skipped_steps", "failure", "learned", "loss_curve", "scale_curve")
        assert t.user_attrs["device"] == "cpu" or t.user_attrs["device"].startswith("cuda")
        assert all(key in t.user_attrs for key in run_attrs)
        assert len(t.user_attrs["loss_curve"]) == 30
        assert math.isfinite(t.value)

    # New seeds are new data and weights: a configuration's values differ from seed to seed.
    default_values = [t.value for t in trials if t.user_attrs["config"] == DEFAULT_LABEL]
    assert len(set(default_values)) == 3

    # The summary: mean and sample sd per configuration, from the stored values.
    data = summarize_confirmation(url, "seed-mlp")
    assert data == json.loads((study_dir / "out.json").read_text())
    json.dumps(data, allow_nan=False)
    assert data["seeds"] == [43, 44, 45]
    assert [c["label"] for c in data["configs"]] == list(labels)
    for config in data["configs"]:
        stored = {
            t.user_attrs["data_seed"]: t.value for t in trials if t.user_attrs["config"] == config["label"]
        }
        values = [stored[s] for s in (43, 44, 45)]
        assert config["values"] == values and config["n"] == 3
        assert config["mean"] == pytest.approx(np.mean(values), abs=1e-12)
        assert config["sd"] == pytest.approx(np.std(values, ddof=1), abs=1e-12)
        assert config["source_trial"] == (labels[config["label"]].number if labels[config["label"]] else None)
        assert f"{config['mean']:.4f} ± {config['sd']:.4f}" in proc.stdout
    comparison = data["comparison"]
    keys = {"best_label", "default_label", "mean_diff", "t", "p", "better_beyond_noise", "worse_beyond_noise", "test"}
    assert set(comparison) == keys
    assert comparison["best_label"] == f"best-1 (#{best1.number})"
    assert comparison["default_label"] == DEFAULT_LABEL
    best_values = data["configs"][0]["values"]
    diffs = np.array(best_values) - np.array(data["configs"][-1]["values"])
    assert comparison["mean_diff"] == pytest.approx(diffs.mean(), abs=1e-12)
    if np.all(diffs == 0):  # Typical on the seed task: the best is a tie with the default.
        assert comparison["p"] == 1.0 and comparison["t"] is None and not comparison["better_beyond_noise"]
        assert "tie on every seed" in proc.stdout
    else:
        expected = stats.ttest_rel(best_values, data["configs"][-1]["values"])  # two-sided
        assert comparison["p"] == pytest.approx(expected.pvalue)
        significant = expected.pvalue < 0.05
        assert comparison["better_beyond_noise"] == (significant and diffs.mean() < 0)
        assert comparison["worse_beyond_noise"] == (significant and diffs.mean() > 0)
    assert "verdict:" in proc.stdout

    # Running it again runs nothing.
    again = run_confirm(["--top", "2", "--seeds", "3", "--quiet"], study_dir)
    assert again.returncode == 0, again.stderr
    assert "nothing to run" in again.stdout
    assert len(_trials(url, SIBLING)) == 9 + len(corners)  # corners are not trained twice either

    # One more seed adds exactly that seed's runs, one per configuration.
    more = run_confirm(["--top", "2", "--seeds", "4", "--quiet"], study_dir)
    assert more.returncode == 0, more.stderr
    trials = [t for t in _trials(url, SIBLING) if t.user_attrs.get("check") != "corner"]
    assert len(trials) == 12
    assert sorted(t.user_attrs["config"] for t in trials if t.user_attrs["data_seed"] == 46) == sorted(labels)
    assert summarize_confirmation(url, "seed-mlp")["seeds"] == [43, 44, 45, 46]
    assert _fingerprint(url) == before


def test_summary_is_none_without_a_confirmation(study_dir, tmp_path):
    assert summarize_confirmation(f"sqlite:///{study_dir / 'study.db'}", "seed-mlp") is None
    missing = tmp_path / "missing.db"
    assert summarize_confirmation(f"sqlite:///{missing}", "seed-mlp") is None
    assert not missing.exists()


# -- interrupted and resumed --------------------------------------------------------------------


def test_sigint_keeps_finished_runs_and_a_rerun_completes_them(study_dir):
    db = study_dir / "study.db"
    url = f"sqlite:///{db}"
    proc = subprocess.Popen(
        # 3 configs x 20 seeds: ~6 s of runs, so SIGINT after the first two always lands mid-way.
        [sys.executable, "-m", "search.confirm", "--top", "2", "--seeds", "20", "--quiet"],
        cwd=study_dir, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with sqlite3.connect(db, timeout=5) as c:
                query = "SELECT count(*) FROM trials JOIN studies USING (study_id) WHERE study_name = ?"
                stored = c.execute(query, (SIBLING,)).fetchone()[0]
        except sqlite3.OperationalError:
            stored = 0
        if stored >= 2:
            break
        time.sleep(0.05)
    assert stored >= 2, "no run was stored"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err and "Traceback" not in err
    trials = _trials(url, SIBLING)
    assert 2 <= len(trials) < 60
    assert all(t.state == TrialState.COMPLETE for t in trials)  # Nothing RUNNING.

    resumed = run_confirm(["--top", "2", "--seeds", "20", "--quiet"], study_dir)
    assert resumed.returncode == 0, resumed.stderr
    trials = _trials(url, SIBLING)
    pairs = [(t.user_attrs["config"], t.user_attrs["data_seed"]) for t in trials if t.user_attrs.get("check") != "corner"]
    assert len(pairs) == 60 == len(set(pairs))
    points = [tuple(sorted(t.user_attrs["point"].items())) for t in trials if t.user_attrs.get("check") == "corner"]
    assert points and len(points) == len(set(points))  # a resumed check never trains a corner twice


# -- PostgreSQL, with a password that is never printed ----------------------------------------


def test_postgres_confirmation_masks_the_password(postgres_url, tmp_path):
    url = postgres_url.replace("postgres@", "postgres:hunter2@")
    # A space whose range excludes the default's init_scale (2^16): the default is still run,
    # with its stored distribution widened to contain it.
    (tmp_path / "high.toml").write_text("[space.init_scale]\nlow = 1048576.0\nhigh = 1e9\n")
    proc = run_cli(["--trials", "6", "--storage", url, "--config", "high.toml", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    before = _fingerprint(url)

    proc = run_confirm(["--storage", url, "--top", "1", "--seeds", "2", "--json", "c.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stdout, proc.stderr, (tmp_path / "c.json").read_text()):
        assert "hunter2" not in text
    assert "postgres:***@" in proc.stdout
    assert "outside the study's search space" in proc.stderr
    assert _fingerprint(url) == before

    trials = _trials(url, SIBLING)
    # best-1, the recommendation (the default has not run in the search, so it is not kept), the default.
    configs = {t.user_attrs["config"] for t in trials}
    assert len(trials) == 2 * len(configs) and len(configs) in (2, 3)
    assert len(configs) == 2 or any(c.startswith("recommended (#") for c in configs)
    default = [t for t in trials if t.user_attrs["config"] == DEFAULT_LABEL]
    assert {t.user_attrs["data_seed"] for t in default} == {43, 44}
    assert all(t.params["init_scale"] == 2.0**16 for t in default)
    data = summarize_confirmation(url, "seed-mlp")
    json.dumps(data, allow_nan=False)
    assert [c["n"] for c in data["configs"]] == [2] * len(configs)
    assert data["comparison"]["test"].startswith(("paired t-test over 2 seeds", "none:"))



# -- bad input: one line, exit 2, nothing written -----------------------------------------------


def _add_studies(db: pathlib.Path) -> None:
    """A study with no trials, and one not made by search.optimize, next to seed-mlp."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    empty = optuna.create_study(storage=storage, study_name="empty")
    empty.set_user_attr("task", "seed-mlp")
    optuna.create_study(storage=storage, study_name="foreign").add_trial(
        optuna.trial.create_trial(value=1.0)
    )
    storage.engine.dispose()  # The last connection: SQLite removes the -wal and -shm files.


@pytest.mark.parametrize(
    "args, message",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--top", "many"], "invalid int value"),
        (["--top", "0"], "--top must be >= 1"),
        (["--seeds", "1"], "--seeds must be >= 2"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--storage", "sqlite:///missing.db"], "missing.db does not exist"),
        (["--storage", "sqlite:///not-a-db.txt"], "not-a-db.txt is not a SQLite database"),
        (["--storage", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"], "cannot open storage"),
        (["--study-name", "nope"], "no study 'nope'"),
        ([], "holds 3 studies; choose one with --study-name"),
        (["--study-name", "empty"], "study 'empty' has no COMPLETE trials"),
        (["--study-name", "foreign"], "was not created by search.optimize"),
        (["--json", "no/such/dir/out.json"], "does not exist or is not writable"),
        (["--json", "."], "--json .: is a directory"),
        (["--json", "/proc/c.json"], "--json /proc/c.json: cannot be created"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(study_dir, monkeypatch, capsys, args, message):
    monkeypatch.chdir(study_dir)
    _add_studies(study_dir / "study.db")
    (study_dir / "not-a-db.txt").write_text("hello")
    before = _snapshot(study_dir)
    # The storage holds three studies: name the search one unless the case is about the name.
    extra = [] if not args or "--study-name" in args else ["--study-name", "seed-mlp"]
    assert main(args + extra + ["--quiet"]) == 2
    out, err = capsys.readouterr()
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("search.confirm: error: ")
    assert "hunter2" not in err + out and "Traceback" not in err
    assert _snapshot(study_dir) == before
    assert SIBLING not in optuna.study.get_all_study_names(f"sqlite:///{study_dir / 'study.db'}")


def test_cuda_asked_but_absent_is_bad_input(study_dir, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # Runs on GPU hosts too.
    monkeypatch.chdir(study_dir)
    before = _snapshot(study_dir)
    assert main(["--device", "cuda", "--quiet"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert _snapshot(study_dir) == before


def test_argparse_errors_in_a_real_process_exit_2_without_traceback(tmp_path):
    proc = run_confirm(["--seeds", "x"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("search.confirm: error: ")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_empty_postgres_database_is_left_empty(postgres_url, capsys):
    assert main(["--storage", postgres_url, "--quiet"]) == 2
    assert "holds no Optuna studies" in capsys.readouterr().err
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as c:
            assert sqlalchemy.inspect(c).get_table_names() == []
    finally:
        engine.dispose()


# -- the paired test ---------------------------------------------------------------------------


def test_paired_test_matches_scipy_and_handles_ties():
    best = [0.40, 0.41, 0.43, 0.39, 0.42]
    default = [0.42, 0.43, 0.44, 0.41, 0.45]
    t, p, test = paired_test(best, default)
    expected = stats.ttest_rel(best, default)
    assert (t, p) == pytest.approx((expected.statistic, expected.pvalue)) and p < 0.05
    assert test.startswith("paired t-test over 5 seeds, two-sided")
    # Two-sided: the default being better is significant too, with the same p.
    assert paired_test(default, best)[1] == pytest.approx(p) and paired_test(default, best)[0] == pytest.approx(-t)
    noisy = [0.43, 0.40, 0.46, 0.38, 0.45]
    assert paired_test(noisy, default)[1] > 0.05
    t, p, test = paired_test(default, default)
    assert math.isnan(t) and p == 1.0 and "tie" in test
    t, p, _ = paired_test([0.4], [0.5])
    assert math.isnan(t) and math.isnan(p)


def test_the_recommendation_is_confirmed_too_unless_it_is_the_default():
    from test_analysis import _line_rows, _study

    from search.core import DEFAULTS
    from search.results import recommended_candidate

    settings = DEFAULTS
    rec = recommended_candidate(_study(_line_rows()), settings)
    assert rec is not None and rec.label == "recommended (#5)"
    assert rec.params == {"init_scale": 2.0**5, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    chosen, _ = select_candidates(_study(_line_rows()), settings, top=12)  # #5 is among the top 12 already
    assert not any(c.label.startswith("recommended") for c in chosen) and "best-12 (#5)" not in chosen
    chosen, _ = select_candidates(_study(_line_rows()), settings, top=1)
    assert [c.label for c in chosen] == ["best-1 (#11)", "recommended (#5)", DEFAULT_LABEL]
    assert recommended_candidate(_study(_line_rows(default_exp=16)), settings) is None  # keep the default


# -- ranges that are safe together, against the plain loop ----------------------------------------


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> pathlib.Path:
    """README's default run (100 seed-mlp trials), confirmed with search.confirm's defaults."""
    directory = real_study(tmp_path_factory, "default-run", 100)
    proc = run_confirm(["--quiet"], directory)
    assert proc.returncode == 0, proc.stderr
    return directory


def test_default_run_confirmed_is_keep_the_default_or_not_worse(default_run):
    """The issue's bar: after confirmation, a default run either keeps the default or recommends a
    setting that is not worse than the default on new seeds."""
    from search.results import recommend
    from search.study import settings_of

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
    from search.study import settings_of
    from search.tasks.seed_mlp import build

    from plain_loop import plain_fp32_zero_fraction, plain_run

    url = f"sqlite:///{default_run / 'study.db'}"
    search = optuna.load_study(storage=url, study_name="seed-mlp")
    rec = recommend(search.get_trials(), settings_of(search).space, confirmation=summarize_confirmation(url, "seed-mlp"))
    assert rec.together_check == "checked", rec.text
    problem = build(42)
    zeros = plain_fp32_zero_fraction(problem, 30)
    order = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")

    def plain(point: dict) -> str:
        return plain_run(problem, *(point[p] for p in order[:3]), int(round(point["growth_interval"])), 30, fp32_zeros=zeros).failure

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


def test_confirm_trains_the_study_steps_and_says_so(tmp_path):
    """A study run with --steps: confirmation runs train that many steps (checked against the plain loop on the
    new seed) and its header says steps, not the epochs that --steps overrode."""
    from search.tasks import build_problem, resolve_task

    from plain_loop import plain_run

    task = "deep-mlp-sum"
    made = run_cli(["--task", task, "--steps", "23", "--trials", "5", "--quiet"], tmp_path)
    assert made.returncode == 0, made.stderr
    proc = run_confirm(["--study-name", task, "--top", "1", "--seeds", "2", "--no-corners"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "23 optimizer steps" in proc.stdout and "epochs" not in proc.stdout.splitlines()[1]
    runs = _trials(f"sqlite:///{tmp_path / 'study.db'}", f"{task}.confirm")
    default = [t for t in runs if t.user_attrs["config"] == DEFAULT_LABEL and t.user_attrs["data_seed"] == 43]
    assert len(default) == 1
    plain = plain_run(build_problem(resolve_task(task), task, 43), 2.0**16, 2.0, 0.5, 2000, 23)
    attrs = default[0].user_attrs
    assert len(attrs["loss_curve"]) == 23 == len(plain.losses)
    assert attrs["skipped_steps"] == plain.skipped
    assert attrs["eval_loss"] == pytest.approx(plain.eval_loss, rel=1e-6)
