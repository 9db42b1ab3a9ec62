"""python -m search.transfer: complete, verified, resumable copies; bad input writes nothing; an interrupt
removes the partial copy."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import warnings

import optuna
import plotly.graph_objects as go
import pytest
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import TrialState

from search.storage import RUNNING_FAIL_REASON, open_storage, transfer_study
from search.transfer import main

from conftest import run_cli

NAME = "seed-mlp"
BASELINES = {f"seed-{i}" for i in range(1, 6)}
SHORT = ["--epochs", "3"]  # A copy is checked, not what a trial learns: 3 steps a trial.
# Study system attrs keyed by trial id, as optuna-dashboard writes them.
ID_KEY = re.compile(r"^(dashboard:(?:artifacts:)?)(\d+)(:.*)$")


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


def _snapshot(url: str, name: str = NAME) -> dict:
    """Everything of a study, trials by number, trial-id keys rewritten as #number."""
    storage = open_storage(url)
    try:
        study_id = storage.get_study_id_from_name(name)
        trials = sorted(storage.get_all_trials(study_id), key=lambda t: t.number)
        numbers = {t._trial_id: t.number for t in trials}
        system = {}
        for key, value in storage.get_study_system_attrs(study_id).items():
            m = ID_KEY.match(key)
            system[f"{m[1]}#{numbers[int(m[2])]}{m[3]}" if m else key] = value
        return {
            "ids": {t.number: t._trial_id for t in trials},
            "user": storage.get_study_user_attrs(study_id),
            "system": system,
            "trials": {
                t.number: {
                    "state": t.state.name,
                    "params": t.params,
                    "distributions": {k: str(d) for k, d in t.distributions.items()},
                    "values": t.values,
                    "user": t.user_attrs,
                    "system": t.system_attrs,
                    "intermediate": t.intermediate_values,
                }
                for t in trials
            },
        }
    finally:
        storage.remove_session()
        storage.engine.dispose()


def _expected_copy(source: dict) -> dict:
    """The source as a copy must hold it: RUNNING trials are FAIL with the reason."""
    expected = json.loads(json.dumps({k: v for k, v in source.items() if k != "ids"}))
    for trial in expected["trials"].values():
        if trial["state"] == "RUNNING":
            trial["state"] = "FAIL"
            trial["user"]["fail_reason"] = RUNNING_FAIL_REASON
    return expected


