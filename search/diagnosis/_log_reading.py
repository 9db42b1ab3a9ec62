"""What a training log says of its loss scaling: skipped steps, the scale over time, and a verdict.

Read from the lines :mod:`search.diagnosis._log_lines` knows, without re-running anything:

* **skipped steps**: one per overflow (a cut scale, or DeepSpeed's hysteresis spent; two messages of one
  overflow count once; DeepSpeed's lines of ranks other than 0 are not read); a DeepSpeed progress line's
  ``skipped=K`` counts too, where it says more (skips whose lines were not logged);
* **the initial search**: the leading overflows while the scale only falls (each cut below the one before).
  Every dynamic scaler starts high and halves down to a scale the gradients fit: those skips are expected.
  The scale has **settled** at the first overflow whose new scale is not below the last one's, i.e. the scale
  grew in between;
* **the verdict** a log can support: ``scale-collapse`` when the framework's minimum was reached (DeepSpeed
  and fairseq end the run there), or when the scale only fell and ends at 1 or below (gradients that overflow
  fp16 even unscaled: no loss scale helps); ``chronic-skipping`` when, after settling, at least
  :data:`CHRONIC_RATE` of the steps are skipped (a scaler that grows every N steps and backs off once skips
  about 1/N: 0.1% for DeepSpeed's default window of 1000, 0.05% for GradScaler's 2000); else ``healthy``.
  A log cannot tell an underflow (gradients rounded to zero skip nothing) nor a forward pass that overflows
  fp16: those need the run itself.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from search.diagnosis._log_lines import GROWTH, HYSTERESIS, MINIMUM, OVERFLOW, PROGRESS, LogLine, read_line

CHRONIC_RATE = 0.01  # Skips per step after settling: 10x the equilibrium of DeepSpeed's default window.
TITLES = {"deepspeed": "DeepSpeed", "apex": "apex", "fairseq": "fairseq"}  # As people write them.


class LogError(ValueError):
    """A log that cannot be diagnosed (no loss-scaler line; no step count to judge the skip rate by)."""


@dataclass(frozen=True)
class LogReading:
    """A log's loss scaling, read (see the module docstring).

    Attributes:
        frameworks: Whose lines the log holds.
        lines: Its loss-scaler lines, in order.
        skipped_steps: Steps the scaler skipped.
        steps: The optimizer steps the log covers: its last step number, or the ``steps`` given; None when
            neither tells and the run ended at its minimum (the verdict needs no rate then).
        scale_trace: ``(line number, step, the scale from then on)`` at each line that tells a new scale; the
            step is the last one the log numbered at or before that line (None before any).
        initial_skips: Skips of the initial search (the scale only falling).
        settled_line: The first line showing the scale had grown again (the end of the initial search), or
            None.
        later_skips: Skips from there on.
        later_rate: ``later_skips`` per step after settling, or None when the scale never settled.
        hit_minimum: The framework's minimum scale was reached (the run ended there).
        verdict: ``healthy``, ``chronic-skipping`` or ``scale-collapse``.
        reason: Why, in a sentence.
    """

    frameworks: tuple[str, ...]
    lines: tuple[LogLine, ...]
    skipped_steps: int
    steps: int | None
    scale_trace: tuple[tuple[int, int | None, float], ...]
    initial_skips: int
    settled_line: int | None
    later_skips: int
    later_rate: float | None
    hit_minimum: bool
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "frameworks": list(self.frameworks),
            "verdict": self.verdict,
            "reason": self.reason,
            "skipped_steps": self.skipped_steps,
            "steps": self.steps,
            "hit_minimum": self.hit_minimum,
            "initial_skips": self.initial_skips,
            "settled_line": self.settled_line,
            "later_skips": self.later_skips,
            "later_rate": self.later_rate,
            # A scale of inf (a broken run's fairseq line) as the string JSON can hold.
            "scale_trace": [
                {"line": n, "step": s, "scale": v if math.isfinite(v) else str(v)}
                for n, s, v in self.scale_trace
            ],
        }


def read_log_file(path: str, steps: int | None = None) -> tuple[LogReading, str]:
    """Reads the log at ``path`` (``-``: standard input) as :func:`read_log` does; (reading, its name).

    Raises:
        LogError: The file cannot be opened, or holds no loss-scale line (one line, naming it).
    """
    source = "(standard input)" if path == "-" else path
    try:
        if path == "-":
            return read_log(_lines(sys.stdin.buffer), steps), source
        with open(path, "rb") as f:
            return read_log(_lines(f), steps), source
    except OSError as e:
        raise LogError(f"--log {path}: {e.strerror or e}") from None
    except LogError as e:
        raise LogError(f"--log {source}: {e}") from None


def _lines(binary: BinaryIO) -> Iterator[str]:
    # Lines end at "\n" only: a progress bar's "\r" is not a new line (grep -n numbers them the same way).
    for raw in binary:
        yield raw.decode("utf-8", errors="replace")


def read_log(text_lines: Iterable[str], steps: int | None = None) -> LogReading:
    """Reads a log's loss-scaler lines and judges them (module docstring).

    Args:
        text_lines: The log, line by line.
        steps: The optimizer steps the log covers, for a log that numbers none (apex); a step number in the
            log wins where it is larger.

    Raises:
        LogError: No loss-scaler line; or no step count, from the log or ``steps``, where the verdict needs
            one.
    """
    lines = tuple(line for n, text in enumerate(text_lines, 1) if (line := read_line(n, text)) is not None)
    if not lines:
        raise LogError("no loss-scaler line of DeepSpeed, apex or fairseq in it")
    frameworks = tuple(sorted({line.framework for line in lines}))
    hit_minimum = any(line.kind == MINIMUM for line in lines)
    step_numbers = [line.step for line in lines if line.step is not None]
    covered = max([*step_numbers, steps or 0]) or None
    if covered is None and not hit_minimum:
        raise LogError(
            f"{', '.join(TITLES[f] for f in frameworks)} lines without step numbers: pass --steps N, the"
            " optimizer steps the log covers, to judge the skip rate"
        )
    skips = _skips(lines)
    progress_skipped = max((line.skipped for line in lines if line.skipped is not None), default=0)
    skipped = max(len(skips), progress_skipped)  # The engine's count sees skips whose lines were not logged.
    if covered is not None and skipped > covered:
        raise LogError(
            f"the log shows {skipped} skipped steps, more than the {covered} steps it covers (--steps)"
        )
    trace, step = [], None
    for line in lines:
        step = line.step if line.step is not None else step
        for scale in (
            line.scale_before,
            line.scale_after,
        ):  # Attempted (DeepSpeed), then the scale from then on.
            if scale is not None and (not trace or trace[-1][2] != scale):
                trace.append((line.number, step, scale))
    settled = _settled_line(lines)
    initial = sum(1 for line in skips if settled is None or line.number < settled)
    later = (
        skipped - initial
    )  # After settling; or, never settled, skips the engine counted and no line showed.
    settled_step = _step_at(lines, settled) if settled is not None else None
    after = None if covered is None else max(1, covered - (settled_step or 0))
    later_rate = None if after is None or (settled is None and later == 0) else later / after
    last_scale = trace[-1][2] if trace else None
    if hit_minimum:
        verdict = "scale-collapse"
        reason = "the scale fell to the framework's minimum, where it ends the run"
    elif settled is None and last_scale is not None and last_scale <= 1:
        verdict = "scale-collapse"
        reason = (
            f"the scale only fell, to {last_scale:g}: at 1 or below the gradients overflow fp16 unscaled, "
            "so no loss scale helps (a forward or backward pass that overflows, or a diverging run)"
        )
    elif later_rate is not None and later_rate >= CHRONIC_RATE:
        verdict = "chronic-skipping"
        reason = (
            f"after the scale settled, {later} of {after} steps were skipped ({later_rate:.1%}, at least "
            f"{CHRONIC_RATE:.0%}): it keeps growing into overflows; a longer growth window (DeepSpeed's "
            "loss_scale_window, GradScaler's growth_interval) or a smaller growth factor skips fewer"
        )
    elif skipped == 0:
        verdict = "healthy"
        reason = "no step was skipped: nothing to fix in the loss scaling"
    elif later_rate is None:
        verdict = "healthy"
        reason = (
            f"{initial} skip{'s' if initial != 1 else ''}, all while the scale searched down from its start; "
            "it never had to back off again: nothing to fix in the loss scaling"
        )
    else:
        verdict = "healthy"
        reason = (
            f"{initial} skip{'s' if initial != 1 else ''} while the scale searched down from its start,"
            f" {later} after it ({later_rate:.2%} of {after} steps, under {CHRONIC_RATE:.0%}): nothing to fix"
            " in the loss scaling"
        )
    return LogReading(
        frameworks,
        lines,
        skipped,
        covered,
        tuple(trace),
        initial,
        settled,
        later,
        later_rate,
        hit_minimum,
        verdict,
        reason,
    )


def _skips(lines: tuple[LogLine, ...]) -> list[LogLine]:
    """The lines that each show one skipped step: DeepSpeed may write one overflow in two messages ("Reducing
    dynamic loss scale from X to Y" and "... Attempted loss scale: X, reducing to Y"), counted once."""
    skips: list[LogLine] = []
    for line in lines:
        if line.kind not in (OVERFLOW, HYSTERESIS):
            continue
        last = skips[-1] if skips else None
        if (
            last is not None
            and line.pattern != last.pattern
            and line.number - last.number <= 3
            and (line.scale_before, line.scale_after) == (last.scale_before, last.scale_after)
        ):
            continue
        skips.append(line)
    return skips


def _settled_line(lines: tuple[LogLine, ...]) -> int | None:
    """The first line showing that the scale grew (the initial search is over), or None.

    Growth shows as a line saying so (DeepSpeed outside ZeRO), an attempted scale above the last one known
    (DeepSpeed), or a cut that lands no lower than the scale before it (apex, fairseq: each cut halves, so the
    scale had at least doubled; a scale clamped at a minimum apex was given looks the same). fairseq's
    progress lines round the scale to 4 decimals, so they do not count."""
    current = None
    for line in lines:
        if line.kind == GROWTH:
            return line.number
        if line.kind not in (OVERFLOW, HYSTERESIS):
            continue
        if line.scale_before is not None:
            if current is not None and line.scale_before > current:
                return line.number
        elif current is not None and line.scale_after is not None and line.scale_after >= current:
            return line.number
        if line.scale_after is not None:
            current = line.scale_after
    return None


def _step_at(lines: tuple[LogLine, ...], number: int) -> int | None:
    """The last step number reported at or before line ``number``."""
    step = None
    for line in lines:
        if line.number > number:
            break
        if line.kind == PROGRESS and line.step is not None:
            step = line.step
    return step


# What no log can show: said under every reading.
LIMITS = (
    "a log cannot show an underflow (gradients rounded to zero skip nothing) nor a forward pass that"
    " overflows fp16; those need the run itself"
)


def format_reading(reading: LogReading, source: str) -> list[str]:
    """The lines ``search.diagnose --log`` prints for the reading of ``source``."""
    names = ", ".join(TITLES[f] for f in reading.frameworks)
    covered = f"{reading.steps} optimizer steps" if reading.steps else "no step count"
    lines = [f"Log {source}: {names}, {len(reading.lines)} loss-scaler lines, {covered}"]
    of = f" of {reading.steps} ({reading.skipped_steps / reading.steps:.2%})" if reading.steps else ""
    if reading.skipped_steps == 0:
        where = "none"
    elif reading.settled_line:
        where = (
            f"{reading.initial_skips} while the scale searched down from its start, {reading.later_skips}"
            f" after it had grown again (line {reading.settled_line})"
        )
    else:
        unseen = reading.skipped_steps - reading.initial_skips
        where = (
            f"{reading.initial_skips} while the scale searched down from its start; it never grew again"
            + (f"; {unseen} more counted by the engine with no overflow line" if unseen else "")
        )
    lines.append(f"  skipped steps: {reading.skipped_steps}{of}: {where}")
    if reading.scale_trace:
        scales = [scale for _, _, scale in reading.scale_trace]
        first = reading.scale_trace[0]
        told = [
            line.number
            for line in reading.lines
            if line.scale_before is not None or line.scale_after is not None
        ]
        lines.append(
            f"  scale: {first[2]:g} at line {first[0]}, {scales[-1]:g} at line {told[-1]} (the last that"
            f" tells it); lowest {min(scales):g}, highest {max(scales):g}, {len(scales) - 1} changes"
        )
    lines.append(
        "  minimum scale:"
        f" {'reached: the framework ends the run there' if reading.hit_minimum else 'not reached'}"
    )
    lines.append(f"  verdict: {reading.verdict}")
    lines.append(f"    ({reading.reason})")
    lines.append(f"    note: {LIMITS}")
    return lines
