"""``python -m search.transfer``: copy a study to another storage, e.g. to resume it elsewhere.

``python -m search.transfer --from URL --to URL [--study-name NAME]`` copies one study (SQLite,
PostgreSQL or MySQL, in any direction) with all its trials and attrs, including the recorded
settings that ``search.optimize`` checks on resume, then reads the copy back and compares it with
what was read from the source. The copy is :func:`search.storage.transfer_study` (what it does to
RUNNING trials, trial ids and the keys that hold them: :mod:`search.storage._copy`); this command
parses the arguments, prints its report and chooses the exit code. search.confirm's sibling study
``<study>.confirm`` is copied along (``--no-confirm`` skips it), as ``<target>.confirm``.

Exit codes: 0 copied and verified, 1 the copy failed or differs from the source, 2 bad input
(nothing written to the destination). Passwords in URLs are masked in every message.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

import optuna

from search.cli import OneLineParser, Session, fail, prog_name, run_command
from search.core import Interrupted, UsageError, interrupts_as_exceptions
from search.storage import (
    TransferFailed,
    TransferReport,
    first_line,
    redact,
    transfer_study,
)

__all__ = ["build_parser", "format_report", "main"]

PROG = "search.transfer"


def format_report(report: TransferReport) -> list[str]:
    """The lines ``python -m search.transfer`` prints for ``report`` and its siblings."""
    lines = _format_one(report)
    for sibling in report.siblings:
        lines += _format_one(sibling, along=f" (search.confirm's runs of {report.study_name!r})")
    copied = [report, *report.siblings]
    names = ", ".join(
        repr(r.study_name) + ("" if r.to_study_name == r.study_name else f" as {r.to_study_name!r}")
        for r in copied
    )
    lines.append(f"studies copied: {names}")
    for name in report.skipped:
        lines.append(f"not copied: {name!r} (--no-confirm): the copy has no confirmation runs")
    return lines


def _format_one(report: TransferReport, along: str = "") -> list[str]:
    counts = ", ".join(f"{state.lower()} {n}" for state, n in report.states.items()) or "none"
    rename = "" if report.to_study_name == report.study_name else f" as {report.to_study_name!r}"
    replaced = " (replaced the study of that name there)" if report.overwritten else ""
    lines = [
        f"copied study {report.study_name!r}{rename}{along}",
        f"  from: {report.from_url}",
        f"  to:   {report.to_url}{replaced}",
        f"  trials: {report.trials} ({counts}); numbers kept, trial ids are new",
    ]
    if report.running_converted:
        numbers = ", ".join(f"#{n}" for n in report.running_converted)
        lines.append(
            f"  running: {len(report.running_converted)} trial(s) RUNNING in the source ({numbers}) "
            "copied as FAIL with fail_reason: no worker would ever finish them in the copy"
        )
    if report.aligned_distributions:
        lines.append(
            f"  distributions: {len(report.aligned_distributions)} trial(s) with one-value ranges written"
            " with the study's log flags (Optuna refuses mixed flags; a one-value range has no scale);"
            " values unchanged"
        )
    lines.append(f"  study attrs: {report.user_attrs} user, {report.system_attrs} system")
    remapped = f"{report.dashboard_keys_remapped} dashboard key(s) (trial notes, artifacts)"
    if report.sampler_keys_remapped:
        remapped += f", {report.sampler_keys_remapped} sampler key(s)"
    lines.append(f"  re-keyed to the new trial ids: {remapped}")
    if report.dropped_keys:
        lines.append(f"  not copied: {len(report.dropped_keys)} attr(s) naming no trial of the study")
    if report.artifacts:
        lines.append(
            f"  artifacts: {report.artifacts} record(s) copied; their files stay in the artifact store"
        )
    if report.verified:
        lines.append(
            "  verified: trial count, and per trial number: state, params, values, user and system "
            "attrs, intermediate values; study attrs"
        )
    else:
        lines.append("  NOT verified: " + "; ".join(report.mismatches[:5]))
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name("search.transfer"),
        description=(
            "Copy a study, with all trials and attrs, from one Optuna storage to another "
            "(SQLite, PostgreSQL, MySQL) and verify the copy. Trials RUNNING in the source are copied "
            "as FAIL; WAITING trials stay WAITING."
        ),
        allow_abbrev=False,
    )
    p.add_argument("--from", dest="from_url", metavar="URL", required=True, help="source storage URL")
    p.add_argument("--to", dest="to_url", metavar="URL", required=True, help="destination storage URL")
    p.add_argument("--study-name", default=None, help="study to copy [the source's only study]")
    p.add_argument("--to-study-name", default=None, help="its name in the destination [the same]")
    p.add_argument("--overwrite", action="store_true", help="replace a study of that name in the destination")
    p.add_argument(
        "--no-confirm",
        action="store_true",
        help=(
            "do not copy the study's search.confirm runs (its sibling study <name>.confirm), "
            "which are copied along by default"
        ),
    )
    return p


_ANY_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _clean(text: str, urls: Sequence[str]) -> str:
    """``text`` without the passwords of ``urls`` (or of anything that looks like a URL)."""
    for url in urls:
        if url:
            text = redact(text, url)
    return _ANY_PASSWORD.sub(r"\1***@", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code (0 verified copy, 1 failed, 2 bad input, 141 stdout closed)."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    urls: list[str] = []
    try:
        args = build_parser().parse_args(argv)
        urls = [args.from_url, args.to_url]
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with interrupts_as_exceptions():
            report = transfer_study(
                args.from_url,
                args.to_url,
                args.study_name,
                args.to_study_name,
                args.overwrite,
                not args.no_confirm,
            )
    except Interrupted as e:  # transfer_study removed its partial copy on the way out.
        return _fail(f"interrupted ({e}); nothing was copied (a partial copy was removed)", 128 + e.signum)
    except UsageError as e:  # TransferError, and argparse's and choose_study's errors.
        return _fail(_clean(str(e), urls), 2)
    except TransferFailed as e:
        return _fail(_clean(str(e), urls), 1)
    except Exception as e:  # Unexpected, e.g. a storage error while listing studies.
        return _fail(_clean(f"transfer failed: {first_line(e)}", urls), 1)
    for line in format_report(report):
        print(_clean(line, urls))
    if not report.all_verified:
        return _fail(
            _clean(f"the copy in {report.to_url} differs from the source; rerun with --overwrite", urls), 1
        )
    return 0


def _fail(message: str, code: int) -> int:
    return fail(PROG, message, code)


if __name__ == "__main__":
    sys.exit(main())
