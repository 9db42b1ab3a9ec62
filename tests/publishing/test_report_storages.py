"""python -m search.report on other storages and on studies in other states: PostgreSQL and MariaDB,
too few trials, RUNNING and WAITING trials, a study that is still running."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import sqlite3
import time

import optuna
import pytest

from search.publishing.report import SECTION_TITLES, build_report, load_snapshot, render_html
from search.report import main

from conftest import start_cli

NAME = "seed-mlp"


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


def _copy(src: pathlib.Path, dst: pathlib.Path) -> str:
    """Copies a finished SQLite study file (with its WAL, if any); returns the copy's URL."""
    for suffix in ("", "-wal", "-shm"):
        if pathlib.Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return _sqlite(dst)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    """The real seed-mlp study the test_report_* files share (test_report_sections.report_study)."""
    from test_report_sections import report_study

    return report_study(tmp_path_factory)


# -- storages, running studies, small studies ----------------------------------------------------


@pytest.mark.parametrize("server", ["postgres_url", "mysql_url"])
def test_report_on_postgresql_and_mariadb(server, request, study_dir, tmp_path):
    from test_report_sections import FIGURES, TRIALS

    url = request.getfixturevalue(server)
    # The real study, moved there as search.transfer would (every trial, attr and setting).
    optuna.copy_study(from_study_name=NAME, from_storage=_sqlite(study_dir / "study.db"), to_storage=url)
    assert main(["--storage", url, "--out", str(tmp_path / "r.json"), "--format", "json"]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["n_complete"] == TRIALS and len(data["history"]) == TRIALS
    local = json.loads(json.dumps(build_report(load_snapshot(_sqlite(study_dir / "study.db"))).data))
    for key in ("history", "importances", "safe_ranges", "recommendation", "baselines", "skipped_steps"):
        assert data[key] == local[key], key
    assert sorted(data["baselines"]) == [f"seed-{i}" for i in range(1, 6)]
    assert all(s["plot"] for k, s in data["sections"].items() if k in FIGURES)
    assert main(["--storage", url, "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert page.count('class="plotly-graph-div"') == len(FIGURES)


def test_too_few_trials_show_messages_instead_of_plots(study_dir, tmp_path):
    # One finished trial (the real seed-1 run); the other four baselines WAITING, as in a study
    # that has just started.
    real = optuna.load_study(storage=_sqlite(study_dir / "study.db"), study_name=NAME)
    url = _sqlite(tmp_path / "study.db")
    small = optuna.create_study(storage=url, study_name=NAME)
    for key, value in real.user_attrs.items():
        small.set_user_attr(key, value)
    small.add_trial(real.trials[0])
    for t in real.trials[1:5]:
        small.enqueue_trial(t.params, user_attrs={"baseline": t.user_attrs["baseline"]})
    assert main(["--storage", url, "--out", str(tmp_path / "r.html")]) == 0
    report = build_report(load_snapshot(url))
    data = report.data
    assert data["n_complete"] == 1 and data["ignored"] == {"RUNNING": 0, "WAITING": 4}
    assert set(report.figures) == {"history", "slices", "curves", "failures", "skipped"}
    for key in ("importances", "contour", "parallel"):
        assert report.section(key).message.startswith("Not enough trials for this plot"), key
    assert "at least 2 complete trials; the study has 1" in report.section("importances").message
    assert "at least 10 complete trials" in report.section("contour").message
    assert "seed-2, seed-3, seed-4, seed-5" in report.section("baselines").message
    assert data["recommendation"]["source_trial"] == 0 and data["recommendation"]["neighbours"] == [0]
    page = (tmp_path / "r.html").read_text()
    assert page.count('<div class="message" role="note">Not enough trials for this plot') == 3
    assert "4 waiting" in page

    # No complete trial at all: every plot is a message, the page still renders.
    empty = optuna.create_study(storage=_sqlite(tmp_path / "empty.db"), study_name="empty")
    for key, value in real.user_attrs.items():
        empty.set_user_attr(key, value)
    empty.enqueue_trial(
        {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    )
    report = build_report(load_snapshot(_sqlite(tmp_path / "empty.db")))
    assert report.figures == {}
    assert all(s.message for s in report.sections)
    page = render_html(report)
    assert "plotly.js v" not in page and page.count('class="message"') == len(SECTION_TITLES)


def test_running_and_waiting_trials_are_ignored(study_dir, tmp_path):
    from test_report_sections import TRIALS

    url = _copy(study_dir / "study.db", tmp_path / "copy.db")
    before = build_report(load_snapshot(url)).data
    study = optuna.load_study(storage=url, study_name=NAME)
    study.enqueue_trial(
        {"init_scale": 2.0**30, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2}
    )
    running = study.ask()  # Claims the queued trial: RUNNING.
    study.enqueue_trial(
        {"init_scale": 2.0**-20, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2}
    )
    assert running.number == TRIALS
    after = build_report(load_snapshot(url))
    assert after.data["ignored"] == {"RUNNING": 1, "WAITING": 1}
    for key in ("history", "safe_ranges", "recommendation", "skipped_steps", "importances", "baselines"):
        assert after.data[key] == before[key], key
    assert "1 running, 1 waiting" in render_html(after)


def _trials_in(db: pathlib.Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
        return c.execute("SELECT count(*) FROM trials").fetchone()[0]


def test_report_while_the_study_is_still_running(study_dir, tmp_path):
    from test_report_sections import TRIALS

    _copy(study_dir / "study.db", tmp_path / "study.db")
    process = start_cli(["--trials", str(TRIALS + 8), "--quiet"], tmp_path)  # a real process: the writer
    seen, while_running = [], 0
    try:
        # The reports begin once the run writes (its first new trial): made while the new process still
        # imports torch, they would see nothing new and only slow its start on a busy machine.
        deadline = time.monotonic() + 120
        while (
            process.poll() is None
            and _trials_in(tmp_path / "study.db") == TRIALS
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        for i in range(20):
            alive = process.poll() is None
            rc = main(["--format", "json", "--out", str(tmp_path / f"r{i}.json")])
            while_running += alive and process.poll() is None
            assert rc == 0
            data = json.loads((tmp_path / f"r{i}.json").read_text())
            assert data["n_complete"] == len(data["history"])
            seen.append(data["n_complete"])
            if process.poll() is not None and len(seen) >= 2:
                break
    finally:
        _out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert while_running >= 1  # At least one report was made from start to end during the run.
    assert seen == sorted(seen) and seen[0] >= TRIALS
    assert main(["--format", "json", "--out", str(tmp_path / "final.json")]) == 0
    assert json.loads((tmp_path / "final.json").read_text())["n_complete"] == TRIALS + 8


@pytest.fixture(autouse=True)
def _in_tmp(request, tmp_path, monkeypatch):
    # main() defaults to ./study.db and ./report.html: run each test in its own directory.
    monkeypatch.chdir(tmp_path)
