"""optuna-dashboard on a real study: what search.dashboard publishes, and a real server serving it."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest

from search.publishing import _publish as publishing
from search.storage import open_storage, settings_of

from conftest import cli_env, run_cli, start_cli


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    """A real 12-trial study; the run publishes its figures and notes at the end. The one
    test_confirm_runs.seed_mlp_study shares: only read it, a test that writes works on a copy."""
    from test_confirm_runs import seed_mlp_study

    return seed_mlp_study(tmp_path_factory)


def _study(cwd: pathlib.Path) -> optuna.Study:
    return optuna.load_study(storage=open_storage(f"sqlite:///{cwd / 'study.db'}"), study_name="seed-mlp")


def test_a_run_publishes_curves_notes_and_loss_curves(study_dir):
    from optuna_dashboard import get_note  # 0.8 s: not at collection, in every runner
    study = _study(study_dir)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    for graph in (publishing.CURVES_ID, publishing.EXPLORER_ID):
        assert any(key.startswith(f"dashboard:plot_data:{graph}:") for key in attrs), graph
    note = get_note(study)
    assert "GradScaler: the baselines vs the best" in note and "seed-5" in note and "best" in note
    trials = study.get_trials()
    for t in trials:
        assert sorted(t.intermediate_values) == list(range(30))  # The loss curve, every trial.
        assert t.intermediate_values[29] == pytest.approx(t.user_attrs["final_loss"])
    seed3 = next(t for t in trials if t.user_attrs.get("baseline") == "seed-3")
    note3 = get_note(optuna.Trial(study, seed3._trial_id))
    assert f"Skipped steps: **{seed3.user_attrs['skipped_steps']} of 30**" in note3
    assert "at steps 1, 2, 3, 4, 5." in note3 and "epoch" not in note3  # steps, not epochs


def test_curves_figure_marks_the_skipped_steps(study_dir):
    study = _study(study_dir)
    space = settings_of(study).space
    named = publishing._named_trials(study.get_trials())
    labels = [label for label, _ in named]
    assert labels[0].startswith("best") and any("seed-1 default" in label for label in labels)
    seed3 = next(t for t in study.get_trials() if t.user_attrs.get("baseline") == "seed-3")
    figure = publishing.curves_figure([("seed-3", seed3)], space)
    marks = [trace for trace in figure.data if trace.mode == "markers"]
    assert [list(m.x) for m in marks] == [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]]
    assert figure.layout.yaxis2.type == "log"
    explorer = publishing.explorer_figure(study.get_trials(), space)
    buttons = explorer.layout.updatemenus[0].buttons
    assert len(buttons) == 12 and buttons[0].label.startswith(f"#{study.best_trial.number}")
    # Issue 15: the menu covered the titles above the plots; it is in the right margin, beside them.
    menu = explorer.layout.updatemenus[0]
    assert menu.x >= 1 and menu.xanchor == "left" and menu.y <= 1 and menu.yanchor == "top"
    assert explorer.layout.legend.y < menu.y  # The legend below it.
    # What publishing stores is built without plotly's validation (issue 13: ~1.5 ms a trial at the
    # end of every run); it must be the same figure, as plotly itself would write it.
    fast = json.loads(publishing.explorer_json(study.get_trials(), space))
    assert fast == json.loads(explorer.to_json())


def test_publishing_again_adds_nothing_and_keeps_a_persons_note(study_dir, tmp_path):
    from optuna_dashboard import get_note, save_note
    db = tmp_path / "study.db"
    db.write_bytes((study_dir / "study.db").read_bytes())
    study = _study(tmp_path)
    again = publishing.publish(study)
    assert again.trial_notes == 0 and again.study_note  # Still our note: refreshed.
    save_note(study, "my own words")
    assert not publishing.publish(study).study_note
    assert get_note(study) == "my own words"
    first = study.trials[0]
    save_note(optuna.Trial(study, first._trial_id), "trial note by a person")
    publishing.publish(study)
    assert get_note(optuna.Trial(study, first._trial_id)) == "trial note by a person"


def test_publishing_stores_what_the_dashboards_public_functions_store(study_dir, tmp_path):
    """publish() writes optuna-dashboard's chunks itself, in one transaction; save_note and
    save_plotly_graph_object, one commit per chunk, must show the same notes and figures."""
    import shutil
    import sqlite3

    from optuna_dashboard import get_note, save_note, save_plotly_graph_object
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    from search.publishing import curves_figure
    from search.results import summarize, summarize_confirmation

    shown = {}
    for route in ("ours", "public"):
        (tmp_path / route).mkdir()
        shutil.copy(study_dir / "study.db", tmp_path / route / "study.db")
        with sqlite3.connect(tmp_path / route / "study.db") as db:  # as before its first publishing
            db.execute(
                "DELETE FROM study_system_attributes WHERE key LIKE 'dashboard:%' OR key LIKE 'search:%'"
            )
        study = _study(tmp_path / route)
        trials = study.get_trials()
        space = settings_of(study).space
        if route == "ours":
            publishing.publish(study)
        else:
            title = "Best vs GradScaler's default vs the worst finite trial"
            named = publishing._named_trials(trials)
            save_plotly_graph_object(
                study, curves_figure(named, space, title=title), graph_object_id=publishing.CURVES_ID
            )
            save_plotly_graph_object(
                study, publishing.explorer_figure(trials, space), graph_object_id=publishing.EXPLORER_ID
            )
            for t in trials:
                save_note(optuna.Trial(study, t._trial_id), publishing._trial_note(t, space))
            data = summarize(study, space, summarize_confirmation(study._storage, study.study_name), trials)
            save_note(study, publishing._study_note(data))
        system = study._storage.get_study_system_attrs(study._study_id)
        shown[route] = (
            get_note(study),
            [get_note(optuna.Trial(study, t._trial_id)) for t in trials],
            {name: json.loads(text) for name, text in get_plotly_graph_objects(system).items()},
        )
    assert shown["ours"] == shown["public"]
    assert len(shown["ours"][1]) == 12 and all(shown["ours"][1]) and len(shown["ours"][2]) == 2


@pytest.mark.parametrize("length", [0, 1, 2044, 2045, 2046, 4090, 5000])
@pytest.mark.parametrize("trial_id", [None, 7])
def test_our_keys_and_chunks_are_optuna_dashboards(length, trial_id):
    """search.publishing._dashboard_attrs is written from optuna-dashboard's source, not imported (its
    package loads the web app): the same keys and chunks as its own functions, at the chunk edges."""
    from optuna_dashboard import _custom_plot_data, _note

    from search.publishing import _dashboard_attrs as ours

    text = "".join(chr(0x41 + i % 26) for i in range(length))
    assert ours.note_version_key(trial_id) == _note.note_ver_key(trial_id)
    assert ours.note_text_prefix(trial_id) == _note.note_str_key_prefix(trial_id)
    assert ours.split_text(text, ours.note_text_prefix(trial_id)) == _note.split_body(text, trial_id)
    prefix = ours.figure_prefix(publishing.CURVES_ID)
    assert prefix == _custom_plot_data.SYSTEM_ATTR_PLOT_DATA + publishing.CURVES_ID + ":"
    assert ours.split_text(text, prefix) == _custom_plot_data.split_plot_data(text, prefix)


def test_publishing_does_not_load_optuna_dashboard():
    """Every search.optimize run publishes; optuna-dashboard's package costs 1.3 s of CPU to import."""
    code = "import sys, search.publishing._publish; print('optuna_dashboard' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_addresses(port: int) -> set[str]:
    addresses = set()
    for line in pathlib.Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, port_hex = local.split(":")
        if int(port_hex, 16) == port and state == "0A":  # 0A: LISTEN
            addresses.add(socket.inet_ntoa(bytes.fromhex(host)[::-1]))
    return addresses


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_a_real_dashboard_server_serves_the_figures_and_curves(study_dir, tmp_path):
    import shutil

    shutil.copy(study_dir / "study.db", tmp_path / "study.db")  # It publishes (the pictures) before serving.
    port = _free_port()
    server = start_cli(["--port", port], tmp_path, module="search.dashboard")  # A real server on a port.
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        studies = None
        while time.time() < deadline and server.poll() is None:
            try:
                studies = _get(f"{base}/api/studies")
                break
            except OSError:
                time.sleep(0.3)
        assert studies is not None, server.communicate(timeout=10)
        (summary,) = studies["study_summaries"]
        detail = _get(f"{base}/api/studies/{summary['study_id']}?after=0")
        graphs = {g["id"] for g in detail["plotly_graph_objects"]}
        assert {publishing.CURVES_ID, publishing.EXPLORER_ID} <= graphs
        curves = next(g for g in detail["plotly_graph_objects"] if g["id"] == publishing.CURVES_ID)
        assert "Best vs GradScaler's default" in curves["graph_object"]
        assert "GradScaler: the baselines vs the best" in detail["note"]["body"]
        trials = detail["trials"]
        assert len(trials) == 12
        assert all(len(t["intermediate_values"]) == 30 for t in trials)
        assert all("Skipped steps" in t["note"]["body"] for t in trials)
        # Each trial's picture is listed on its page and served as an image.
        for t in trials:
            (artifact,) = t["artifacts"]
            assert artifact["filename"] == "loss-and-scale.svg" and artifact["mimetype"] == "image/svg+xml"
        first = trials[0]
        artifact_id = first["artifacts"][0]["artifact_id"]
        picture = f"{base}/artifacts/{summary['study_id']}/{first['trial_id']}/{artifact_id}"
        with urllib.request.urlopen(picture, timeout=10) as response:
            assert response.headers["Content-Type"] == "image/svg+xml"
            assert response.read().startswith(b"<svg")
        # Bound to the loopback address only (the default): the kernel's table of listening sockets.
        assert _listening_addresses(port) == {"127.0.0.1"}
    finally:
        server.terminate()
        server.communicate(timeout=30)


