"""One setting of a framework's loss scaler: its own name, its default, its search range, its rule.

A study of ``--scaler deepspeed`` searches DeepSpeed's own knobs under DeepSpeed's own names, so the
answer is written in the form the user's config already has. Each :class:`Knob` says what values the
framework accepts (``valid``), where the search starts (``low``, ``high``, ``log``, or ``fixed``) and
what the framework does when the key is not given (``default``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

# A knob's kind; a bool is searched as 0/1.
INT = "int"
FLOAT = "float"
BOOL = "bool"


@dataclass(frozen=True)
class Knob:
    """One setting of a framework's scaler.

    Args:
        name: The framework's own name of the setting (the study's param name).
        kind: ``"int"``, ``"float"`` or ``"bool"`` (stored as 0 or 1).
        default: What the framework uses when the setting is not given.
        low: The lower end of the range searched by default.
        high: The upper end of the range searched by default.
        log: Sample on a log scale.
        valid: Whether the framework accepts a value.
        rule: ``valid`` in words, for an error message (``"a whole number >= 1"``).
        comment: What the setting does, one line for ``configs/default.toml``.
        fixed: Not searched by default but fixed at this value (None: searched).
        octaves: Whether a step of 1 in the value is an octave already (a power of two's exponent):
            the landscape then reads the value as it is, not its log2.
        powers_of_two: Whether a config may search it as powers of two only (an integer exponent).
        label: Its column's name in a table (its name unless given).
        text: How a table writes a value (None: every digit the rule is given, :func:`shortest`).
        flag: The command-line flag of its own (GradScaler's ``--init-scale``); empty where the commands take
            it as ``--knob NAME=VALUE``.
        factor: Whether the value multiplies the scale (a back-off factor): the answer then measures it in
            octaves, as a knob searched on a log scale, though it is sampled evenly.
    """

    name: str
    kind: str
    default: float
    low: float
    high: float
    log: bool
    valid: Callable[[float], bool]
    rule: str
    comment: str
    fixed: float | None = None
    octaves: bool = False
    powers_of_two: bool = False
    label: str = ""
    text: Callable[[float], str] | None = None
    factor: bool = False
    flag: str = ""

    def coordinate(self, value: float) -> float:
        """The value's place on the axis the answer measures distances on (:mod:`search.results`):
        octaves for a scale, a factor, a window or a count searched on a log scale; the value itself
        otherwise (an exponent, a share, a flag)."""
        return math.log2(value) if (self.log or self.factor) and value > 0 else float(value)

    def cell(self, value: float) -> str:
        """``value`` as a table writes it (:attr:`text`; else a flag as true/false, a number with every
        digit)."""
        if self.text is not None:
            return self.text(value)
        if self.kind == BOOL:
            return "true" if value else "false"
        return shortest(value) if isinstance(value, float) else str(value)

    def cast(self, value: float) -> float | int:
        """``value`` as the framework takes it: a whole number for an int or bool knob."""
        return int(round(value)) if self.kind in (INT, BOOL) else float(value)


def whole_at_least(minimum: int) -> tuple[Callable[[float], bool], str]:
    """A ``valid``/``rule`` pair: a whole number >= ``minimum``."""
    return (lambda v: float(v).is_integer() and v >= minimum), f"a whole number >= {minimum}"


def positive() -> tuple[Callable[[float], bool], str]:
    """A ``valid``/``rule`` pair: a number > 0."""
    return (lambda v: v > 0), "> 0"


def flag() -> tuple[Callable[[float], bool], str]:
    """A ``valid``/``rule`` pair: 0 (false) or 1 (true)."""
    return (lambda v: v in (0, 1)), "0 (false) or 1 (true)"


def shortest(value: float, float32: bool = False) -> str:
    """``value`` with the fewest significant digits that read back as the same float (``1e-04``, ``0.37``);
    with ``float32``, the same float32, for a framework that holds the value as one (Megatron's scales)."""
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    same = (
        (lambda text: float32_of(float(text)) == float32_of(value))
        if float32
        else (lambda text: float(text) == value)
    )
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if same(text):
            return text
    return repr(value)


def float32_of(value: float) -> float:
    """``value`` rounded to the nearest float32, as a float (inf past float32's range), as
    ``float(numpy.float32(value))`` gives it, without importing numpy (a command's start-up)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def format_scale(value: float) -> str:
    """A loss scale as people read it: ``2^16`` for an exact power of two, else ``2^16.37``."""
    exponent = math.log2(value) if value > 0 else math.nan
    if not math.isfinite(exponent):
        return f"{value:g}"
    return f"2^{exponent:.0f}" if exponent == round(exponent) else f"2^{exponent:.2f}"