def _same_content(copy: dict, source: dict) -> bool:
    content = {k: v for k, v in copy.items() if k != "ids"}
    return json.loads(json.dumps(content)) == _expected_copy(source)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A real study (8 trials by the CLI, 3 steps each) plus what a live, annotated study holds.

    A dashboard note on trial 3 and on the study, a plotly figure, a legacy dashboard artifact
    record keyed by trial id, a RUNNING trial with an intermediate value and an artifact (a
    worker still at work), and a trial failed by a dead worker with the retry Optuna's
    RetryHeartbeatStaleTrialCallback queues for it (WAITING, ``failed_trial`` = its number).
    """
    import optuna_dashboard  # 0.8 s: not at collection, in every runner

    where = tmp_path_factory.mktemp("built")
    proc = run_cli(["--trials", "8", *SHORT, "--pruner", "median", "--quiet"], where)
    assert proc.returncode == 0, proc.stderr
    storage = open_storage(_sqlite(where / "study.db"))
    study = optuna.load_study(storage=storage, study_name=NAME)
    trial3 = study.trials[3]
    optuna_dashboard.save_note(optuna.Trial(study, trial3._trial_id), "trial 3: **why** it won")
    optuna_dashboard.save_note(study, "study note")
    optuna_dashboard.save_plotly_graph_object(study, go.Figure(go.Scatter(x=[1, 2], y=[3, 4])))
    storage.set_study_system_attr(
        study._study_id,
        f"dashboard:artifacts:{trial3._trial_id}:0f0e",
        json.dumps({"artifact_id": "0f0e", "filename": "a.txt", "mimetype": "text/plain", "encoding": None}),
    )
    live = study.ask()  # Before the retry is queued: ask() would claim it.
    live.report(0.25, 1)
    (where / "a.txt").write_text("artifact")
    upload_artifact(
        artifact_store=FileSystemArtifactStore(str(where)),
        file_path=str(where / "a.txt"),
        study_or_trial=live,
    )
    dead = study.trials[6]
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.FAIL,
            params=dead.params,
            distributions=dead.distributions,
            user_attrs={"fail_reason": "worker died"},
        )
    )
    failed = study.trials[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)(study, failed)
    storage.remove_session()
    storage.engine.dispose()
    assert not (where / "study.db-wal").exists()  # Checkpointed: the file alone is the study.
    return where / "study.db"


@pytest.fixture
def source(built: pathlib.Path, tmp_path: pathlib.Path) -> str:
    """A private copy of the built study file, in ``tmp_path/src``."""
    (tmp_path / "src").mkdir()
    shutil.copy(built, tmp_path / "src" / "study.db")
    return _sqlite(tmp_path / "src" / "study.db")


def _states(snapshot: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in snapshot["trials"].values():
        counts[trial["state"]] = counts.get(trial["state"], 0) + 1
    return counts


def test_round_trip_postgres_keeps_everything_and_resumes(source, postgres_url, tmp_path, capsys):
    import optuna_dashboard  # 0.8 s: not at collection, in every runner

    src = _snapshot(source)
    assert _states(src)["RUNNING"] == 1 and _states(src)["WAITING"] == 1
    assert any(t["intermediate"] for t in src["trials"].values())
    # Another study first, so that the copy's trial ids differ from the source's.
    other = optuna.create_study(storage=postgres_url, study_name="other")
    for _ in range(3):
        other.enqueue_trial({})

    report = transfer_study(source, postgres_url)
    running = tuple(n for n, t in src["trials"].items() if t["state"] == "RUNNING")
    assert report.verified and report.running_converted == running
    # A note per trial (note_ver + note_str:0; the run wrote one for each of the 8, trial 3's was
    # then replaced by a person's) and the artifact record keyed by trial 3's id.
    assert report.dashboard_keys_remapped == 2 * 8 + 1
    assert report.states == _states(_expected_copy(src))
    pg = _snapshot(postgres_url)
    assert pg["ids"][3] != src["ids"][3]
    assert _same_content(pg, src)

    final = tmp_path / "final.db"
    assert main(["--from", postgres_url, "--to", _sqlite(final), "--study-name", NAME]) == 0
    out = capsys.readouterr().out
    assert "verified" in out and "running" not in out  # Nothing RUNNING left to convert.
    back = _snapshot(_sqlite(final))
    assert _same_content(back, src)
    assert sorted(os.listdir(tmp_path)) == ["final.db", "src"]  # No -wal/-shm left behind.
    assert sorted(os.listdir(tmp_path / "src")) == ["study.db"]

    study = optuna.load_study(storage=_sqlite(final), study_name=NAME)
    trial3 = optuna.Trial(study, back["ids"][3])
    assert optuna_dashboard.get_note(trial3) == "trial 3: **why** it won"
    retry = next(t for t in study.trials if t.state == TrialState.WAITING)
    failed = study.trials[retry.system_attrs["failed_trial"]]  # A number: still the right trial.
    assert failed.user_attrs["fail_reason"] == "worker died" and failed.params == retry.params

    proc = run_cli(["--trials", "10", *SHORT, "--storage", _sqlite(final), "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    trials = optuna.load_study(storage=_sqlite(final), study_name=NAME).trials
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 10
    tags = [t.user_attrs["baseline"] for t in finished if "baseline" in t.user_attrs]
    assert sorted(tags) == sorted(BASELINES)  # Each once: none re-run, none duplicated.
    assert trials[retry.number].state != TrialState.WAITING  # The queued retry ran.


def test_copy_to_mariadb_under_another_name(source, mysql_url, capsys):
    import optuna_dashboard  # 0.8 s: not at collection, in every runner

    src = _snapshot(source)
    assert main(["--from", source, "--to", mysql_url, "--to-study-name", "moved"]) == 0
    out = capsys.readouterr().out
    assert "copied study 'seed-mlp' as 'moved'" in out
    assert _same_content(_snapshot(mysql_url, "moved"), src)
    study = optuna.load_study(storage=mysql_url, study_name="moved")
    assert optuna_dashboard.get_note(study) == "study note"


def test_running_trial_becomes_fail_and_the_command_says_so(source, tmp_path):
    src = _snapshot(source)
    running = [n for n, t in src["trials"].items() if t["state"] == "RUNNING"]
    target = tmp_path / "copy.db"
    proc = run_cli(["--from", source, "--to", _sqlite(target)], tmp_path, module="search.transfer")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert f"RUNNING in the source (#{running[0]}) copied as FAIL" in proc.stdout
    copied = _snapshot(_sqlite(target))["trials"][running[0]]
    assert copied["state"] == "FAIL" and copied["user"]["fail_reason"] == RUNNING_FAIL_REASON
    assert copied["intermediate"] == {1: 0.25}
    assert any(k.startswith("artifacts:") for k in copied["system"])  # Its artifact record came along.
    assert src["trials"][running[0]]["state"] == "RUNNING"  # The source is only read.
    assert _snapshot(source) == src


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_existing_study_is_replaced_only_with_overwrite(source, tmp_path, capsys):
    target = tmp_path / "copy.db"
    assert main(["--from", source, "--to", _sqlite(target)]) == 0
    storage = open_storage(_sqlite(target))
    storage.set_study_user_attr(storage.get_study_id_from_name(NAME), "marker", "old copy")
    storage.engine.dispose()
    before = _digest(target)
    capsys.readouterr()

    assert main(["--from", source, "--to", _sqlite(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("search.transfer: error: study 'seed-mlp' already exists") and err.count("\n") == 1
    assert _digest(target) == before

    assert main(["--from", source, "--to", _sqlite(target), "--overwrite"]) == 0
    assert "replaced the study" in capsys.readouterr().out
    copied = _snapshot(_sqlite(target))
    assert "marker" not in copied["user"] and _same_content(copied, _snapshot(source))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--overwr"], "unrecognized arguments: --overwr"),  # No abbreviations.
        (["--to", "sqlite:///{tmp}/copy.db"], "the following arguments are required: --from"),
        (["--to", "sqlite:///{tmp}/missing/copy.db"], "does not exist"),
        (["--to", "sqlite:///{tmp}/src/../src/study.db"], "are the same storage"),
        (["--study-name", "nope"], "no study 'nope' in"),
        (["--from", "sqlite:///{tmp}/none.db"], "SQLite file"),
        (["--study-name", ""], "--study-name must not be empty"),
        (["--to", "sqlite:///{tmp}/notes.txt"], "is not a SQLite database"),
        (["--to", "postgresql+psycopg://postgres@127.0.0.1:1/test"], "Connection refused"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(source, tmp_path, capsys, args, message):
    (tmp_path / "notes.txt").write_text("not a database")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--from" not in " ".join(args) and "required" not in message:
        argv = ["--from", source, *argv]
    if "--to" not in argv:
        argv += ["--to", _sqlite(tmp_path / "copy.db")]
    before = {p: _digest(p) for p in tmp_path.rglob("*") if p.is_file()}
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("search.transfer: error: ") and message in err
    assert {p: _digest(p) for p in tmp_path.rglob("*") if p.is_file()} == before


def test_source_with_several_studies_needs_a_name(source, tmp_path, capsys):
    storage = open_storage(source)
    optuna.create_study(storage=storage, study_name="another")
    storage.engine.dispose()
    assert main(["--from", source, "--to", _sqlite(tmp_path / "copy.db")]) == 2
    err = capsys.readouterr().err
    assert "holds 2 studies; choose one with --study-name: 'another', 'seed-mlp'" in err
    assert not (tmp_path / "copy.db").exists()
    assert main(["--from", source, "--to", _sqlite(tmp_path / "copy.db"), "--study-name", NAME]) == 0


def test_passwords_never_appear(source, postgres_url, tmp_path, capsys):
    with_password = postgres_url.replace("postgres@", "postgres:hunter2@")  # Trust auth: still connects.
    proc = run_cli(["--from", source, "--to", with_password], tmp_path, module="search.transfer")
    assert proc.returncode == 0, proc.stderr
    assert "postgres:***@" in proc.stdout and "hunter2" not in proc.stdout + proc.stderr

    wrong_port = with_password.replace(":5432/", ":5433/")
    for argv in (
        ["--from", source, "--to", wrong_port],
        ["--from", wrong_port, "--to", _sqlite(tmp_path / "copy.db")],
        ["--from", source, "--to", with_password],  # Exists now: refused.
        ["--from", with_password, "--to", with_password],
        ["--from", source, "--to", with_password, "--extra", with_password],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and "hunter2" not in out + err, err
    assert not (tmp_path / "copy.db").exists()


def test_an_interrupt_mid_copy_is_one_line_exit_130_and_removes_the_partial_copy(
    source, tmp_path, capsys, monkeypatch
):
    import signal

    import search.storage._copy as copying

    copy = copying._copy

    def interrupted_copy(*args, **kwargs):
        result = copy(*args, **kwargs)  # The study is in the target now: the interrupt must remove it.
        os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(copying, "_copy", interrupted_copy)
    target = tmp_path / "dst" / "study.db"
    target.parent.mkdir()
    assert main(["--from", source, "--to", _sqlite(target)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted (SIGINT)" in err[0] and "Traceback" not in err[0]
    assert not target.exists()  # The file this run created is gone too.