def test_no_study_file_is_one_line_and_creates_nothing(tmp_path):
    proc = run_cli(["--publish-only"], tmp_path, module="search.dashboard")
    assert proc.returncode == 2 and "no study file study.db" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_publishing_is_one_transaction_and_replaces_stale_chunks(study_dir, tmp_path, monkeypatch):
    """Every figure and note chunk in one write (optuna-dashboard's helpers make one transaction per
    ~2 kB chunk); a figure that shrinks leaves no stale chunk behind; the dashboard reads it back."""
    import shutil

    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    shutil.copy(study_dir / "study.db", tmp_path / "study.db")
    study = _study(tmp_path)
    key = f"dashboard:plot_data:{publishing.CURVES_ID}:"
    system = study._storage.get_study_system_attrs(study._study_id)
    chunks = sum(k.startswith(key) for k in system)
    for i in range(chunks, chunks + 3):  # as if an earlier, larger figure had left these
        study._storage.set_study_system_attr(study._study_id, f"{key}{i}", "x" * 10)
    calls = []
    backend = type(study._storage._backend) if hasattr(study._storage, "_backend") else type(study._storage)
    original = backend.set_study_system_attr
    monkeypatch.setattr(
        backend, "set_study_system_attr", lambda self, *a: (calls.append(a), original(self, *a))
    )
    publishing.publish(study)
    assert calls == []
    system = study._storage.get_study_system_attrs(study._study_id)
    figure = json.loads(get_plotly_graph_objects(system)[publishing.CURVES_ID])
    assert figure["layout"]["title"]["text"].startswith("Best vs GradScaler's default")
    assert all(system[f"{key}{i}"] == "" for i in range(chunks, chunks + 3))


