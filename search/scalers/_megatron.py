"""Megatron-LM's dynamic loss-scale rule, step for step, without Megatron.

``DynamicGradScaler.update`` (Megatron-LM ``megatron/core/optimizer/grad_scaler.py`` at commit
eedfe533a44ee918b1ad422269063af5155e1eaa) keeps its scale as a float32 tensor and, after each step:

* on an overflow, resets the growth tracker and spends one unit of hysteresis; once none is left
  (``<= 0``), it multiplies the scale by ``backoff_factor``, never below ``min_loss_scale``. Every
  further overflow backs off again until a growth refills the hysteresis. At the minimum Megatron
  **does not stop**: the scale stays clamped and steps go on being skipped;
* on a clean step, counts it; at ``loss_scale_window`` clean steps in a row it multiplies the scale
  by ``growth_factor``, refills the hysteresis and starts counting again.

Command-line flags and defaults (``megatron/training/arguments.py``): ``--initial-loss-scale`` 2^32,
``--min-loss-scale`` 1, ``--loss-scale-window`` 1000, ``--hysteresis`` 2; the optimizer factory fixes
the growth factor at 2 and the backoff at 0.5. The scale is float32 here too, so that every value
matches Megatron's bit for bit (``tests/scalers/test_megatron_fairseq.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from search.scalers._knob import FLOAT, INT, Knob, float32_of, positive, shortest, whole_at_least
from search.scalers._rule import Cycle, ScalerRule
from search.scalers._saved import SavedState


@dataclass
class MegatronScale:
    """The loss scale of one run under Megatron-LM's rule (module docstring).

    Args:
        initial_loss_scale: The scale at the start.
        min_loss_scale: The floor the scale is clamped to (training goes on there).
        loss_scale_window: Clean steps in a row before a growth.
        hysteresis: Overflows it takes to back off (refilled by a growth).
        growth_factor: Megatron's optimizer factory passes 2.
        backoff_factor: Megatron's optimizer factory passes 0.5.
    """

    initial_loss_scale: float = 2.0**32
    min_loss_scale: float = 1.0
    loss_scale_window: int = 1000
    hysteresis: int = 2
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    scale: float = field(init=False)
    _growth: int = field(init=False, default=0)
    _left: int = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.min_loss_scale <= self.initial_loss_scale:
            raise ValueError(f"min_loss_scale must be in (0, initial_loss_scale], got {self.min_loss_scale}")
        if self.loss_scale_window < 1 or self.hysteresis < 1:
            raise ValueError("loss_scale_window and hysteresis must be >= 1")
        if not self.growth_factor > 1 or not 0 < self.backoff_factor < 1:
            raise ValueError("growth_factor must be > 1 and backoff_factor in (0, 1)")
        self.scale = float32_of(self.initial_loss_scale)
        self.min_loss_scale = float32_of(self.min_loss_scale)  # Megatron holds it as a float32 tensor too.
        self._left = self.hysteresis

    def update(self, overflow: bool) -> str:
        """Moves the scale after one step: ``"backed off"``, ``"hysteresis"``, ``"at minimum"`` (backed off
        but clamped where it was), ``"grew"`` or ``"kept"``."""
        f32 = float32_of  # A float32 product: the exact float64 product of two float32s, rounded once.
        if overflow:
            self._growth = 0
            self._left -= 1
            if self._left > 0:
                return "hysteresis"
            before = self.scale
            self.scale = max(f32(f32(self.scale) * f32(self.backoff_factor)), f32(self.min_loss_scale))
            return "at minimum" if self.scale == before else "backed off"
        self._growth += 1
        if self._growth == self.loss_scale_window:
            self._growth = 0
            self._left = self.hysteresis
            self.scale = f32(f32(self.scale) * f32(self.growth_factor))
            return "grew"
        return "kept"


KNOBS = (
    Knob(
        "initial_loss_scale",
        FLOAT,
        2.0**32,
        1.0,
        2.0**32,
        True,
        *positive(),
        "--initial-loss-scale: the scale at the start; Megatron's default 2^32",
    ),
    Knob(
        "min_loss_scale",
        FLOAT,
        1.0,
        2.0**-20,
        1.0,
        True,
        *positive(),
        "--min-loss-scale: the floor the scale stays at, skipping on; Megatron's default 1",
    ),
    Knob(
        "loss_scale_window",
        INT,
        1000,
        1,
        1000,
        True,
        *whole_at_least(1),
        "--loss-scale-window: clean steps in a row before a growth (x2); Megatron's default 1000",
    ),
    Knob(
        "hysteresis",
        INT,
        2,
        1,
        8,
        False,
        *whole_at_least(1),
        "--hysteresis: overflows it takes to back off (x0.5); Megatron's default 2",
    ),
)


def _build(values: Mapping[str, float]) -> MegatronScale:
    return MegatronScale(
        initial_loss_scale=float(values["initial_loss_scale"]),
        min_loss_scale=float(values["min_loss_scale"]),
        loss_scale_window=int(values["loss_scale_window"]),
        hysteresis=int(values["hysteresis"]),
    )


def _block(values: Mapping[str, float]) -> str:
    """Megatron-LM's command-line flags, every one written out."""
    return (
        # Megatron holds both as float32 tensors: the fewest digits that give back the same float32.
        f"--fp16 --initial-loss-scale {shortest(float(values['initial_loss_scale']), float32=True)} "
        f"--min-loss-scale {shortest(float(values['min_loss_scale']), float32=True)} "
        f"--loss-scale-window {int(values['loss_scale_window'])} --hysteresis {int(values['hysteresis'])}"
    )


def _restore(scale: MegatronScale, saved: Mapping[str, Any]) -> None:
    """``DynamicGradScaler.load_state_dict``: the scale (a float32 tensor) and both trackers."""
    scale.scale = float32_of(float(saved["scale"]))
    scale._growth = int(saved["growth_tracker"])
    scale._left = int(saved["hysteresis_tracker"])


MEGATRON = ScalerRule(
    name="megatron",
    title="Megatron-LM",
    knobs=KNOBS,
    baselines=(("megatron-default", {k.name: k.default for k in KNOBS}),),
    build=_build,
    block=_block,
    cycle=lambda values: Cycle(int(values["loss_scale_window"]), 2.0, 0.5, int(values["hysteresis"])),
    start_knob="initial_loss_scale",
    window_knob="loss_scale_window",
    skips_with=("hysteresis", "min_loss_scale"),
    contour_with="hysteresis",
    source=(
        "Megatron-LM eedfe533 megatron/core/optimizer/grad_scaler.py (DynamicGradScaler.update),"
        " megatron/training/arguments.py"
    ),
    # Its state_dict holds no setting: the window, hysteresis and floor are the run's flags.
    saved=SavedState(
        keys=("scale", "growth_tracker", "hysteresis_tracker"),
        scale="scale",
        restore=_restore,
        source="Megatron-LM 00caa53 megatron/core/optimizer/grad_scaler.py (DynamicGradScaler.state_dict)",
    ),
)
