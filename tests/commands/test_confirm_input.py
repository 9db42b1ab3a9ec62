"""search.confirm on bad input: one line on stderr, exit 2, nothing written."""

from __future__ import annotations

import pathlib
import shutil

import optuna
import pytest
import sqlalchemy
import torch

from search.confirm import main

from conftest import run_cli

SIBLING = "seed-mlp.confirm"


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory) -> pathlib.Path:
    """The shared 12-trial study with two more studies beside it and a file that is not a database."""
    from test_confirm_runs import copy_study_file, seed_mlp_study

    directory = tmp_path_factory.mktemp("bad-inputs")
    copy_study_file(seed_mlp_study(tmp_path_factory) / "study.db", directory / "study.db")
    _add_studies(directory / "study.db")
    (directory / "not-a-db.txt").write_text("hello")
    return directory


@pytest.fixture
def study_dir(bad_inputs, tmp_path) -> pathlib.Path:
    """A private copy of ``bad_inputs``: a case that wrongly writes cannot change the next one's input."""
    shutil.copytree(bad_inputs, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _add_studies(db: pathlib.Path) -> None:
    """A study with no trials, and one not made by search.optimize, next to seed-mlp."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    empty = optuna.create_study(storage=storage, study_name="empty")
    empty.set_user_attr("task", "seed-mlp")
    optuna.create_study(storage=storage, study_name="foreign").add_trial(optuna.trial.create_trial(value=1.0))
    storage.engine.dispose()  # The last connection: SQLite removes the -wal and -shm files.


@pytest.mark.parametrize(
    "args, message",
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--top", "many"], "invalid int value"),
        (["--top", "0"], "--top must be >= 1"),
        (["--seeds", "1"], "--seeds must be >= 2"),
        (["--threads", "-1"], "--threads must be >= 0"),
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
    proc = run_cli(["--seeds", "x"], tmp_path, module="search.confirm")
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


def test_threads_reach_torch_before_the_task_is_built(study_dir, monkeypatch, capsys):
    """--threads as search.optimize's: set once, before the first run (it also prints the verdict)."""
    import torch

    calls = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    monkeypatch.chdir(study_dir)
    before = torch.get_num_threads()
    try:
        args = [
            "--study-name",
            "seed-mlp",
            "--threads",
            "2",
            "--seeds",
            "2",
            "--top",
            "1",
            "--no-corners",
            "--quiet",
        ]
        assert main(args) == 0
    finally:
        real(
            before
        )  # This process's later tests train with its own thread count (their numbers depend on it).
    assert calls[:1] == [2], calls
