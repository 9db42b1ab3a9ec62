"""What one diagnosed run measured, as plain numbers: its curves, each parameter's gradients, each layer's
forward.

No torch here: the verdict, the command's lines, the JSON and the page all read these, and a test can build
them by hand. :mod:`search.diagnosis._training_runs` fills them from a real run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

FP16_MAX = 65504.0  # The largest finite fp16 number; a scaled gradient or an activation above it is inf.
FP16_SMALLEST = 2.0**-24  # fp16's smallest subnormal (one significant bit).
FP16_ROUNDS_TO_ZERO = 2.0**-25  # A magnitude at or below this rounds to exactly 0 in fp16.
# The share of a parameter's squared gradient norm its smallest entries may carry and still round to 0: at the
# needed scale no parameter loses more than a tenth of it.
LOST_SHARE = 0.1
# A parameter whose gradient carries less than this share of the model's squared gradient norm is zero or
# rounding noise (its norm under fp32's unit roundoff, 2^-24, of the whole gradient's): the attention key
# bias, which softmax ignores by construction. No scale is chosen for it.
NOISE_SHARE = 2.0**-48
LOWEST_OCTAVE = -64  # The gradient histograms count octaves 2^-64 .. 2^31 (outside: the end bins).
OCTAVES = 96


@dataclass(frozen=True)
class ParameterGradients:
    """One parameter's gradients over a run, unscaled (divided by the scale in use at each step).

    Attributes:
        name: The parameter's name in the model (``net.0.weight``).
        size: Its number of entries.
        zero_share: Exact zeros of its gradients as backward produced them, over the steps not skipped.
        would_round_share: In the fp32 control: the share of its non-zero gradient entries at step 0 (the one
            step where both runs have the same weights) that round to 0 in fp16 at the scale the fp16 run used
            there (nan: all zero at step 0; None in other runs).
        largest: Its largest finite gradient magnitude over the steps not skipped (nan: always zero).
        first_median: The smallest per-step median of its non-zero magnitudes over the first steps of the
            run (``start_steps``).
        first_floor: The smallest per-step magnitude below which its entries carry :data:`LOST_SHARE` of its
            squared gradient norm, over the first steps: what ``init_scale`` alone must keep representable for
            the step to lose at most a tenth of this gradient's squared norm (nan: no non-zero gradient).
        update_share: Its share of the model's squared gradient norm over the first steps (under
            :data:`NOISE_SHARE`: zero or rounding noise, left out of the needed scale and of underflow).
        overflow_steps: The steps at which one of its gradient entries was inf or NaN.
        histogram: Its non-zero finite magnitudes per octave, from ``2^LOWEST_OCTAVE``, counted at about 32
            steps spread over the run (the fp32 control's; empty counts in the other runs).
    """

    name: str
    size: int
    zero_share: float
    would_round_share: float | None
    largest: float
    first_median: float
    first_floor: float
    update_share: float
    overflow_steps: tuple[int, ...]
    histogram: tuple[int, ...]


@dataclass(frozen=True)
class LayerForward:
    """One leaf module's forward outputs over a run.

    Attributes:
        name: The module's name in the model.
        largest: The largest magnitude of its outputs over the steps they were all finite (nan: none such).
        nonfinite_steps: Steps at which an output entry was inf or NaN.
        origin_steps: Steps at which it was the first module whose output was not finite from finite inputs.
    """

    name: str
    largest: float
    nonfinite_steps: tuple[int, ...]
    origin_steps: tuple[int, ...]


@dataclass(frozen=True)
class RunEvidence:
    """One diagnosed run: the settings' fp16 run, or a control (fp32, bf16).

    Attributes:
        label: ``fp16``, ``fp32`` or ``bf16``.
        losses: Each step's training loss (before its update).
        scales: The scale each step's backward used (the fp32 and bf16 controls: 1).
        skipped: Per step, whether the step was skipped (an inf/NaN gradient).
        eval_loss: The final weights' evaluation, as every trial is judged.
        initial_eval_loss: The same of the initial weights.
        learned: Whether the run learned, as the objective judges it (evaluation fell by the threshold).
        failure: The failure code a trial of this run would store (``none``, ``underflow``, ...).
        zero_share: Exact zero gradients over all parameters, over the steps not skipped.
        ended_by_rule: Why a framework's rule ended the run at its minimum scale, or "".
        min_scale: The rule's minimum scale, or None (GradScaler has none).
        planned_steps: The steps the run was to take.
        start_steps: The first steps ``first_median`` and ``first_floor`` look at.
        parameters: Per parameter, its gradients.
        layers: Per leaf module, its forward outputs.
        step_largest: Per step, the largest finite unscaled gradient magnitude of any parameter (nan: every
            entry zero, or the step skipped): how far each step's gradients reach, spike by spike.
        seconds: The run's wall time.
        first_step: The user's run's global step of this run's first step (its checkpoint's, else 0).
    """

    label: str
    losses: tuple[float, ...]
    scales: tuple[float, ...]
    skipped: tuple[bool, ...]
    eval_loss: float
    initial_eval_loss: float
    learned: bool
    failure: str
    zero_share: float
    ended_by_rule: str
    min_scale: float | None
    planned_steps: int
    start_steps: int
    parameters: tuple[ParameterGradients, ...] = field(default=())
    layers: tuple[LayerForward, ...] = field(default=())
    step_largest: tuple[float, ...] = field(default=())
    seconds: float = 0.0
    first_step: int = 0

    @property
    def steps(self) -> int:
        """The steps taken."""
        return len(self.losses)

    @property
    def skipped_steps(self) -> int:
        """How many steps were skipped."""
        return sum(self.skipped)

    @property
    def finite(self) -> bool:
        """Whether every loss and the final evaluation are finite."""
        return all(math.isfinite(v) for v in self.losses) and math.isfinite(self.eval_loss)

    def largest_gradient(self) -> float:
        """The largest finite gradient magnitude of any parameter (nan: none)."""
        values = [p.largest for p in self.parameters if math.isfinite(p.largest)]
        return max(values) if values else math.nan

    def counted(self) -> tuple[ParameterGradients, ...]:
        """The parameters whose gradients are more than rounding noise (:data:`NOISE_SHARE`)."""
        return tuple(p for p in self.parameters if p.update_share >= NOISE_SHARE)

    def forward_origins(self) -> dict[str, tuple[int, ...]]:
        """The layers where the forward pass overflowed, with the steps (in the order of the model's layers).
        """
        return {layer.name: layer.origin_steps for layer in self.layers if layer.origin_steps}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; non-finite numbers as None."""
        return json_ready(asdict(self))


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float as None, through dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


@dataclass(frozen=True)
class DiagnosisRuns:
    """The runs of one diagnosis: ``fp16`` with the user's settings, the ``fp32`` control and, where the
    device has it, the ``bf16`` control (None otherwise)."""

    fp16: RunEvidence
    fp32: RunEvidence
    bf16: RunEvidence | None

    def all(self) -> tuple[RunEvidence, ...]:
        """The runs that were trained, fp16 first."""
        return tuple(run for run in (self.fp16, self.fp32, self.bf16) if run is not None)
