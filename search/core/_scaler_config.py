"""The four GradScaler settings of one trial, and the line that reproduces them exactly."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalerConfig:
    """The four ``torch.amp.GradScaler`` settings one trial uses."""

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    def as_code(self, device_type: str = "cuda") -> str:
        """A copy-paste ``torch.amp.GradScaler(...)`` line that reproduces these settings exactly.

        Each value is written with the fewest digits that give back the same number (``init_scale``
        the same float32, which is what GradScaler keeps), so pasting the line re-runs the measured
        setting rather than a neighbour of it.
        """
        return (
            f'torch.amp.GradScaler("{device_type}", init_scale={_pretty_scale(self.init_scale)}, '
            f"growth_factor={_shortest(self.growth_factor)}, backoff_factor={_shortest(self.backoff_factor)}, "
            f"growth_interval={self.growth_interval})"
        )


def _shortest(value: float, same=lambda a, b: a == b) -> str:
    """``value`` with the fewest significant digits that read back as the same number."""
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if same(float(text), value):
            return text
    return repr(value)


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _pretty_scale(value: float) -> str:
    exponent = math.log2(value)
    if exponent == round(exponent):
        return f"2.0**{int(exponent)}"
    return _shortest(value, lambda a, b: _float32(a) == _float32(b))
