"""``python -m search.report``: one self-contained HTML page (or JSON) about a study.

:func:`main` is also the ``search-report`` console script (``search.report:main``). It reads the
study (:mod:`~search.publishing.report._reading`), builds the report (:mod:`~search.publishing.report._build`)
and writes the page or the JSON (:mod:`~search.publishing.report._page`,
:mod:`~search.publishing.report._writing`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from search.cli import OneLineParser, Session, check_output, fail, percent, prog_name, run_command
from search.core import Interrupted, UsageError, held_interrupts, interrupts_as_exceptions
from search.results import DEFAULT_TOLERANCE
from search.storage import first_line, mask_url, redact

PROG = "search.report"


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.report"),
        description=(
            "Write one self-contained HTML report (plotly embedded, opens offline) or the same numbers as"
            " JSON about a search study (GradScaler's or a framework's rule): history, importances, slices,"
            " contour, parallel coordinates, curves, skipped steps, baselines, safe ranges, a robust"
            " recommendation, confirmation."
        ),
        allow_abbrev=False,
    )
    add = p.add_argument
    add(
        "--storage",
        metavar="URL",
        default="sqlite:///study.db",
        help="Optuna storage URL [sqlite:///study.db]",
    )
    add("--study-name", default=None, help="the study [the storage's only study]")
    add(
        "--out",
        metavar="PATH",
        default=None,
        help="output file; '-': standard output [report.html, or report.json with --format json]",
    )
    add("--format", choices=("html", "json"), default="html", help="html or json [html]")
    add(
        "--tolerance",
        metavar="PCT",
        type=percent,
        default=DEFAULT_TOLERANCE * 100,
        help="safe: objective within PCT%% of the best, no non-finite value, no silent failure [1]",
    )
    return p


def _fail(message: str, code: int = 2) -> int:
    return fail(PROG, message, code)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (0 written, 2 bad input, 141 stdout closed by its reader)."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    url = args.storage
    session.urls.append(url)
    try:
        out = args.out or ("report.json" if args.format == "json" else "report.html")
        if out != "-":  # "-": standard output, as for search.diagnose --log (for a pipe: | jq ...).
            check_output("--out", out)
        with interrupts_as_exceptions():
            # Here, once the flags are read: Optuna and plotly cost a second that --help and bad input need
            # not pay.
            import optuna

            from search.publishing.report import build_report, load_snapshot, render_html, report_json

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            snapshot = load_snapshot(url, args.study_name)
            report = build_report(snapshot, args.tolerance / 100)
            text = report_json(report) if args.format == "json" else render_html(report)
    except Interrupted as e:
        return _fail(f"interrupted ({e}); nothing was written", 128 + e.signum)
    except UsageError as e:  # ReportError, and choose_study's errors.
        return _fail(redact(str(e), url) if url else str(e))
    except Exception as e:  # Reading the study failed: still bad input, nothing written.
        return _fail(f"cannot read study from {mask_url(url)}: {redact(first_line(e), url)}")
    if out == "-":
        sys.stdout.write(text)  # The report alone: no "wrote" line in the piped JSON or HTML.
        return 0
    try:
        with held_interrupts() as pending:  # The file is written whole or not at all.
            from search.publishing.report import write_report

            write_report(text, out)
        if pending:
            return _fail(
                f"interrupted ({signal.Signals(pending[0]).name}) after writing {out}", 128 + pending[0]
            )
    except OSError as e:
        return _fail(f"cannot write --out {out}: {e.strerror or first_line(e)}")
    done = report.data["n_complete"]
    print(
        f"wrote {out}: study {report.study_name!r}, {done} complete trial{'s' if done != 1 else ''}"
        f" ({args.format})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
