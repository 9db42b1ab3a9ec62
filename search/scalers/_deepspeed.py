"""DeepSpeed's dynamic loss-scale rule, step for step, without DeepSpeed, and its ``fp16`` config block.

DeepSpeed's fp16 optimizers do not use GradScaler: ``DynamicLossScaler.update_scale`` (deepspeed
0.19.8, ``deepspeed/runtime/fp16/loss_scaler.py``) moves the scale after every step, by a fixed factor
of 2, with **hysteresis**:

* an overflowing step is skipped. While more than one unit of hysteresis is left (and ``hysteresis``
  is above 1), it only spends one; the overflow that finds one left halves the scale, down to
  ``min_loss_scale``. An overflow when the scale is already at the minimum **ends the run**
  ("Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."),
  which :class:`ScaleAtMinimum` stands for here;
* a clean step doubles the scale when the clean steps since the last overflow, minus one, are a
  positive multiple of ``loss_scale_window`` (so the first growth comes on the window + 1-th clean
  step after an overflow, or on step ``window`` + 1 of a run), and then refills the hysteresis;
  with ``consecutive_hysteresis`` every clean step refills it.

The JSON ``fp16`` keys and their defaults (``deepspeed/runtime/constants.py``): ``initial_scale_power``
16 (the scale starts at 2^16), ``loss_scale_window`` 1000, ``hysteresis`` 2, ``consecutive_hysteresis``
false, ``min_loss_scale`` 1; ZeRO given none of these keys starts at 2^32 with hysteresis 1.
``tests/scalers/test_deepspeed.py`` runs DeepSpeed's own class beside this one on random overflow
sequences.

This is the rule of ZeRO's optimizers (stages 1-3 build ``DynamicLossScaler``). Without ZeRO,
DeepSpeed's ``FP16_Optimizer`` moves the scale itself (``runtime/fp16/fused_optimizer.py``,
``_update_scale``): it halves on every overflow, ignores hysteresis and stays at the minimum.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from search.scalers._knob import BOOL, INT, Knob, flag, shortest, whole_at_least
from search.scalers._rule import Cycle, ScalerRule
from search.scalers._saved import SavedState


class ScaleAtMinimum(Exception):
    """DeepSpeed would end the run: an overflow with the scale already at ``min_loss_scale``."""


@dataclass
class DeepSpeedScale:
    """The loss scale of one run under DeepSpeed's rule (module docstring).

    Example:
        ::

            scale = DeepSpeedScale(initial_scale_power=16, hysteresis=2)
            scale.update(overflow=True)   # "hysteresis": the step is skipped, the scale stays 65536
            scale.update(overflow=True)   # "backed off": 32768

    Args:
        initial_scale_power: The scale starts at ``2 ** initial_scale_power``.
        loss_scale_window: Clean steps between growths.
        hysteresis: Overflows (DeepSpeed's ``delayed_shift``) it takes to halve the scale.
        consecutive_hysteresis: Refill the hysteresis on every clean step, not only on growth.
        min_loss_scale: The scale never goes below it; an overflow there ends the run.
    """

    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    consecutive_hysteresis: bool = False
    min_loss_scale: float = 1.0
    scale: float = field(init=False)
    _left: int = field(init=False)  # Hysteresis left (DeepSpeed's cur_hysteresis).
    _iteration: int = field(init=False, default=0)
    _last_overflow: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        if self.loss_scale_window < 1 or self.hysteresis < 1 or not self.min_loss_scale > 0:
            raise ValueError(
                "loss_scale_window and hysteresis must be >= 1 and min_loss_scale > 0, got"
                f" {self.loss_scale_window}, {self.hysteresis}, {self.min_loss_scale}"
            )
        self.scale = 2.0**self.initial_scale_power
        self._left = self.hysteresis

    def update(self, overflow: bool) -> str:
        """Moves the scale after one step; returns what happened: ``"backed off"``, ``"hysteresis"``,
        ``"grew"`` or ``"kept"``.

        Raises:
            ScaleAtMinimum: An overflow with the scale at ``min_loss_scale``: DeepSpeed ends the run.
        """
        event = "kept"
        if overflow:
            if self.hysteresis == 1 or self._left == 1:
                if self.scale == self.min_loss_scale:
                    raise ScaleAtMinimum(
                        f"loss scale already at its minimum {self.min_loss_scale:g} at step"
                        f" {self._iteration + 1}: DeepSpeed ends the run here"
                    )
                self.scale = max(self.scale / 2.0, self.min_loss_scale)
                event = "backed off"
            else:
                self._left -= 1
                event = "hysteresis"
            self._last_overflow = self._iteration
        else:
            if self.consecutive_hysteresis:
                self._left = self.hysteresis
            stable = self._iteration - self._last_overflow - 1
            if stable > 0 and stable % self.loss_scale_window == 0:
                if not self.consecutive_hysteresis:
                    self._left = self.hysteresis
                self.scale *= 2.0
                event = "grew"
        self._iteration += 1
        return event


KNOBS = (
    Knob(
        "initial_scale_power",
        INT,
        16,
        0,
        32,
        False,
        *whole_at_least(0),
        "the scale starts at 2^power; DeepSpeed's default 16",
        octaves=True,
    ),
    Knob(
        "loss_scale_window",
        INT,
        1000,
        1,
        1000,
        True,
        *whole_at_least(1),
        "clean steps between growths (x2); DeepSpeed's default 1000",
    ),
    Knob(
        "hysteresis",
        INT,
        2,
        1,
        8,
        False,
        *whole_at_least(1),
        "overflows it takes to halve the scale (ZeRO only); DeepSpeed's default 2",
    ),
    Knob(
        "consecutive_hysteresis",
        BOOL,
        0,
        0,
        1,
        False,
        *flag(),
        "1: every clean step refills the hysteresis, 0: only a growth; DeepSpeed's default 0",
    ),
    # DeepSpeed 0.19.8's config takes a whole number here (runtime/precision_config.py): 0.5 is refused.
    Knob(
        "min_loss_scale",
        INT,
        1,
        1,
        1024,
        True,
        *whole_at_least(1),
        "an overflow at this scale ends the run (a whole number); DeepSpeed's default 1",
    ),
)


def _build(values: Mapping[str, float]) -> DeepSpeedScale:
    return DeepSpeedScale(
        initial_scale_power=int(values["initial_scale_power"]),
        loss_scale_window=int(values["loss_scale_window"]),
        hysteresis=int(values["hysteresis"]),
        consecutive_hysteresis=bool(values["consecutive_hysteresis"]),
        min_loss_scale=float(values["min_loss_scale"]),
    )


def _block(values: Mapping[str, float]) -> str:
    """The ``fp16`` block of a DeepSpeed config, every key written out (``loss_scale`` 0: dynamic)."""
    keys = {
        "enabled": True,
        "loss_scale": 0,
        "initial_scale_power": int(values["initial_scale_power"]),
        "loss_scale_window": int(values["loss_scale_window"]),
        "hysteresis": int(values["hysteresis"]),
        "consecutive_hysteresis": bool(values["consecutive_hysteresis"]),
        "min_loss_scale": "@",
    }
    text = json.dumps({"fp16": keys}, indent=2)
    return text.replace('"@"', shortest(float(values["min_loss_scale"])))


def _config(values: Mapping[str, float]) -> dict[str, Any]:
    """The block read back as JSON: what the config file holds, the same numbers as the printed block."""
    return json.loads(_block(values))


def _notes(values: Mapping[str, float]) -> list[str]:
    if int(values["hysteresis"]) == 1 and not values["consecutive_hysteresis"]:
        return [
            "the measured rule is ZeRO's (stages 1-3); without ZeRO DeepSpeed's FP16_Optimizer also stays at"
            " min_loss_scale instead of ending the run"
        ]
    return [
        f"this relies on hysteresis {int(values['hysteresis'])}"
        + (" with consecutive_hysteresis" if values["consecutive_hysteresis"] else "")
        + ", which only ZeRO's optimizers (stages 1-3) honour: without ZeRO every overflow halves the scale"
    ]


def _restore(scale: DeepSpeedScale, saved: Mapping[str, Any]) -> None:
    """The counters of a ``DynamicLossScaler`` that ZeRO pickled whole (``stage_1_and_2.py``, ``state_dict``:
    ``state_dict[LOSS_SCALER] = self.loss_scaler``), as loading it back goes on from them."""
    scale.scale = float(saved["cur_scale"])
    scale._iteration = int(saved["cur_iter"])
    scale._last_overflow = int(saved["last_overflow_iter"])
    scale._left = int(saved["cur_hysteresis"])


DEEPSPEED = ScalerRule(
    name="deepspeed",
    title="DeepSpeed",
    knobs=KNOBS,
    baselines=(
        ("deepspeed-default", {k.name: k.default for k in KNOBS}),
        # ZeRO given an fp16 block without these keys: 2^32 and hysteresis 1.
        (
            "deepspeed-zero-no-keys",
            {**{k.name: k.default for k in KNOBS}, "initial_scale_power": 32, "hysteresis": 1},
        ),
    ),
    build=_build,
    block=_block,
    config=_config,
    cycle=lambda values: Cycle(int(values["loss_scale_window"]), 2.0, 0.5, int(values["hysteresis"])),
    start_knob="initial_scale_power",
    window_knob="loss_scale_window",
    skips_with=("hysteresis", "consecutive_hysteresis", "min_loss_scale"),
    contour_with="hysteresis",
    source=(
        "deepspeed 0.19.8 deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale),"
        " runtime/constants.py"
    ),
    notes=_notes,
    saved=SavedState(
        keys=("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"),
        scale="cur_scale",
        knobs={
            "scale_window": "loss_scale_window",
            "delayed_shift": "hysteresis",
            "consecutive_hysteresis": "consecutive_hysteresis",
            "min_scale": "min_loss_scale",
        },
        restore=_restore,
        source=(
            "deepspeed 0.19.8 deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.__init__),"
            " runtime/zero/stage_1_and_2.py (state_dict)"
        ),
    ),
)
