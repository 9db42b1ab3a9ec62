"""search.confirm's runs on real studies: the whole cycle on SQLite, an interrupt and its resume,
PostgreSQL with a password, a study trained by --steps.

Also the real seed-mlp studies that other test files share (:func:`seed_mlp_study`).
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import time

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState
from scipy import stats

from search.results import DEFAULT_LABEL, summarize_confirmation

from conftest import built_once, run_cli, start_cli

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


def copy_study_file(src: pathlib.Path, dst: pathlib.Path) -> None:
    """Copies a SQLite study file with its -wal/-shm, where there are any."""
    for suffix in ("", "-wal", "-shm"):
        if pathlib.Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")


def seed_mlp_study(factory: pytest.TempPathFactory, confirmed: bool = False) -> pathlib.Path:
    """A directory whose study.db holds a real 12-trial seed-mlp search (5 baselines + 7 TPE trials) and its
    best.json (--best-out); with ``confirmed``, a copy of it confirmed by ``search.confirm --top 1 --seeds 2``
    (corners included).

    Built once per test session (conftest.built_once), shared by the test files that need such a study
    (test_confirm_*, test_optimize, test_dashboard, test_transfer_confirm): only read it; a test that writes
    works on a copy.
    """
    if confirmed:

        def confirm(directory: pathlib.Path) -> None:
            copy_study_file(seed_mlp_study(factory) / "study.db", directory / "study.db")
            proc = run_confirm(["--top", "1", "--seeds", "2", "--quiet"], directory)
            assert proc.returncode == 0, proc.stderr

        return built_once(factory, "seed-mlp-confirmed", confirm)

    def search(directory: pathlib.Path) -> None:
        proc = run_cli(["--trials", "12", "--quiet", "--best-out", "best.json"], directory)
        assert proc.returncode == 0, proc.stderr

    return built_once(factory, "seed-mlp-searched", search)


@pytest.fixture
def study_dir(tmp_path_factory, tmp_path) -> pathlib.Path:
    """A private copy of the shared 12-trial study."""
    copy_study_file(seed_mlp_study(tmp_path_factory) / "study.db", tmp_path / "study.db")
    return tmp_path


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
                "init_scale": 2.0**16,
                "growth_factor": 2.0,
                "backoff_factor": 0.5,
                "growth_interval": 2000,
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
    keys = {
        "best_label",
        "default_label",
        "mean_diff",
        "t",
        "p",
        "better_beyond_noise",
        "worse_beyond_noise",
        "test",
    }
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
    # A real process: the signal is the point. 3 configs x 3 seeds, then the corners of this study's boxes
    # (32): some 40 runs, 0.1-0.5 s each, so SIGINT after the first two always lands mid-way (the rerun below
    # shows it had runs left to do).
    proc = start_cli(["--top", "2", "--seeds", "3", "--quiet"], study_dir, module="search.confirm")
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
    interrupted = _trials(url, SIBLING)
    assert len(interrupted) >= 2
    assert all(t.state == TrialState.COMPLETE for t in interrupted)  # Nothing RUNNING.

    resumed = run_confirm(["--top", "2", "--seeds", "3", "--quiet"], study_dir)
    assert resumed.returncode == 0, resumed.stderr
    trials = _trials(url, SIBLING)
    assert len(interrupted) < len(trials)  # Interrupted mid-way: the rerun completed what was left.
    kept = [(t.number, t.value, t.user_attrs) for t in interrupted]
    assert [(t.number, t.value, t.user_attrs) for t in trials[: len(interrupted)]] == kept  # not run again
    pairs = [
        (t.user_attrs["config"], t.user_attrs["data_seed"])
        for t in trials
        if t.user_attrs.get("check") != "corner"
    ]
    assert len(pairs) == 9 == len(set(pairs))
    points = [
        tuple(sorted(t.user_attrs["point"].items())) for t in trials if t.user_attrs.get("check") == "corner"
    ]
    assert points and len(points) == len(set(points))  # a resumed check never trains a corner twice


# -- PostgreSQL, with a password that is never printed ----------------------------------------


def test_postgres_confirmation_masks_the_password(postgres_url, tmp_path):
    url = postgres_url.replace("postgres@", "postgres:hunter2@")
    # A space whose range excludes the default's init_scale (2^16): the default is still run,
    # with its stored distribution widened to contain it.
    (tmp_path / "high.toml").write_text("[space.init_scale]\nlow = 1048576.0\nhigh = 1e9\n")
    # 3 steps a trial: the password and the default's widened range are checked, not what 30 steps learn.
    search = ["--trials", "6", "--epochs", "3", "--storage", url, "--config", "high.toml", "--quiet"]
    proc = run_cli(search, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "baseline seed-1 (PyTorch's default): init_scale outside the search space" in proc.stderr
    search_default = [t for t in _trials(url, "seed-mlp") if t.user_attrs.get("baseline") == "seed-1"]
    assert len(search_default) == 1 and search_default[0].params["init_scale"] == 2.0**16
    assert search_default[0].distributions["init_scale"].low == 2.0**16  # widened to hold it
    before = _fingerprint(url)

    proc = run_confirm(
        ["--storage", url, "--top", "1", "--seeds", "2", "--json", "c.json", "--no-corners"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stdout, proc.stderr, (tmp_path / "c.json").read_text()):
        assert "hunter2" not in text
    assert "postgres:***@" in proc.stdout
    assert "outside the study's search space" in proc.stderr
    assert _fingerprint(url) == before

    trials = _trials(url, SIBLING)
    # best-1, the recommendation when it is not the default, the default.
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


# -- a study trained by --steps ------------------------------------------------------------------


def test_confirm_trains_the_study_steps_and_says_so(tmp_path):
    """A study run with --steps: confirmation runs train that many steps (checked against the plain loop on
    the new seed) and its header says steps, not the epochs that --steps overrode."""
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


def test_the_headers_of_a_loader_task_study_say_its_steps(tmp_path):
    """A loader task run without --steps records 0 epochs and 0 steps (its own default is only known once
    built): search.confirm's and search.report's headers say the steps its trials trained, not "0 epochs"."""
    from tasks_for_tests import LOADER_STEPS

    task, name = "tasks_for_tests:seed_loader", "tasks_for_tests-seed_loader"
    made = run_cli(["--task", task, "--trials", "5", "--quiet"], tmp_path)
    assert made.returncode == 0, made.stderr
    trials = _trials(f"sqlite:///{tmp_path / 'study.db'}", name)
    assert {len(t.user_attrs["loss_curve"]) for t in trials} == {
        LOADER_STEPS
    }  # what the trials really trained
    proc = run_confirm(
        ["--study-name", name, "--top", "1", "--seeds", "2", "--no-corners", "--quiet"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[1]
    assert f", {LOADER_STEPS} optimizer steps," in header and "epochs" not in header, header
    for fmt in ("html", "json"):
        out = tmp_path / f"report.{fmt}"
        report = run_cli(
            ["--study-name", name, "--format", fmt, "--out", str(out)], tmp_path, module="search.report"
        )
        assert report.returncode == 0, report.stderr
        text = out.read_text()
        if fmt == "json":
            assert json.loads(text)["settings"]["steps_per_trial"] == LOADER_STEPS
        else:
            assert f"task {task}, {LOADER_STEPS} steps a trial," in text and "0 epochs" not in text