def test_an_interrupt_while_publishing_is_one_line_exit_130(study_dir, tmp_path, capsys, monkeypatch):
    import os
    import shutil
    import signal

    import search.dashboard as dashboard

    def interrupted_publish(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(dashboard, "publish", interrupted_publish)
    shutil.copy(study_dir / "study.db", tmp_path / "study.db")
    code = dashboard.main(["--storage", f"sqlite:///{tmp_path / 'study.db'}", "--publish-only"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and len(err) == 1 and "interrupted (SIGINT) while publishing" in err[0]


def test_each_trial_gets_a_picture_of_its_recorded_curves(study_dir, tmp_path):
    """One SVG per finished trial, drawn from the trial's recorded loss and scale curves (a point per
    step, a red tick per skipped step), its record stored for optuna-dashboard; drawn once."""
    import shutil
    import xml.etree.ElementTree as ET

    shutil.copy(study_dir / "study.db", tmp_path / "study.db")
    url = f"sqlite:///{tmp_path / 'study.db'}"

    def publish_only() -> str:
        proc = run_cli(["--storage", url, "--publish-only"], tmp_path, module="search.dashboard")
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    assert "12 new trial pictures" in publish_only()
    directory = tmp_path / "study.db-artifacts"
    study = _study(tmp_path)
    records = {
        key: json.loads(value)
        for key, value in study._storage.get_study_system_attrs(study._study_id).items()
        if key.startswith("dashboard:artifacts:")
    }
    assert len(records) == 12 == len(list(directory.iterdir()))
    svg = "{http://www.w3.org/2000/svg}"
    for trial in study.get_trials():
        (key,) = [k for k in records if k.startswith(f"dashboard:artifacts:{trial._trial_id}:")]
        meta = records[key]
        assert meta["mimetype"] == "image/svg+xml" and key.endswith(meta["artifact_id"])
        root = ET.parse(directory / meta["artifact_id"]).getroot()
        loss_line = root.findall(f"{svg}polyline")[0]
        assert len(loss_line.get("points").split()) == len(trial.user_attrs["loss_curve"]) == 30
        ticks = [line for line in root.findall(f"{svg}line") if line.get("stroke") == "#d62728"]
        assert len(ticks) == 2 * trial.user_attrs["skipped_steps"]  # one on each panel
    assert any(t.user_attrs["skipped_steps"] > 0 for t in study.get_trials())  # the ticks were tested
    assert "0 new trial pictures" in publish_only()  # drawn once
    shutil.rmtree(directory)  # e.g. browsing from another host: drawn again under the recorded ids
    assert "12 new trial pictures" in publish_only()
    assert sorted(p.name for p in directory.iterdir()) == sorted(m["artifact_id"] for m in records.values())


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b""
        for p in sorted(directory.rglob("*"))
    }


@pytest.fixture
def port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--no-publish", "--publish-only"], "contradict each other"),
        (["--publish-only", "--artifact-dir", "/proc/art"], "--artifact-dir /proc/art: cannot be created"),
        (["--publish-only", "--artifact-dir", "no/such/art"], "does not exist"),
        (["--host", "999.1.1.1"], "--host 999.1.1.1"),
        (["--port", "PORT_IN_USE"], "cannot serve on 127.0.0.1:"),
    ],
)
def test_bad_input_is_refused_before_anything_is_published(
    study_dir, tmp_path, capsys, port_in_use, args, message
):
    """A port in use, an address not of this machine, an artifact directory that cannot be made: found
    before publishing (it once wrote 30 pictures and the figures, printed 'Listening on', then failed)."""
    import shutil

    from search.dashboard import main

    shutil.copy(study_dir / "study.db", tmp_path / "study.db")
    before = _files(tmp_path)
    args = [str(port_in_use) if a == "PORT_IN_USE" else a for a in args]
    assert main(["--storage", f"sqlite:///{tmp_path / 'study.db'}", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert _files(tmp_path) == before


def test_publish_only_that_publishes_nothing_is_not_a_success(study_dir, tmp_path, capsys, monkeypatch):
    import shutil

    import search.dashboard as dashboard

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(dashboard, "publish", broken)
    shutil.copy(study_dir / "study.db", tmp_path / "study.db")
    assert dashboard.main(["--storage", f"sqlite:///{tmp_path / 'study.db'}", "--publish-only"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "search.dashboard: warning: seed-mlp: not published: disk full",
        "search.dashboard: error: not published: seed-mlp (the warnings above say why)",
    ]


def test_a_study_on_read_only_media_is_served_but_not_published(study_dir, tmp_path, capsys):
    import shutil

    from search.dashboard import main

    from conftest import read_only_media

    db = tmp_path / "study.db"
    shutil.copy(study_dir / "study.db", db)
    before = _files(tmp_path)
    with read_only_media(db, tmp_path):
        code = main(["--storage", f"sqlite:///{db}", "--publish-only"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().splitlines() == [
        f"search.dashboard: error: sqlite:///{db} is read-only: nothing can be published to it"
    ]
    assert _files(tmp_path) == before


def test_the_study_note_is_the_summary_search_optimize_prints_confirmation_included(
    tmp_path_factory, tmp_path
):
    """search.dashboard once wrote the note without the confirmation runs (stale 'not checked yet') and
    without --storage in its commands (they would have read ./study.db)."""
    import shutil

    from optuna_dashboard import get_note
    from test_confirm_runs import seed_mlp_study

    from search.dashboard import main

    # The 12-trial study confirmed by search.confirm --top 1 --seeds 2 (corners included), which leaves the
    # dashboard's note as the search wrote it, before the confirmation.
    shutil.copy(seed_mlp_study(tmp_path_factory, confirmed=True) / "study.db", tmp_path / "other.db")
    url = f"sqlite:///{tmp_path / 'other.db'}"
    stale = get_note(optuna.load_study(storage=url, study_name="seed-mlp"))
    assert main(["--storage", url, "--publish-only"]) == 0
    printed = run_cli(["--storage", url, "--trials", "12"], tmp_path)
    assert printed.returncode == 0, printed.stderr
    summary = printed.stdout.split("\n", 1)[1].rstrip("\n")  # After the headline: format_summary's text.
    note = get_note(optuna.load_study(storage=url, study_name="seed-mlp"))
    assert summary in note, (summary, note)
    assert summary not in stale  # search.dashboard is what brought it up to date
    assert f"--storage {url}" in note and "not checked yet" not in note
