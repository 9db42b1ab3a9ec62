"""python -m search.report: every section from a real study, the page in real Chromium, JSON, bad input."""

from __future__ import annotations

import html
import json
import pathlib
import re
import shutil
import statistics
import struct
import subprocess
import zlib

import optuna
import pytest
from optuna.trial import TrialState

from search import results
from search.publishing.report import SECTION_TITLES, build_report, load_snapshot, render_html
from search.report import main
from search.storage import open_storage

from conftest import real_study, run_cli, start_cli

NAME = "seed-mlp"
FIGURES = ("history", "importances", "slices", "contour", "parallel", "curves", "skipped")
PLOT_BG = (229, 236, 246)  # Plotly's default template: the plot area.
MARKER = (99, 110, 250)  # Optuna's history: objective values (plotly's first colour).
BEST_LINE = (239, 85, 59)  # Optuna's history: best value so far.


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    """A real 30-trial seed-mlp study in study.db."""
    return real_study(tmp_path_factory, "report", 30)


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
    assert data["n_complete"] == 30 and data["ignored"] == {"RUNNING": 0, "WAITING": 0}

    # 1. History: optuna's figure, its best-so-far line is the JSON's.
    history = report.figures["history"]
    best_line = next(t for t in history.data if t.name == "Best Value")
    assert list(best_line.y) == pytest.approx([row["best"] for row in data["history"]])
    assert [row["number"] for row in data["history"]] == list(range(30))
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
    # 4. Parallel coordinates from optuna (the section's heading names it; the figure has no title of its own).
    parallel = report.figures["parallel"]
    assert {t.type for t in parallel.data} == {"scatter"} and parallel.layout.title.text is None  # Optuna 5 draws lines
    # 5. Curves: best, the default seed-1 and the worst finite trial.
    names = [t.name for t in report.figures["curves"].data if t.name]
    best, default, worst = data["curves"]["best"], data["curves"]["default"], data["curves"]["worst_finite"]
    assert default == 0 and f"best #{best}" in names and "seed-1 default #0" in names
    assert any(n.startswith(f"worst finite #{worst}") for n in names)
    trials = {t.number: t for t in snapshot.trials}
    finite = [t for t in trials.values() if not t.user_attrs["nonfinite"]]
    assert trials[worst].value == max(t.value for t in finite)
    # 6. Skipped steps: the bars are the counts.
    bar = report.figures["skipped"].data[0]
    counts = {str(x): y for x, y in zip(bar.x, bar.y)}
    assert counts == data["skipped_steps"] and sum(counts.values()) == 30
    # 7. The seed's five configurations next to the best.
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
        r"init_scale from 2\^-?[\d.]+ to 2\^[\d.]+ is safe for this task", data["safe_ranges"][0]["text"]
    )
    # 9. The recommendation as a GradScaler line.
    assert data["recommendation"]["code"].startswith('torch.amp.GradScaler("cpu", init_scale=2.0**')
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
    assert result.stdout.startswith(f"wrote {tmp_path / 'report.html'}: study 'seed-mlp', 30 complete trials")
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
    for d in (data, expected):
        d.pop("generated")
    assert data == expected
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


# -- the page in a real browser ---------------------------------------------------------------


