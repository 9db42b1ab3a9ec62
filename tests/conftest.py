"""Shared fixtures: CLI runners, throwaway PostgreSQL/MariaDB databases, test tasks."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import uuid

import optuna
import pytest
import sqlalchemy

TESTS = pathlib.Path(__file__).parent
ROOT = TESTS.parent
POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MYSQL_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/test"


def cli_env() -> dict[str, str]:
    """Environment for CLI subprocesses: test tasks importable, one torch thread (fast start)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_cli(
    args: list[str], cwd: pathlib.Path, timeout: float = 240, module: str = "search.optimize"
) -> subprocess.CompletedProcess:
    """Runs ``python -m MODULE ARGS`` in ``cwd`` and captures its output."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def real_study(factory: pytest.TempPathFactory, name: str, trials: int) -> pathlib.Path:
    """A directory holding ``study.db``: a real seed-mlp search of ``trials`` trials (5 baselines first)."""
    directory = factory.mktemp(name)
    proc = run_cli(["--trials", str(trials), "--quiet"], directory)
    assert proc.returncode == 0, proc.stderr
    return directory


def start_cli(args: list[str], cwd: pathlib.Path) -> subprocess.Popen:
    """Starts ``python -m search.optimize ARGS`` in ``cwd`` in the background, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "search.optimize", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def load(cwd: pathlib.Path, name: str = "seed-mlp", file: str = "study.db") -> optuna.Study:
    """Loads a study written by the CLI in ``cwd``."""
    return optuna.load_study(storage=f"sqlite:///{cwd / file}", study_name=name)


@pytest.fixture(autouse=True)
def _test_tasks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))


def _throwaway_database(admin_url: str, kind: str):
    name = f"search_test_{uuid.uuid4().hex[:10]}"
    try:
        engine = sqlalchemy.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.exec_driver_sql(f"CREATE DATABASE {name}")
    except sqlalchemy.exc.OperationalError as e:
        pytest.fail(f"{kind} at {admin_url} is required for this test and is not reachable: {e}")
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with engine.connect() as c:
        if kind == "PostgreSQL":
            c.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        else:
            c.exec_driver_sql(f"DROP DATABASE {name}")
    engine.dispose()


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database (the machine's server; fails loudly if it is down)."""
    yield from _throwaway_database(POSTGRES_ADMIN, "PostgreSQL")


@pytest.fixture
def mysql_url():
    """A fresh MariaDB/MySQL database (the machine's server; fails loudly if it is down)."""
    yield from _throwaway_database(MYSQL_ADMIN, "MariaDB")
