"""python -m search.report on bad input: one line on stderr, exit 2, nothing written."""

from __future__ import annotations

import pathlib

import optuna
import pytest

from search.report import main

from conftest import run_cli


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    """The real seed-mlp study the test_report_* files share (test_report_sections.report_study)."""
    from test_report_sections import report_study

    return report_study(tmp_path_factory)


# -- bad input ------------------------------------------------------------------------------------


def _bad(argv, capsys, tmp_path):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("search.report: error: "), err
    assert "Traceback" not in err
    assert not (tmp_path / "out.html").exists() and not (tmp_path / "report.html").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report-")]
    return lines[0]


def test_bad_input_is_one_line_exit_2_nothing_written(study_dir, tmp_path, capsys):
    good = _sqlite(study_dir / "study.db")
    out = str(tmp_path / "out.html")
    assert "unrecognized arguments: --bogus" in _bad(["--bogus", "--out", out], capsys, tmp_path)
    assert "invalid choice" in _bad(["--format", "pdf", "--out", out], capsys, tmp_path)
    assert "percentage" in _bad(["--tolerance", "-1", "--out", out], capsys, tmp_path)
    # A missing SQLite file is not created.
    line = _bad(["--storage", _sqlite(tmp_path / "nope.db"), "--out", out], capsys, tmp_path)
    assert "does not exist" in line and not (tmp_path / "nope.db").exists()
    # Unreachable server: the password is masked.
    line = _bad(["--storage", "postgresql+psycopg://me:s3cret@127.0.0.1:1/x", "--out", out], capsys, tmp_path)
    assert "s3cret" not in line and "***" in line and "cannot open storage" in line
    assert "no study 'other'" in _bad(
        ["--storage", good, "--study-name", "other", "--out", out], capsys, tmp_path
    )
    # Unwritable --out: a missing directory, a directory.
    assert "does not exist" in _bad(
        ["--storage", good, "--out", str(tmp_path / "no" / "r.html")], capsys, tmp_path
    )
    assert "is a directory" in _bad(["--storage", good, "--out", str(tmp_path)], capsys, tmp_path)
    assert "cannot be created" in _bad(["--storage", good, "--out", "/proc/r.html"], capsys, tmp_path)
    # Several studies and no --study-name; a study search.optimize did not make.
    two = _sqlite(tmp_path / "two.db")
    optuna.create_study(storage=two, study_name="seed-mlp")
    optuna.create_study(storage=two, study_name="second")
    line = _bad(["--storage", two, "--out", out], capsys, tmp_path)
    assert "holds 2 studies; choose one with --study-name: 'second', 'seed-mlp'" in line
    line = _bad(["--storage", two, "--study-name", "second", "--out", out], capsys, tmp_path)
    assert "study 'second' was not created by search.optimize" in line
    # A database without Optuna's tables is not touched.
    import sqlite3

    sqlite3.connect(tmp_path / "plain.db").execute("CREATE TABLE t (x)").connection.commit()
    line = _bad(["--storage", _sqlite(tmp_path / "plain.db"), "--out", out], capsys, tmp_path)
    assert "holds no Optuna studies" in line
    tables = sqlite3.connect(tmp_path / "plain.db").execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("t",)]


def test_bad_input_from_the_command_line(tmp_path):
    result = run_cli(
        ["--storage", "mysql+pymysql://root:hunter2@127.0.0.1:1/x", "--out", "r.html"],
        tmp_path,
        module="search.report",
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "search.report: error: cannot open storage mysql+pymysql://root:***@127.0.0.1:1/x"
    )
    assert len(result.stderr.strip().splitlines()) == 1 and "hunter2" not in result.stderr
    assert result.stdout == "" and not (tmp_path / "r.html").exists()


def test_default_storage_missing_is_not_created(tmp_path, capsys):
    assert main([]) == 2  # ./study.db, ./report.html (the test runs in tmp_path).
    assert "study.db does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(autouse=True)
def _in_tmp(request, tmp_path, monkeypatch):
    # main() defaults to ./study.db and ./report.html: run each test in its own directory.
    monkeypatch.chdir(tmp_path)
