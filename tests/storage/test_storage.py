import os
import pathlib
import shutil
import sqlite3

import optuna
import pytest
from optuna.trial import TrialState

from search.optimize import main
from search.storage import StorageError, mask_url, open_storage, redact

from conftest import FORK, forked_together, real_study, run_cli

# What a storage holds and says is checked here, not a trial's numbers: 3 steps a trial, not 30.
SHORT = ["--epochs", "3"]


def test_mask_url_hides_passwords():
    assert mask_url("postgresql+psycopg://me:s3cret@db:5432/x") == "postgresql+psycopg://me:***@db:5432/x"
    assert mask_url("sqlite:///study.db") == "sqlite:///study.db"
    assert "s3cret" not in redact("could not log in as me with s3cret", "mysql+pymysql://me:s3cret@h/x")
    # libpq and the MySQL drivers take a password in the query string too.
    assert (
        mask_url("postgresql+psycopg://me@db/x?password=hunter99&sslmode=require")
        == "postgresql+psycopg://me@db/x?password=***&sslmode=require"
    )
    assert "abc" not in mask_url("mysql+pymysql://me@h/x?passwd=abc&charset=utf8")
    query = "postgresql+psycopg://me@db/x?password=hunter99"
    assert (
        redact(f"cannot open {query}: hunter99 refused", query)
        == "cannot open postgresql+psycopg://me@db/x?password=***: *** refused"
    )


def test_redact_leaves_the_masked_url_readable():
    # A password that is also a word of the URL: the masked URL stays as mask_url writes it.
    url = "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/x"
    text = redact(f"storage {url} failed: connection refused", url)
    assert text == "storage postgresql+psycopg://postgres:***@127.0.0.1:5432/x failed: connection refused"
    # Another, longer value that merely contains the password is not cut into pieces.
    url = "postgresql+psycopg://me:secret@h/x"
    assert redact("the secret2 file; secret", url) == "the secret2 file; ***"


