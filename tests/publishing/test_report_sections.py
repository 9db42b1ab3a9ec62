"""python -m search.report: every section from a real study, the CLI's HTML and JSON, the confirmation
table, the importances against the dashboard's, an interrupt.

Also the real study the test_report_* files share (:func:`report_study`).
"""

from __future__ import annotations

import copy
import html
import json
import pathlib
import re
import shutil
import statistics
import subprocess
import warnings

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from search import results
from search.core import OVERFLOW_STEPS, SCALE_CURVE
from search.publishing.report import SECTION_TITLES, build_report, load_snapshot, render_html
from search.report import main
from search.storage import open_storage

from conftest import built_once, run_cli

NAME = "seed-mlp"
FIGURES = ("curves", "failures", "skipped", "history", "importances", "slices", "contour", "parallel")
TRIALS = 20  # enough for every section (the contour needs 10 complete trials) and the ranges' edges


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


def report_study(factory: pytest.TempPathFactory) -> pathlib.Path:
    """A directory whose study.db holds a real seed-mlp study of TRIALS trials, built once per test session
    (conftest.built_once): the test_report_* files only read it (a test that writes works on a copy)."""

    def search(directory: pathlib.Path) -> None:
        proc = run_cli(["--trials", str(TRIALS), "--quiet"], directory)
        assert proc.returncode == 0, proc.stderr

    return built_once(factory, "report", search)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    return report_study(tmp_path_factory)


def _copy(src: pathlib.Path, dst: pathlib.Path) -> str:
    """Copies a finished SQLite study file (with its WAL, if any); returns the copy's URL."""
    for suffix in ("", "-wal", "-shm"):
        if pathlib.Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    return _sqlite(dst)


