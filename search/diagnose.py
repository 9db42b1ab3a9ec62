"""``python -m search.diagnose --log FILE``: what a training log says of its loss scaling, without re-running it.

It reads the loss-scaler lines of a DeepSpeed, apex or fairseq log (:mod:`search.diagnosis`): the skipped steps,
the scale over time, when it settled, whether it reached the framework's minimum, and the verdict a log can
support (``healthy``, ``chronic-skipping``, ``scale-collapse``). A log cannot show an underflow (gradients
rounded to zero skip nothing) nor a forward pass that overflows fp16; the command says so with every verdict.
This command parses the arguments, prints the reading and chooses the exit code; it never imports torch.

Exit codes: 0 read, 2 bad input (no such file, no loss-scaler line, no step count; one line on stderr,
nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from search.cli import OneLineParser, Session, check_output, fail, prog_name, run_command
from search.core import UsageError

__all__ = ["build_parser", "format_reading", "main"]

PROG = "search.diagnose"
LIMITS = (
    "a log cannot show an underflow (gradients rounded to zero skip nothing) nor a forward pass that overflows "
    "fp16; those need the run itself"
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = OneLineParser(
        prog=prog_name(PROG),
        description="Explain the loss scaling of a DeepSpeed, apex or fairseq training log: skipped steps, the "
        "scale over time, whether it settled or reached its minimum, and a verdict.",
        allow_abbrev=False,
    )
    add = p.add_argument
    add("--log", metavar="FILE", required=True, help="the training log to read ('-': standard input)")
    add(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="the optimizer steps the log covers, for a log that numbers none (apex); a step number in the log "
        "wins where it is larger",
    )
    add("--json", metavar="PATH", default=None, help="write the reading as JSON (verdict, skipped_steps, hit_minimum, ...)")
    return p


def format_reading(reading, source: str) -> list[str]:  # noqa: ANN001 (search.diagnosis.LogReading: lazily imported)
    """The lines the command prints for a :class:`search.diagnosis.LogReading` of ``source``."""
    from search.diagnosis import TITLES

    names = ", ".join(TITLES[f] for f in reading.frameworks)
    covered = f"{reading.steps} optimizer steps" if reading.steps else "no step count"
    lines = [f"Log {source}: {names}, {len(reading.lines)} loss-scaler lines, {covered}"]
    of = f" of {reading.steps} ({reading.skipped_steps / reading.steps:.2%})" if reading.steps else ""
    if reading.skipped_steps == 0:
        where = "none"
    elif reading.settled_line:
        where = (f"{reading.initial_skips} while the scale searched down from its start, {reading.later_skips} after "
                 f"it had grown again (line {reading.settled_line})")  # fmt: skip
    else:
        unseen = reading.skipped_steps - reading.initial_skips
        where = f"{reading.initial_skips} while the scale searched down from its start; it never grew again" + (
            f"; {unseen} more counted by the engine with no overflow line" if unseen else "")  # fmt: skip
    lines.append(f"  skipped steps: {reading.skipped_steps}{of}: {where}")
    if reading.scale_trace:
        scales = [scale for _, _, scale in reading.scale_trace]
        first = reading.scale_trace[0]
        told = [line.number for line in reading.lines if line.scale_before is not None or line.scale_after is not None]
        lines.append(
            f"  scale: {first[2]:g} at line {first[0]}, {scales[-1]:g} at line {told[-1]} (the last that tells it); "
            f"lowest {min(scales):g}, highest {max(scales):g}, {len(scales) - 1} changes"
        )
    lines.append(f"  minimum scale: {'reached: the framework ends the run there' if reading.hit_minimum else 'not reached'}")
    lines.append(f"  verdict: {reading.verdict}")
    lines.append(f"    ({reading.reason})")
    lines.append(f"    note: {LIMITS}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit code."""
    return run_command(PROG, _main, argv)


def _main(session: Session, argv: list[str]) -> int:
    from search.diagnosis import LogError, read_log

    try:
        args = build_parser().parse_args(argv)
        if args.steps is not None and args.steps < 1:
            raise UsageError(f"--steps must be >= 1, got {args.steps}")
        if args.json:
            check_output("--json", args.json)
        source = "(standard input)" if args.log == "-" else args.log
        try:
            # Lines end at "\n" only: a progress bar's "\r" is not a new line (grep -n numbers them the same way).
            if args.log == "-":
                reading = read_log(_lines(sys.stdin.buffer), args.steps)
            else:
                with open(args.log, "rb") as f:
                    reading = read_log(_lines(f), args.steps)
        except OSError as e:
            raise UsageError(f"--log {args.log}: {e.strerror or e}") from None
        except LogError as e:
            raise UsageError(f"--log {source}: {e}") from None
    except UsageError as e:
        return fail(PROG, str(e))
    text = json.dumps({"log": source, **reading.to_dict()}, indent=2, allow_nan=False) if args.json else None
    print("\n".join(format_reading(reading, source)))
    if text is not None:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


def _lines(binary: BinaryIO) -> Iterator[str]:
    for raw in binary:
        yield raw.decode("utf-8", errors="replace")


if __name__ == "__main__":
    sys.exit(main())
