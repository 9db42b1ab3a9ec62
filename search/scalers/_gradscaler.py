"""PyTorch's own rule, ``torch.amp.GradScaler``: its four settings, their defaults, and one trial's setting.

``GradScaler.update`` (torch 2.13, ``torch/amp/grad_scaler.py``; the arithmetic is
``torch._amp_update_scale_``) keeps its scale as a float32 tensor and, after each step:

* on an overflow (``found_inf``, the step skipped), multiplies the scale by ``backoff_factor`` and resets
  its count of clean steps;
* on a clean step, counts it; at ``growth_interval`` clean steps in a row it multiplies the scale by
  ``growth_factor`` and starts counting again.

The defaults (``GradScaler.__init__``): ``init_scale`` 2^16, ``growth_factor`` 2.0, ``backoff_factor`` 0.5,
``growth_interval`` 2000. They are defined here once, as the knobs' defaults (:data:`GRADSCALER`). The
trainer lets GradScaler itself move the scale, so this rule builds no state machine for training; the
answer replays its runs with :class:`GradScalerScale`, the same arithmetic in plain Python, to tell which
settings acted.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from search.scalers._knob import FLOAT, INT, Knob, format_scale, shortest, whole_at_least
from search.scalers._rule import Cycle, ScalerRule
from search.scalers._saved import SavedState

TORCH = "torch"  # --scaler's value for GradScaler's own rule.


@dataclass(frozen=True)
class ScalerConfig:
    """The four ``torch.amp.GradScaler`` settings one trial uses.

    Example:
        ::

            from search.scalers import ScalerConfig

            setting = ScalerConfig(2.0**16, 2.0, 0.5, 2000)  # PyTorch's defaults
            print(setting.as_code("cpu"))  # torch.amp.GradScaler("cpu", init_scale=2.0**16, ...)
    """

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    rule: ClassVar[str] = TORCH

    @property
    def values(self) -> dict[str, Any]:
        """The four settings by name, as a framework setting's :attr:`~search.scalers.RuleSetting.values`."""
        return {name: getattr(self, name) for name in PARAM_NAMES}

    def make(self) -> None:
        """None: GradScaler's own ``update()`` moves the scale (a framework's setting returns its state
        machine)."""
        return None

    def block(self) -> str:
        """The setting as the user writes it: the ``torch.amp.GradScaler`` line (:meth:`as_code`)."""
        return self.as_code()

    def as_code(self, device_type: str = "cuda") -> str:
        """A copy-paste ``torch.amp.GradScaler(...)`` line that reproduces these settings exactly.

        Each value is written with the fewest digits that give back the same number (``init_scale``
        the same float32, which is what GradScaler keeps), so pasting the line re-runs the measured
        setting rather than a neighbour of it.
        """
        keywords = ", ".join(f"{name}={self.written(name)}" for name in PARAM_NAMES)
        return f'torch.amp.GradScaler("{device_type}", {keywords})'

    def written(self, name: str) -> str:
        """One setting as the GradScaler line writes it: ``2.0**16``, or the fewest digits that give back the
        same number (``init_scale`` the same float32, which is what GradScaler keeps)."""
        value = getattr(self, name)
        if name == "init_scale":
            return _pretty_scale(value)
        return str(value) if name == "growth_interval" else shortest(value)