def _report_cli(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return run_cli(args, cwd, module="search.report")


def test_every_section_from_a_real_study(study_dir):
    snapshot = load_snapshot(_sqlite(study_dir / "study.db"))
    report = build_report(snapshot)
    data = report.data
    assert [s.key for s in report.sections] == list(SECTION_TITLES)
    assert set(report.figures) == set(FIGURES)
    assert data["n_complete"] == TRIALS and data["ignored"] == {"RUNNING": 0, "WAITING": 0}
    # A study searched without a diagnosis says how to record one (tests/diagnosis/test_recorded_diagnosis.py:
    # with one).
    assert data["diagnosis"] == {"started_from": None, "recorded": None}
    assert (
        report.section("diagnosis").message
        == "This study holds no diagnosis: search.diagnose --storage URL --study-name seed-mlp (with this"
        " study's task, seed, scaler and steps) records one here."
    )

    # 1. History: optuna's figure, its best-so-far line is the JSON's.
    history = report.figures["history"]
    best_line = next(t for t in history.data if t.name == "Best Value")
    assert list(best_line.y) == pytest.approx([row["best"] for row in data["history"]])
    assert [row["number"] for row in data["history"]] == list(range(TRIALS))
    # 2. Importances of the four settings, the bars are the JSON numbers.
    bars = report.figures["importances"].data[0]
    assert dict(zip(bars.y, bars.x)) == pytest.approx(data["importances"])
    assert set(data["importances"]) == {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}
    # 3. Slices (one panel per setting) and the contour; init_scale on log axes with powers of two.
    slices = report.figures["slices"]
    titles = {slices.layout[k].title.text: slices.layout[k] for k in slices.layout if k.startswith("xaxis")}
    assert set(titles) == {"init_scale", "growth_factor", "backoff_factor", "growth_interval"}
    assert titles["init_scale"].type == "log"
    assert all(v == 2.0 ** round(__import__("math").log2(v)) for v in titles["init_scale"].tickvals)
    assert "2<sup>0</sup>" in titles["init_scale"].ticktext
    contour = report.figures["contour"]
    assert any(t.type == "contour" for t in contour.data)
    axes = {contour.layout[k].title.text: contour.layout[k] for k in contour.layout if k[1:5] == "axis"}
    assert axes["init_scale"].type == "log" and "2<sup>32</sup>" in axes["init_scale"].ticktext
    assert "backoff_factor" in axes
    # 4. Parallel coordinates from optuna (the section's heading names it; the figure has no title of its
    # own).
    parallel = report.figures["parallel"]
    assert {t.type for t in parallel.data} == {
        "scatter"
    } and parallel.layout.title.text is None  # Optuna 5 draws lines
    # 5. Curves: best, the default seed-1 and the worst finite trial.
    names = [t.name for t in report.figures["curves"].data if t.name]
    best, default, worst = data["curves"]["best"], data["curves"]["default"], data["curves"]["worst_finite"]
    assert default == 0 and f"best #{best}" in names and "seed-1 (default) #0" in names
    assert any(n.startswith(f"worst finite #{worst}") for n in names)
    trials = {t.number: t for t in snapshot.trials}
    finite = [t for t in trials.values() if not t.user_attrs["nonfinite"]]
    assert trials[worst].value == max(t.value for t in finite)
    # 6. Skipped steps: the bars are the counts.
    bar = report.figures["skipped"].data[0]
    counts = {str(x): y for x, y in zip(bar.x, bar.y)}
    assert counts == data["skipped_steps"] and sum(counts.values()) == TRIALS
    # 7. The original example's five configurations next to the best.
    assert sorted(data["baselines"]) == [f"seed-{i}" for i in range(1, 6)]
    assert data["baselines"]["seed-1"]["init_scale"] == 2.0**16
    # 8. Safe ranges of the four settings, in words.
    assert [r["param"] for r in data["safe_ranges"]] == [
        "init_scale",
        "growth_factor",
        "backoff_factor",
        "growth_interval",
    ]
    assert re.match(
        r"init_scale from 2\^-?[\d.]+ to 2\^[\d.]+ is good for this task", data["safe_ranges"][0]["text"]
    )
    # 9. The verdict and its GradScaler line, naming only what it changes (the default names nothing).
    rec = data["recommendation"]
    if rec["verdict"] == "keep-default":
        assert rec["code"] == 'torch.amp.GradScaler("cpu")' and rec["changed"] == []
    else:
        assert rec["verdict"] == "change" and rec["code"].startswith(
            'torch.amp.GradScaler("cpu", init_scale=2.0**'
        )
    assert "Verdict: " in report.section("recommendation").body
    # 10. No confirmation yet.
    assert data["confirmation"] is None
    assert report.section("confirmation").message.startswith(
        "no confirmation runs (run python -m search.confirm)"
    )

    page = render_html(report)
    for i, title in enumerate(SECTION_TITLES.values(), 1):
        assert f"<h2>{i}. {html.escape(title)}</h2>" in page
    assert page.count('class="plotly-graph-div"') == len(FIGURES)
    assert len(re.findall(r"\* plotly\.js v\d", page)) == 1  # plotly.js embedded exactly once.
    assert not re.search(r"<script[^>]*\bsrc\s*=", page)  # Nothing loaded from anywhere.
    assert not re.search(r"<link[^>]*href\s*=\s*[\"']https?:", page)
    for r in data["safe_ranges"]:
        assert html.escape(r["text"]) in page
    assert html.escape(data["recommendation"]["code"]) in page
    assert "<td>#0</td>" in page and "<b>seed-5</b>" in page


def test_cli_html_and_json_carry_the_same_numbers(study_dir, tmp_path):
    result = _report_cli(["--out", str(tmp_path / "report.html")], study_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"wrote {tmp_path / 'report.html'}: study 'seed-mlp', {TRIALS} complete trials"
    )
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("plotly.js v") == 1

    assert (
        main(
            [
                "--format",
                "json",
                "--out",
                str(tmp_path / "r.json"),
                "--storage",
                _sqlite(study_dir / "study.db"),
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "r.json").read_text())
    expected = build_report(load_snapshot(_sqlite(study_dir / "study.db"))).data
    expected = json.loads(json.dumps(expected))
    piped = _report_cli(["--format", "json", "--out", "-"], study_dir)  # "-": standard output, the JSON alone
    assert piped.returncode == 0 and not (study_dir / "-").exists(), piped.stderr
    piped_data = json.loads(piped.stdout)
    for d in (data, expected, piped_data):
        d.pop("generated")
    assert data == expected == {**piped_data, "storage": data["storage"]}
    assert data["storage"] == f"sqlite:///{study_dir / 'study.db'}"
    for key in (
        "history",
        "importances",
        "safe_ranges",
        "recommendation",
        "baselines",
        "best",
        "skipped_steps",
    ):
        assert data[key], key
    # The page states the same numbers.
    for r in data["safe_ranges"]:
        assert html.escape(r["text"]) in page
    assert html.escape(data["recommendation"]["code"]) in page
    assert f"best objective {data['best']['value']:.4f} (trial #{data['best']['number']})" in page


# -- confirmation -------------------------------------------------------------------------------


def test_confirmation_table_from_a_sibling_study(study_dir, tmp_path):
    url = _copy(study_dir / "study.db", tmp_path / "c.db")
    source = optuna.load_study(storage=url, study_name=NAME)
    best = min(
        (t for t in source.trials if t.state == TrialState.COMPLETE), key=lambda t: (t.value, t.number)
    )
    default = next(t for t in source.trials if t.user_attrs.get("baseline") == "seed-1")
    seeds = [43, 44, 45]
    configs = [
        {"label": f"best-1 (#{best.number})", "source_trial": best.number, "params": best.params},
        {"label": results.DEFAULT_LABEL, "source_trial": None, "params": default.params},
    ]
    values = {configs[0]["label"]: [0.40, 0.41, 0.39], configs[1]["label"]: [0.45, 0.47, 0.44]}
    sibling = optuna.create_study(storage=url, study_name=f"{NAME}.confirm")
    for key, value in {
        "source_study": NAME,
        "seeds": seeds,
        "top": 1,
        "epochs": 30,
        "configs": configs,
    }.items():
        sibling.set_user_attr(key, value)
    for config in configs:
        for seed, value in zip(seeds, values[config["label"]]):
            sibling.add_trial(
                optuna.trial.create_trial(
                    value=value,
                    params=config["params"],
                    distributions=best.distributions,
                    user_attrs={
                        "config": config["label"],
                        "source_trial": config["source_trial"],
                        "data_seed": seed,
                        "final_loss": value,
                    },
                )
            )
    # The sibling is not a second study to choose from: no --study-name needed.
    assert main(["--storage", url, "--out", str(tmp_path / "r.html")]) == 0
    assert main(["--storage", url, "--out", str(tmp_path / "r.json"), "--format", "json"]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["study_name"] == NAME
    assert data["confirmation"] == json.loads(json.dumps(results.summarize_confirmation(url, NAME)))
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<section id="confirmation">') :]
    for label, vals in values.items():
        cell = f"{statistics.mean(vals):.4f} ± {statistics.stdev(vals):.4f}"
        assert f"<b>{html.escape(label)}</b>" in section and cell in section, (label, cell)
    comparison = data["confirmation"]["comparison"]
    assert comparison["better_beyond_noise"] is True
    assert (
        f"Paired test:</b> best-1 (#{best.number}) is better than {results.DEFAULT_LABEL} beyond noise"
        in section
    )
    assert f"p = {comparison['p']:.3g}" in section
    assert "no confirmation runs" not in section


def test_storage_is_opened_read_only(study_dir):
    # The report reads: the study's trials and attrs are unchanged afterwards.
    url = _sqlite(study_dir / "study.db")
    storage = open_storage(url)
    study_id = storage.get_study_id_from_name(NAME)
    before = (
        storage.get_study_user_attrs(study_id),
        storage.get_study_system_attrs(study_id),
        len(storage.get_all_trials(study_id)),
    )
    build_report(load_snapshot(url))
    assert (
        storage.get_study_user_attrs(study_id),
        storage.get_study_system_attrs(study_id),
        len(storage.get_all_trials(study_id)),
    ) == before


def test_importances_are_the_dashboards(study_dir):
    """The report's bars are the numbers optuna-dashboard's own API serves for the same study."""
    import io
    import wsgiref.util

    import optuna_dashboard

    url = _sqlite(study_dir / "study.db")
    report = build_report(load_snapshot(url))
    storage = open_storage(url)
    study_id = storage.get_study_id_from_name(NAME)
    environ: dict = {"REQUEST_METHOD": "GET", "PATH_INFO": f"/api/studies/{study_id}/param_importances"}
    wsgiref.util.setup_testing_defaults(environ)
    environ["wsgi.input"] = io.BytesIO()
    status: list[str] = []
    body = b"".join(optuna_dashboard.wsgi(storage)(environ, lambda s, h, *a: status.append(s)))
    assert status[0].startswith("200"), status
    served = json.loads(body)["param_importances"][0]
    assert {row["name"]: row["importance"] for row in served} == pytest.approx(report.data["importances"])
    assert len(report.data["importances"]) == 4


def test_parallel_coordinate_labels_are_not_crowded():
    # Issue 15: init_scale over 2^-12..2^31 got a label at every decade plus both ends, one on top of another.
    from search.publishing.report import PARALLEL_MAX_LABELS, PARALLEL_MIN_GAP, tidy_parallel_ticks

    study = optuna.create_study()
    for i in range(30):
        study.add_trial(
            optuna.trial.create_trial(
                params={"init_scale": 2.0 ** (-12 + 43 * i / 29), "growth_interval": 1 + (i * 71) % 2000},
                distributions={
                    "init_scale": optuna.distributions.FloatDistribution(2.0**-12, 2.0**31, log=True),
                    "growth_interval": optuna.distributions.IntDistribution(1, 2000, log=True),
                },
                value=0.4 + i / 30,
            )
        )

    def labels_per_axis(figure) -> dict[float, list[float]]:
        axes: dict[float, list[float]] = {}
        for a in figure.layout.annotations:
            axes.setdefault(a.x, []).append(a.y)
        return {x: sorted(ys) for x, ys in axes.items()}

    figure = optuna.visualization.plot_parallel_coordinate(study)
    assert max(len(ys) for ys in labels_per_axis(figure).values()) > PARALLEL_MAX_LABELS  # Optuna's own.
    tidy = labels_per_axis(tidy_parallel_ticks(figure))
    for ys in tidy.values():
        assert 2 <= len(ys) <= PARALLEL_MAX_LABELS and ys[0] == 0 and ys[-1] == 1  # Both ends stay.
        assert min(b - a for a, b in zip(ys, ys[1:])) >= PARALLEL_MIN_GAP


def test_an_interrupt_is_one_line_exit_130_and_writes_nothing(study_dir, tmp_path, capsys, monkeypatch):
    import os
    import signal

    import search.publishing.report as command  # search.report imports it once the flags are read

    build = command.build_report

    def interrupted_build(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return build(*args, **kwargs)

    monkeypatch.setattr(command, "build_report", interrupted_build)
    url = _copy(study_dir / "study.db", tmp_path / "study.db")
    assert main(["--storage", url, "--out", str(tmp_path / "r.html")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted (SIGINT); nothing was written" in err[0]
    assert not (tmp_path / "r.html").exists()


@pytest.fixture(autouse=True)
def _in_tmp(request, tmp_path, monkeypatch):
    # main() defaults to ./study.db and ./report.html: run each test in its own directory.
    monkeypatch.chdir(tmp_path)


def test_importances_say_which_settings_acted_in_no_run(study_dir):
    """PED-ANOVA gives a setting that never acted a bar all the same (growth_factor 0.82 on a 32-step deep-mlp
    study where the scale never grew): the section says which bars measure nothing, read here from the raw
    scale curves.
    """
    snapshot = load_snapshot(_sqlite(study_dir / "study.db"))

    def acted(trials) -> set[str]:
        out = set()
        for t in trials:
            if t.state != TrialState.COMPLETE:
                continue
            # The scale before each step; GradScaler holds it in float32, so init_scale rounded so (a float64
            # init_scale that rounds up would look like a growth at step 0).
            curve = [float(np.float32(t.params.get("init_scale", 0)))] + t.user_attrs["scale_curve"]
            if any(b > a for a, b in zip(curve, curve[1:])):
                out |= {"growth_factor", "growth_interval"}
            if any(b < a for a, b in zip(curve, curve[1:])):
                out.add("backoff_factor")
        return out

    message = build_report(snapshot).section("importances").message or ""
    # The sampled trials differ from run to run (the sampler's seed holds host and process): whether a scale
    # grew in one of them is read from the study, and the message must say as much.
    idle = {"growth_factor", "growth_interval", "backoff_factor"} - acted(snapshot.trials)
    assert ("acted in no complete trial" in message) == bool(idle)
    assert all(name in message for name in idle)
    # The same trials with a scale that never moved from its start: no growth, no skip.
    flat = []
    for t in snapshot.trials:
        t = copy.deepcopy(t)  # its number kept
        if t.state == TrialState.COMPLETE:
            start = float(np.float32(t.params["init_scale"]))  # GradScaler holds its scale in float32
            curve = [start] * len(t.user_attrs[SCALE_CURVE])
            t.user_attrs = {**t.user_attrs, SCALE_CURVE: curve, OVERFLOW_STEPS: []}
        flat.append(t)
    from search.publishing.report._visualization import _importance_section, _in_memory_study

    done = [t for t in flat if t.state == TrialState.COMPLETE]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's in-memory study creation notes
        section, _, _ = _importance_section(_in_memory_study(done), done, snapshot.settings.space)
    message = section.message
    assert (
        "growth_factor, backoff_factor and growth_interval acted in no complete trial's run (read from each"
        " scale curve: the scale never grew, nor was a step skipped), so their bars measure only how the"
        " sampled values happened to fall, not the setting."
        in message
    )


def test_an_edge_at_the_value_reads_plus_zero_octaves_not_minus_zero():
    """A recommendation's backoff_factor at its range's edge read "-0.00" octaves (a float a hair below)."""
    from search.publishing.report._tables import _octaves

    assert [_octaves(d) for d in (-0.001, 0.004, 0.0, -0.42, 0.006)] == [
        "+0.00",
        "+0.00",
        "+0.00",
        "-0.42",
        "+0.01",
    ]