def test_sqlite_is_wal_with_a_busy_timeout(tmp_path):
    proc = run_cli(["--trials", "5", *SHORT, "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    with storage.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10000
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    storage.engine.dispose()


def test_unusable_sqlite_paths_are_refused_without_creating_anything(tmp_path):
    (tmp_path / "text.db").write_text("not sqlite")
    with pytest.raises(StorageError, match="is not a SQLite database"):
        open_storage(f"sqlite:///{tmp_path / 'text.db'}")
    with pytest.raises(StorageError, match="does not exist"):
        open_storage(f"sqlite:///{tmp_path / 'missing' / 's.db'}")
    assert sorted(os.listdir(tmp_path)) == ["text.db"]


@pytest.mark.parametrize("fixture", ["postgres_url", "mysql_url"])
def test_the_command_runs_on_a_database_server(request, tmp_path, fixture):
    url = request.getfixturevalue(fixture)
    proc = run_cli(["--trials", "8", *SHORT, "--storage", url], tmp_path)
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(storage=url, study_name="seed-mlp")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 8
    assert sorted(t.user_attrs["baseline"] for t in done if "baseline" in t.user_attrs) == [
        "seed-1",
        "seed-2",
        "seed-3",
        "seed-4",
        "seed-5",
    ]
    assert not os.path.exists(tmp_path / "study.db")
    again = run_cli(["--trials", "10", *SHORT, "--storage", url, "--quiet"], tmp_path)
    assert again.returncode == 0 and len(optuna.load_study(storage=url, study_name="seed-mlp").trials) == 10


def test_password_never_appears_in_output(postgres_url, tmp_path):
    # A wrong password on a trust-auth server still connects; a wrong port shows the error path.
    url = postgres_url.replace("postgres@", "postgres:hunter2@")
    ok = run_cli(["--trials", "5", *SHORT, "--storage", url], tmp_path)
    bad = run_cli(["--trials", "5", *SHORT, "--storage", url.replace(":5432", ":1")], tmp_path)
    assert ok.returncode == 0 and bad.returncode == 2
    for proc in (ok, bad):
        assert "hunter2" not in proc.stdout + proc.stderr
    assert "postgres:***@" in bad.stderr
    # The same password in the query string (libpq reads it there): masked in output and in the report.
    query = postgres_url + "?password=hunter3"
    ok = run_cli(["--trials", "5", *SHORT, "--storage", query], tmp_path)  # Finished already: no training.
    bad = run_cli(["--trials", "5", *SHORT, "--storage", query.replace(":5432", ":1")], tmp_path)
    report = run_cli(["--storage", query, "--out", "r.html"], tmp_path, module="search.report")
    assert ok.returncode == 0 and bad.returncode == 2 and report.returncode == 0, (
        ok.stderr + bad.stderr + report.stderr
    )
    for proc in (ok, bad, report):
        assert "hunter3" not in proc.stdout + proc.stderr
    assert "?password=***" in bad.stderr and "hunter3" not in (tmp_path / "r.html").read_text()


def _first_open(url: str, go) -> None:
    """One process: once the others are ready too, opens the storage, which creates Optuna's schema."""
    go.wait()
    open_storage(url, 60).engine.dispose()


def test_concurrent_first_opens_of_a_new_database(tmp_path):
    """Several processes creating Optuna's schema in one new SQLite file at once all succeed.

    Forked from this one (a fresh interpreter each only added seconds of imports): four real processes with
    their own connections, held at a barrier so that they open the file at the same moment.
    """
    url = f"sqlite:///{tmp_path / 'new.db'}"
    go = FORK.Barrier(4, timeout=60)
    assert forked_together(_first_open, [(url, go)] * 4) == [0, 0, 0, 0]


def test_opening_a_storage_keeps_the_locks_of_connections_already_open(tmp_path):
    """Checking a SQLite file must not open()/close() it: on Linux, closing any descriptor of a
    file drops every POSIX lock the process holds on it. A second process would then think our
    open connection gone and remove the WAL files under it."""
    import sqlite3
    import subprocess
    import sys

    path = tmp_path / "s.db"
    ours = sqlite3.connect(path)
    ours.execute("PRAGMA journal_mode = WAL")
    ours.execute("CREATE TABLE t (x)")
    ours.commit()
    ours.execute("SELECT * FROM t").fetchall()  # Holds its shared lock on the WAL index.
    open_storage(f"sqlite:///{path}").engine.dispose()
    writer = (
        f"import sqlite3; c = sqlite3.connect({str(path)!r}); c.execute('INSERT INTO t VALUES (1)');"
        " c.commit(); c.close()"
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60)
    assert (tmp_path / "s.db-wal").exists(), "the other process saw no lock of ours and removed the WAL"
    assert ours.execute("SELECT count(*) FROM t").fetchone() == (1,)
    ours.close()


@pytest.fixture(scope="module")
def wal_study(tmp_path_factory) -> pathlib.Path:
    """A real 6-trial study.db (WAL mode, as every run leaves it); tests damage copies of it."""
    return real_study(tmp_path_factory, "wal_study", 6, *SHORT) / "study.db"


def run_on_copy(source: pathlib.Path, directory: pathlib.Path, capsys, damage) -> tuple[int, str, bytes]:
    """``search.optimize`` on a damaged copy of ``source``: exit code, stderr, the file's bytes before."""
    shutil.copy(source, directory / "study.db")
    damage(directory / "study.db")
    before = (directory / "study.db").read_bytes()
    capsys.readouterr()
    code = main(["--storage", f"sqlite:///{directory / 'study.db'}", "--trials", "6", *SHORT, "--quiet"])
    return code, capsys.readouterr().err, before


@pytest.mark.parametrize("keep", [0.5, 0.99])  # 0.99: the last page cut short, the schema still readable
def test_a_truncated_study_db_is_refused_and_left_untouched(wal_study, tmp_path, capsys, keep):
    def truncate(path: pathlib.Path) -> None:
        size = path.stat().st_size
        os.truncate(path, int(size * keep) // 4096 * 4096 + 100)

    code, err, before = run_on_copy(wal_study, tmp_path, capsys, truncate)
    assert code == 2 and err.count("\n") == 1 and "is damaged" in err, err
    # No -wal/-shm beside it: README promises bad input leaves the storage untouched.
    assert sorted(os.listdir(tmp_path)) == ["study.db"] and (tmp_path / "study.db").read_bytes() == before


def test_a_bogus_schema_revision_is_not_reported_as_an_old_optuna(wal_study, tmp_path, capsys):
    def bogus_revision(path: pathlib.Path) -> None:
        with sqlite3.connect(path) as c:
            c.execute("UPDATE alembic_version SET version_num = 'bogus'")
        c.close()

    code, err, before = run_on_copy(wal_study, tmp_path, capsys, bogus_revision)
    assert code == 2 and err.count("\n") == 1, err
    assert "schema revision 'bogus' in its alembic_version table is not one Optuna writes" in err
    assert "pip install" not in err and "updating optuna will not help" in err
    assert sorted(os.listdir(tmp_path)) == ["study.db"] and (tmp_path / "study.db").read_bytes() == before