PARAM_NAMES = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
# GradScaler.state_dict()'s keys (torch/amp/grad_scaler.py): its settings, scale and count of clean steps.
GRADSCALER_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _float32(value: float) -> float:
    """``value`` rounded to float32 as C's cast does (inf where it rounds past float32's largest)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass
class GradScalerScale:
    """The loss scale of one run under GradScaler's rule, as ``torch._amp_update_scale_`` moves it.

    A transcription of ``_amp_update_scale_cpu_kernel``
    (``aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp``, torch 2.13; the CUDA kernel in
    ``aten/src/ATen/native/cuda/AmpKernels.cu`` is the same arithmetic): the scale is a float32, each factor a
    double, each product cast back to float32; a growth that would make the scale infinite is not taken.
    GradScaler has no floor: it never ends a run.

    Args:
        init_scale: The scale at the start (held as float32).
        growth_factor: The factor after ``growth_interval`` clean steps in a row.
        backoff_factor: The factor on an overflow.
        growth_interval: Clean steps in a row before a growth.
    """

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_loss_scale: float = 0.0
    scale: float = field(init=False)
    _tracker: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.scale = _float32(float(self.init_scale))

    def update(self, overflow: bool) -> str:
        """Moves the scale after one step: ``"backed off"``, ``"grew"`` or ``"kept"``."""
        if overflow:
            self.scale = _float32(self.scale * self.backoff_factor)
            self._tracker = 0
            return "backed off"
        self._tracker += 1
        if self._tracker < self.growth_interval:
            return "kept"
        self._tracker = 0
        grown = _float32(self.scale * self.growth_factor)
        if not math.isfinite(grown):
            return "kept"
        self.scale = grown
        return "grew"


def _pretty_scale(value: float) -> str:
    exponent = math.log2(value)
    if exponent == round(exponent):
        return f"2.0**{int(exponent)}"
    return shortest(value, float32=True)


KNOBS = (
    Knob("init_scale", FLOAT, 2.0**16, 2.0**-20, 2.0**32, True, (lambda v: v > 0), "> 0",
         "the scale at the start; PyTorch's default 2^16", powers_of_two=True, text=format_scale,
         flag="--init-scale"),
    Knob("growth_factor", FLOAT, 2.0, 1.01, 8.0, True, (lambda v: v > 1), "> 1",
         "the scale's factor after growth_interval clean steps; PyTorch's default 2", label="growth",
         text=lambda v: f"{v:.3g}", flag="--growth-factor"),
    Knob("backoff_factor", FLOAT, 0.5, 0.05, 0.95, False, (lambda v: 0 < v < 1), "in (0, 1)",
         "the scale's factor on an overflow; PyTorch's default 0.5", label="backoff",
         text=lambda v: f"{v:.3g}", factor=True, flag="--backoff-factor"),
    Knob("growth_interval", INT, 2000, 1, 2000, True, *whole_at_least(1),
         "clean steps in a row before a growth; PyTorch's default 2000", label="interval", text=str,
         flag="--growth-interval"),
)  # fmt: skip


def _setting(values: Mapping[str, Any]) -> ScalerConfig:
    return ScalerConfig(
        float(values["init_scale"]),
        float(values["growth_factor"]),
        float(values["backoff_factor"]),
        int(values["growth_interval"]),
    )


def _cycle(values: Mapping[str, Any]) -> Cycle:
    return Cycle(
        int(values["growth_interval"]), float(values["growth_factor"]), float(values["backoff_factor"]), 1
    )


GRADSCALER = ScalerRule(
    name=TORCH,
    title="GradScaler",
    maker="PyTorch",
    baselines_about="seed-1 to seed-5, the five configurations of the original example (docs/fairness.md)",
    knobs=KNOBS,
    # The five settings of the script this service grew from (a table of init_scale and factor pairs), with
    # PyTorch's default growth_interval, which that script left implicit. The tags are stored in studies.
    baselines=(
        (
            "seed-1",
            {"init_scale": 2.0**16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
        ),
        (
            "seed-2",
            {"init_scale": 2.0**8, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
        ),
        (
            "seed-3",
            {"init_scale": 2.0**24, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000},
        ),
        (
            "seed-4",
            {"init_scale": 2.0**16, "growth_factor": 1.5, "backoff_factor": 0.5, "growth_interval": 2000},
        ),
        (
            "seed-5",
            {"init_scale": 2.0**16, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 2000},
        ),
    ),
    build=lambda values: None,
    replay=lambda values: GradScalerScale(**_setting(values).values),
    block=lambda values: _setting(values).as_code(),
    source="torch 2.13 torch/amp/grad_scaler.py (GradScaler.update, GradScaler.__init__)",
    setting=_setting,
    cycle=_cycle,
    start_knob="init_scale",
    window_knob="growth_interval",
    grows_with=("growth_factor",),
    skips_with=("backoff_factor",),
    contour_with="backoff_factor",
    amp_dtypes=("float16", "bfloat16"),
    population=True,
    space_table="",
    # load_state_dict restores the scale and the count of clean steps: the trainer lets GradScaler do it.
    saved=SavedState(
        keys=GRADSCALER_KEYS,
        scale="scale",
        knobs={name: name for name in PARAM_NAMES[1:]},
        source="torch 2.13 torch/amp/grad_scaler.py (GradScaler.state_dict)",
    ),
)