def _chromium() -> str:
    """Chromium's path. The browser is a set-up step (README, .ci/run), never installed by the suite."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed; set-up step: apt-get install -y chromium")


def screenshot(page: pathlib.Path, png: pathlib.Path, width: int = 1400, height: int = 1200) -> None:
    """Renders ``page`` in headless Chromium (no network) into ``png``."""
    profile = png.parent / f"chromium-profile-{png.stem}"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--virtual-time-budget=10000",
        f"--screenshot={png}",
        page.resolve().as_uri(),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("headless chromium did not finish the screenshot within 120 s")
    assert png.exists(), f"chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-2000:]}"
    shutil.rmtree(profile, ignore_errors=True)


def read_png(path: pathlib.Path, max_rows: int | None = None) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """(width, height, rows of RGB pixels) of a PNG: Pillow if installed, else zlib and the PNG filters."""
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        with Image.open(path) as image:
            rgb = image.convert("RGB")
            w, h = rgb.size
            h = h if max_rows is None else min(h, max_rows)
            pixels = list(rgb.crop((0, 0, w, h)).getdata())
        return w, h, [pixels[r * w : (r + 1) * w] for r in range(h)]
    blob = path.read_bytes()
    assert blob[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(blob):
        (n,) = struct.unpack(">I", blob[pos : pos + 4])
        kind = blob[pos + 4 : pos + 8]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", blob[pos + 8 : pos + 21])
        elif kind == b"IDAT":
            idat.append(blob[pos + 8 : pos + 8 + n])
        pos += 12 + n
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    h = h if max_rows is None else min(h, max_rows)
    rows, prev = [], bytearray(stride)
    for r in range(h):
        kind = raw[r * (stride + 1)]
        line = bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def _near(pixel: tuple[int, ...], colour: tuple[int, int, int], tol: int = 40) -> bool:
    return sum(abs(a - b) for a, b in zip(pixel, colour)) <= tol


def test_page_renders_in_headless_chromium(study_dir, tmp_path):
    page = tmp_path / "report.html"
    assert main(["--storage", _sqlite(study_dir / "study.db"), "--out", str(page)]) == 0
    png = tmp_path / "report.png"
    screenshot(page, png, 1400, 1100)
    w, h, rows = read_png(png)
    assert (w, h) == (1400, 1100)
    colours = {p for row in rows[::2] for p in row[::2]}
    assert len(colours) > 300, f"screenshot looks blank: {len(colours)} distinct colours"

    # The first plot area from the top (plotly's light blue-grey) is the history plot.
    bg_rows = [y for y, row in enumerate(rows) if sum(_near(p, PLOT_BG, 6) for p in row) > 300]
    assert bg_rows, "no plotly plot area in the first 1100 px: the history plot did not render"
    top = bottom = bg_rows[0]
    for y in bg_rows[1:]:
        if y - bottom > 6:  # Gridlines cross the area as white rows; a wider gap ends it.
            break
        bottom = y
    assert bottom - top > 200, f"the history plot area is only {bottom - top} px high"
    area = rows[top : bottom + 1]
    markers = sum(_near(p, MARKER) for row in area for p in row)
    line = sum(_near(p, BEST_LINE) for row in area for p in row)
    assert markers > 100, f"no objective-value markers in the history plot ({markers} px)"
    assert line > 100, f"no best-value line in the history plot ({line} px)"
    # Its heading is above it: the page order is the report's (the history comes first).
    assert top < 600


# -- storages, running studies, small studies ----------------------------------------------------


@pytest.mark.parametrize("server", ["postgres_url", "mysql_url"])
def test_report_on_postgresql_and_mariadb(server, request, study_dir, tmp_path):
    url = request.getfixturevalue(server)
    # The real study, moved there as search.transfer would (every trial, attr and setting).
    optuna.copy_study(from_study_name=NAME, from_storage=_sqlite(study_dir / "study.db"), to_storage=url)
    assert main(["--storage", url, "--out", str(tmp_path / "r.json"), "--format", "json"]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["n_complete"] == 30 and len(data["history"]) == 30
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
    assert set(report.figures) == {"history", "slices", "curves", "skipped"}
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
    assert running.number == 30
    after = build_report(load_snapshot(url))
    assert after.data["ignored"] == {"RUNNING": 1, "WAITING": 1}
    for key in ("history", "safe_ranges", "recommendation", "skipped_steps", "importances", "baselines"):
        assert after.data[key] == before[key], key
    assert "1 running, 1 waiting" in render_html(after)


def test_report_while_the_study_is_still_running(study_dir, tmp_path):
    _copy(study_dir / "study.db", tmp_path / "study.db")
    process = start_cli(["--trials", "38", "--quiet"], tmp_path)
    seen, while_running = [], 0
    try:
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
    assert seen == sorted(seen) and seen[0] >= 30
    assert main(["--format", "json", "--out", str(tmp_path / "final.json")]) == 0
    assert json.loads((tmp_path / "final.json").read_text())["n_complete"] == 38


@pytest.fixture(autouse=True)
def _in_tmp(request, tmp_path, monkeypatch):
    # main() defaults to ./study.db and ./report.html: run each test in its own directory.
    monkeypatch.chdir(tmp_path)


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
        f"Verdict:</b> best-1 (#{best.number}) is better than {results.DEFAULT_LABEL} beyond noise" in section
    )
    assert f"p = {comparison['p']:.3g}" in section
    assert "no confirmation runs" not in section


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
    result = _report_cli(
        ["--storage", "mysql+pymysql://root:hunter2@127.0.0.1:1/x", "--out", "r.html"], tmp_path
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


@pytest.fixture(scope="module")
def deep_mlp_study(tmp_path_factory) -> pathlib.Path:
    """A real 40-trial deep-mlp search (the default underflows there; 2^19..2^20 is the good region),
    confirmed with --tolerance 50, which also trains the corners of the ranges that may be safe together."""
    directory = tmp_path_factory.mktemp("deep")
    proc = run_cli(["--task", "deep-mlp", "--trials", "40", "--quiet"], directory)
    assert proc.returncode == 0, proc.stderr
    # Two seeds and the best config only: the corners are what this test needs from it.
    proc = run_cli(["--tolerance", "50", "--top", "1", "--seeds", "2", "--quiet"], directory, module="search.confirm")
    assert proc.returncode == 0, proc.stderr
    return directory


def test_deep_mlp_report_holds_against_the_plain_loop(deep_mlp_study):
    """The report's recommendation, its ranges that are safe together and init_scale's safe edge,
    spot-checked with the independent plain loop (tests/plain_loop.py) just inside and just outside.

    At the default 1% tolerance a 40-trial deep-mlp study has one or two good trials (good settings
    scatter by +-40% around 0.01), too few for ranges; a user of such a task asks with --tolerance 50
    (learning runs reach 0.008-0.015).
    """
    import itertools

    import numpy as np

    from search.tasks.deep_mlp import build

    from plain_loop import plain_fp32_zero_fraction, plain_run

    snapshot = load_snapshot(_sqlite(deep_mlp_study / "study.db"))
    tolerance = 0.5
    data = build_report(snapshot, tolerance).data
    rec, best = data["recommendation"], min(row["value"] for row in data["history"])
    problem = build(42)
    per_epoch = -(-len(problem.inputs) // problem.batch_size)  # micro-batches; no accumulation here
    assert problem.accumulation_steps == 1
    steps = problem.epochs * per_epoch
    zeros = plain_fp32_zero_fraction(problem, steps)
    limit = best + tolerance * abs(best)  # good = no failure and within the tolerance of the best
    order = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")

    def plain(init_scale, growth, backoff, interval):
        return plain_run(problem, init_scale, growth, backoff, int(round(interval)), steps, fp32_zeros=zeros)

    assert not rec["keep_default"]  # the default underflows on deep-mlp
    chosen = plain(*(rec[p] for p in order))
    assert chosen.failure == "none" and chosen.objective <= limit, (rec["code"], chosen.objective, best)
    # Just inside: the corners of the ranges that are safe together, and random points inside them.
    assert rec["together_check"] == "checked", rec["text"]
    box = [rec["together"][p] for p in order]
    rng = np.random.default_rng(3)
    inside = [[float(2 ** rng.uniform(np.log2(lo), np.log2(hi))) for lo, hi in box] for _ in range(4)]
    for point in list(itertools.product(*box)) + inside:  # promised: no failure
        run = plain(*point)
        assert run.failure == "none" and run.learned, (point, run.failure, run.objective, best)
    # Just outside: every corner search.confirm saw fail fails here too, and the nearest trial that
    # is not good is not good in the plain loop either.
    for failed in rec["together_failed"]:
        assert plain(*(failed["point"][p] for p in order)).failure == failed["failure"], failed
    edge = plain(*(rec["edge"][p] for p in order))
    assert edge.failure != "none" or edge.objective > limit, (rec["edge"], edge.objective)
    # init_scale's safe range holds one setting at a time (the others where its good trials were, not at
    # the recommended values: with those, the low end landed 2% past the tolerance once): the good trial
    # at its low end is good in the plain loop, and the bad trial nearest below it is bad there too.
    low = next(r for r in data["safe_ranges"] if r["param"] == "init_scale")["low"]
    edge_trial = next(t for t in snapshot.trials if t.value is not None and t.params["init_scale"] == low)
    at_low = plain(*(edge_trial.params[p] for p in order))
    assert at_low.failure == "none" and at_low.objective <= limit, (low, at_low.failure, at_low.objective)
    below = [t for t in snapshot.trials if t.value is not None and t.params["init_scale"] < low]
    assert below, "the study sampled nothing below the safe range"
    nearest = max(below, key=lambda t: t.params["init_scale"])
    run = plain(*(nearest.params[p] for p in order))
    assert run.failure != "none" or run.objective > limit, (nearest.params, run.failure, run.objective)


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

    import search.report as command

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
