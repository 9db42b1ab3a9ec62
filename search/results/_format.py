"""Settings as people read them: one value, a range, a point, a list of trials.

Every sentence of the analysis and every table of the summary and the report writes a setting the
same way: a start scale (``init_scale``, Megatron-LM's ``initial_loss_scale``) as a power of two, a
whole-number knob (``growth_interval``, a window, a hysteresis) in whole numbers, the factors to three
significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from search.scalers import BOOL, INT, RULES, format_scale

# The knobs written as powers of two (a start scale the rule takes as a scale, not as its exponent), and those
# written as whole numbers, by name across every rule.
_SCALES = frozenset(r.start_knob for r in RULES.values() if not r.knob(r.start_knob).octaves)
_WHOLE = (
    frozenset(k.name for r in RULES.values() for k in r.knobs if k.kind in (INT, BOOL))
    - _SCALES
    - frozenset(k.name for r in RULES.values() for k in r.knobs if k.kind not in (INT, BOOL))
)  # min_loss_scale is whole for DeepSpeed only: written with digits for every rule


def format_value(param: str, value: float) -> str:
    """A setting as people read it: ``2^7.74`` for init_scale, ``1.93``, ``0.469``, ``662``."""
    if param in _SCALES:
        return format_scale(value)
    if param in _WHOLE:
        return str(round(value))
    return f"{value:.3g}"


_MOST_DIGITS = 6  # Ends that still read the same at this many digits are one value for a reader.


def format_ends(param: str, low: float, high: float) -> tuple[str, str]:
    """A range's two ends as :func:`format_value` writes them, with more digits only where that would write
    two different values the same (``2^19.701``, ``2^19.704``, not ``2^19.70`` twice); equal values read the
    same.
    """
    if low == high or param in _WHOLE:
        return format_value(param, low), format_value(param, high)
    if param in _SCALES and low > 0 and high > 0:
        ends = (math.log2(low), math.log2(high))
        for digits in range(2, _MOST_DIGITS + 1):  # format_scale's two decimals first
            if f"{ends[0]:.{digits}f}" != f"{ends[1]:.{digits}f}":
                first, last = (f"2^{e:.0f}" if e == round(e) else f"2^{e:.{digits}f}" for e in ends)
                return first, last
    elif param not in _SCALES:
        for digits in range(3, _MOST_DIGITS + 2):  # format_value's three significant digits first
            if f"{low:.{digits}g}" != f"{high:.{digits}g}":
                return f"{low:.{digits}g}", f"{high:.{digits}g}"
    return format_value(param, low), format_value(param, high)


def format_range(param: str, low: float, high: float) -> str:
    """A range as people read it: ``2^14..2^18``; one value when both ends are one (:func:`format_ends`)."""
    lo, hi = format_ends(param, low, high)
    return lo if lo == hi else f"{lo}..{hi}"


def format_point(point: dict[str, float], names: Iterable[str]) -> str:
    """Some settings of a point, named: ``init_scale 2^16, growth_factor 2``."""
    return ", ".join(f"{p} {format_value(p, point[p])}" for p in names)


def trial_list(numbers: Sequence[int], limit: int = 5) -> str:
    """Trial numbers as ``#3, #7 and 2 more``: the first ``limit``, then how many are left."""
    shown = ", ".join(f"#{n}" for n in numbers[:limit])
    return shown + (f" and {len(numbers) - limit} more" if len(numbers) > limit else "")


def offsets_text(offsets: dict[str, float]) -> str:
    """Where one point lies from another, a setting at a time: ``init_scale 11.2 octaves higher,
    growth_interval
    3.1 octaves lower`` (largest first; a setting that differs by less than 0.05 octaves is left out)."""
    moved = sorted(((p, d) for p, d in offsets.items() if abs(d) >= 0.05), key=lambda pd: -abs(pd[1]))
    parts = [
        f"{p} {abs(d):.1f} octave{'' if f'{abs(d):.1f}' == '1.0' else 's'} {'higher' if d > 0 else 'lower'}"
        for p, d in moved
    ]
    return ", ".join(parts) if parts else "every setting within 0.05 octaves of it"


def study_heading(title: str, states: dict[str, int], has_best: bool) -> list[str]:
    """A summary's first lines: ``title``, the trial counts by state, and a line when no trial completed."""
    counts = ", ".join(f"{n.lower()} {c}" for n, c in states.items() if c)
    return [title, f"  trials: {counts or 'none'}"] + ([] if has_best else ["  no completed trial yet"])
