"""fairseq's dynamic loss-scale rule, step for step, without fairseq.

``DynamicLossScaler`` (fairseq ``fairseq/optim/dynamic_loss_scaler.py`` at commit
f591cc94caa85098ccf125a4782f91125b6a086d) is told of each step once: ``check_overflow`` on an
overflowing step (which it skips), ``update`` after a clean one; both count the step.

* An overflow counts towards the overflows since the last rescale; when they make up at least
  ``fp16_scale_tolerance`` of the steps since then (with the default 0: every overflow), the scale
  is halved, never below ``threshold_loss_scale`` when one is set. If the scale is then at or below
  ``min_loss_scale``, it is put back and fairseq **ends the run** ("Minimum loss scale reached"),
  which :class:`~search.scalers.ScaleAtMinimum` stands for here.
* A clean step doubles the scale when the steps since the last overflow are a multiple of
  ``fp16_scale_window`` (the first growth on the window-th clean step).

Options and defaults (``fairseq/dataclass/configs.py``): ``--fp16-init-scale`` 128,
``--fp16-scale-window`` (unset: 2^14 / (data-parallel size x update_freq)), ``--fp16-scale-tolerance``
0, ``--min-loss-scale`` 1e-4, ``--threshold-loss-scale`` none; the factor is 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from search.scalers._deepspeed import ScaleAtMinimum
from search.scalers._knob import FLOAT, INT, Knob, positive, shortest, whole_at_least
from search.scalers._rule import Cycle, ScalerRule
from search.scalers._saved import SavedState


@dataclass
class FairseqScale:
    """The loss scale of one run under fairseq's rule (module docstring).

    Args:
        fp16_init_scale: The scale at the start.
        fp16_scale_window: Clean steps after an overflow (or from the start) before a growth.
        fp16_scale_tolerance: Overflows since the last rescale, as a share of its steps, that halve the scale.
        min_loss_scale: A scale at or below it ends the run.
        threshold_loss_scale: A floor the halving stops at (None: none).
    """

    fp16_init_scale: float = 128.0
    fp16_scale_window: int = 2**14
    fp16_scale_tolerance: float = 0.0
    min_loss_scale: float = 1e-4
    threshold_loss_scale: float | None = None
    scale: float = field(init=False)
    _iteration: int = field(init=False, default=0)
    _last_overflow: int = field(init=False, default=-1)
    _last_rescale: int = field(init=False, default=-1)
    _overflows: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if (
            self.fp16_scale_window < 1
            or not 0 <= self.fp16_scale_tolerance <= 1
            or not self.min_loss_scale > 0
        ):
            raise ValueError(
                "fp16_scale_window must be >= 1, fp16_scale_tolerance in [0, 1], min_loss_scale > 0"
            )
        self.scale = float(self.fp16_init_scale)

    def update(self, overflow: bool) -> str:
        """Moves the scale after one step: ``"backed off"``, ``"tolerated"`` (an overflow under the
        tolerance), ``"grew"`` or ``"kept"``.

        Raises:
            ScaleAtMinimum: The scale would reach ``min_loss_scale``: fairseq ends the run.
        """
        if not overflow:
            event = "kept"
            if (self._iteration - self._last_overflow) % self.fp16_scale_window == 0:
                self.scale *= 2.0
                self._last_rescale = self._iteration
                event = "grew"
            self._iteration += 1
            return event
        before = self.scale
        since_rescale = self._iteration - self._last_rescale
        self._last_overflow = self._iteration
        self._overflows += 1
        event = "tolerated"
        if self._overflows / float(since_rescale) >= self.fp16_scale_tolerance:
            self.scale /= 2.0
            if self.threshold_loss_scale is not None:
                self.scale = max(self.scale, self.threshold_loss_scale)
            self._last_rescale = self._iteration
            self._overflows = 0
            event = "backed off"
        if self.scale <= self.min_loss_scale:
            self.scale = before
            raise ScaleAtMinimum(
                f"loss scale reached its minimum {self.min_loss_scale:g} at step {self._iteration + 1}: "
                "fairseq ends the run here"
            )
        self._iteration += 1
        return event


KNOBS = (
    Knob(
        "fp16_init_scale",
        INT,
        128,
        1,
        2**32,
        True,
        *whole_at_least(1),
        "--fp16-init-scale: the scale at the start (a whole number); fairseq's default 128",
    ),
    Knob(
        "fp16_scale_window",
        INT,
        2**14,
        1,
        2**14,
        True,
        *whole_at_least(1),
        "--fp16-scale-window: clean steps after an overflow before a growth (x2); fairseq's default 2^14 on"
        " one GPU",
    ),
    Knob(
        "fp16_scale_tolerance",
        FLOAT,
        0.0,
        0.0,
        0.5,
        False,
        (lambda v: 0 <= v <= 1),
        "in [0, 1]",
        "--fp16-scale-tolerance: overflows since the last rescale, as a share of its steps, that halve the"
        " scale; default 0",
    ),
    Knob(
        "min_loss_scale",
        FLOAT,
        1e-4,
        1e-8,
        1.0,
        True,
        *positive(),
        "--min-loss-scale: a scale at or below it ends the run; fairseq's default 1e-4",
    ),
    Knob(
        "threshold_loss_scale",
        FLOAT,
        0.0,
        1e-4,
        1.0,
        True,
        (lambda v: v >= 0),
        ">= 0 (0: none)",
        "--threshold-loss-scale: a floor the halving stops at; 0 means none (fairseq's default); searched"
        " from low/high",
        fixed=0.0,
    ),
)


def _build(values: Mapping[str, float]) -> FairseqScale:
    threshold = float(values["threshold_loss_scale"])
    return FairseqScale(
        fp16_init_scale=float(values["fp16_init_scale"]),
        fp16_scale_window=int(values["fp16_scale_window"]),
        fp16_scale_tolerance=float(values["fp16_scale_tolerance"]),
        min_loss_scale=float(values["min_loss_scale"]),
        threshold_loss_scale=threshold if threshold > 0 else None,  # A floor of 0 never acts: none.
    )


def _block(values: Mapping[str, float]) -> str:
    """fairseq's command-line flags, every one written out (the window too: unset, it depends on the GPUs)."""
    threshold = float(values["threshold_loss_scale"])
    return (
        f"--fp16 --fp16-init-scale {int(values['fp16_init_scale'])} "
        f"--fp16-scale-window {int(values['fp16_scale_window'])} "
        f"--fp16-scale-tolerance {shortest(float(values['fp16_scale_tolerance']))} "
        f"--min-loss-scale {shortest(float(values['min_loss_scale']))}"
        + (f" --threshold-loss-scale {shortest(threshold)}" if threshold > 0 else "")
    )


