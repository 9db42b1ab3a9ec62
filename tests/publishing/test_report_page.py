"""python -m search.report's page in a real browser: headless Chromium renders the answer first, then its
plots."""

from __future__ import annotations

import pathlib
import shutil
import struct
import subprocess
import zlib

import pytest

from search.publishing._figures import COLOURS
from search.report import main

PLOT_BG = (229, 236, 246)  # Plotly's default template: the plot area.


def _sqlite(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> pathlib.Path:
    """The real seed-mlp study the test_report_* files share (test_report_sections.report_study)."""
    from test_report_sections import report_study

    return report_study(tmp_path_factory)


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


def _rendered_dom(page: pathlib.Path, tmp_path: pathlib.Path) -> str:
    """The page's DOM after Chromium ran its scripts (``--dump-dom``)."""
    profile = tmp_path / "chromium-profile-dom"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<html" in done.stdout, done.stderr[-2000:]
    shutil.rmtree(profile, ignore_errors=True)
    return done.stdout


def test_page_leads_with_the_answer_in_headless_chromium(study_dir, tmp_path):
    """At laptop width the page opens on the verdict and its line; the first plot under it is the
    answer's evidence (loss and scale curves), the generic Optuna plots come after."""
    page = tmp_path / "report.html"
    assert main(["--storage", _sqlite(study_dir / "study.db"), "--out", str(page)]) == 0
    dom = _rendered_dom(page, tmp_path)
    verdict = dom.index("Verdict: ")
    plots = [dom.index(f'id="figure-{key}"') for key in ("curves", "failures", "history", "parallel")]
    assert verdict < plots[0] < plots[1] < plots[2] < plots[3]
    assert dom.count("js-plotly-plot") >= 8, "plotly did not draw the page's figures"

    png = tmp_path / "report.png"
    screenshot(page, png, 1400, 1600)
    w, h, rows = read_png(png)
    assert (w, h) == (1400, 1600)
    colours = {p for row in rows[::2] for p in row[::2]}
    assert len(colours) > 300, f"screenshot looks blank: {len(colours)} distinct colours"
    # The first plot area from the top (plotly's light blue-grey) is the curves plot: its lines are
    # drawn in the roles' colours (search.publishing._figures.COLOURS: the lead trial, the default, the
    # worst).
    bg_rows = [y for y, row in enumerate(rows) if sum(_near(p, PLOT_BG, 6) for p in row) > 300]
    assert bg_rows, "no plotly plot area in the first 1600 px: the curves plot did not render"
    top = bottom = bg_rows[0]
    for y in bg_rows[1:]:
        if y - bottom > 6:  # Gridlines cross the area as white rows; a wider gap ends it.
            break
        bottom = y
    assert bottom - top > 150, f"the first plot area is only {bottom - top} px high"
    area = rows[top : bottom + 1]
    # At least two of the roles' curves (the answer or best, the default, the worst finite run) are drawn; a
    # curve identical to another (the best is the default here) may hide under it.
    drawn = [
        c
        for c in COLOURS[:3]
        if sum(_near(p, tuple(int(c[i : i + 2], 16) for i in (1, 3, 5))) for row in area for p in row) > 50
    ]
    assert len(drawn) >= 2, f"curves drawn in the first plot: {drawn}"
    assert top > 300, "a plot sits above the answer"
