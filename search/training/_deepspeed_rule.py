"""DeepSpeed's dynamic loss-scale rule, step for step, without DeepSpeed (issue 27, its first piece).

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
false, ``min_loss_scale`` 1. ``tests/training/test_deepspeed_rule.py`` runs DeepSpeed's own class
beside this one on random overflow sequences.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
                f"loss_scale_window and hysteresis must be >= 1 and min_loss_scale > 0, got {self.loss_scale_window}, "
                f"{self.hysteresis}, {self.min_loss_scale}"
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
                        f"loss scale already at its minimum {self.min_loss_scale:g} at step {self._iteration + 1}: "
                        "DeepSpeed ends the run here"
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