def _notes(values: Mapping[str, float]) -> list[str]:
    return [
        "--fp16-scale-window is written out: unset, fairseq divides 2^14 by the data-parallel size x"
        " --update-freq"
    ]


FAIRSEQ = ScalerRule(
    name="fairseq",
    title="fairseq",
    knobs=KNOBS,
    baselines=(("fairseq-default", {k.name: k.default for k in KNOBS}),),
    build=_build,
    block=_block,
    cycle=lambda values: Cycle(int(values["fp16_scale_window"]), 2.0, 0.5, 1),
    start_knob="fp16_init_scale",
    window_knob="fp16_scale_window",
    skips_with=("fp16_scale_tolerance", "min_loss_scale", "threshold_loss_scale"),
    contour_with="fp16_scale_window",
    source=(
        "fairseq f591cc94 fairseq/optim/dynamic_loss_scaler.py (DynamicLossScaler),"
        " fairseq/dataclass/configs.py"
    ),
    notes=_notes,
    # Its fp16 optimizers save the scale alone and load it into a scaler whose counters start afresh.
    saved=SavedState(
        keys=("loss_scale",),
        scale="loss_scale",
        source="fairseq f591cc94 fairseq/optim/fp16_optimizer.py (_FP16OptimizerMixin.state_dict)",
        only=True,
    ),
)
