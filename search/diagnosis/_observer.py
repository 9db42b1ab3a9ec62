"""Watching one training run step by step: each parameter's gradients and each layer's forward output.

:func:`search.training.train` calls an observer at three points (``attach`` once the model is built,
``gradients`` after each step's backward, ``detach`` after the last step), so the diagnosis reads the very
run a trial trains, with GradScaler's (or a framework's) scale, not a copy of the loop. What it reads:

* **gradients**, as backward produced them (still scaled, before ``unscale_`` and clipping, the same place the
  trainer counts zeros), per parameter: exact zeros, whether any entry is inf/NaN (the step's overflow cause),
  the largest magnitude *unscaled* (divided by the scale in use; read where every entry is finite), over the
  first steps the median non-zero one, the magnitude below which its entries carry ``LOST_SHARE`` of its
  squared norm and that squared norm, an octave histogram of the unscaled magnitudes every few steps, and,
  given the scale another run used at step 0, how many non-zero entries would round to 0 in fp16 at that scale
  (scaled magnitude <= 2^-25: fp16's smallest subnormal is 2^-24, and round-to-nearest-even sends half of it
  to 0);
* **forward outputs** of every leaf module, per step: the largest magnitude (read where every entry is
  finite), whether any entry is inf/NaN, and the first module (in call order) whose output was not finite
  while its inputs were: where the forward pass overflowed.

Every step costs one host read, and one more on a step whose forward pass went non-finite (its inputs
checked).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from search.core import raise_pending
from search.diagnosis._evidence import FP16_ROUNDS_TO_ZERO, LOST_SHARE, LOWEST_OCTAVE, OCTAVES

_LOG2_ZERO = math.log2(FP16_ROUNDS_TO_ZERO)


@dataclass
class StepReading:
    """What one step's host read returned."""

    scale: float  # The scale the step's backward used.
    zeros: list[int]
    nonfinite: list[bool]
    largest: list[float]  # Unscaled; nan where every entry is 0 or one is inf/NaN.
    median: list[float]  # Unscaled, of the non-zero entries; nan after the first steps.
    floor: list[float]  # Unscaled: the entries below carry LOST_SHARE of the squared norm; nan after them.
    norm2: list[float]  # Unscaled squared norm; 0 after the first steps.
    would_round: list[int]  # Non-zero entries that round to 0 at the reference scale (0 without one).
    forward_largest: list[float]
    forward_nonfinite: list[bool]
    forward_origin: str | None  # The first leaf module whose output was not finite from finite inputs.


@dataclass
class RunObserver:
    """Reads every step of one run for the diagnosis (see the module docstring).

    What every step costs is kept small (the diagnosis should take about three trials' time): the exact
    medians only over the first ``median_steps`` steps (where the verdict reads them), the rounding count only
    at step 0, the histograms only every ``histogram_every`` steps, and each step's numbers in one host read.

    Args:
        reference_scales: Per step, the scale another run (the fp16 run) used: the fp32 control then counts
            how many of its non-zero gradients at step 0 would round to 0 in fp16 at that scale. None: not
            counted.
        median_steps: The first steps whose per-parameter median non-zero magnitude is read (nan after).
        histogram_every: Steps between two histogram counts (0: none).
    """

    reference_scales: Sequence[float] | None = None
    median_steps: int = 0
    histogram_every: int = 0
    names: list[str] = field(default_factory=list)
    numels: list[int] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    readings: list[StepReading] = field(default_factory=list)
    _params: list[nn.Parameter] = field(default_factory=list)
    _histograms: torch.Tensor | None = None
    _handles: list = field(default_factory=list)
    # Per forward call in this step: (layer, largest finite |output|, output all finite, the inputs).
    _calls: list[tuple[str, torch.Tensor, torch.Tensor, tuple]] = field(default_factory=list)

    def attach(self, model: nn.Module) -> None:
        """Called once the run's model exists: hooks every leaf module's forward."""
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.numels = [p.numel() for _, p in named]
        self._params = [p for _, p in named]
        device = self._params[0].device if self._params else torch.device("cpu")
        self._histograms = torch.zeros(len(named), OCTAVES, dtype=torch.float64, device=device)
        for name, module in model.named_modules():
            if next(module.children(), None) is None and name:
                self.layers.append(name)
                self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str):  # noqa: ANN202 (a forward hook)
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            if module.training:  # The final evaluation (eval mode) is not a training step.
                largest, finite = _magnitude(output)
                self._calls.append((name, largest, finite, inputs))  # Inputs are checked only if needed.

        return hook

    def gradients(self, step: int, scale: torch.Tensor) -> None:
        """Called after a step's backward, before unscaling: reads the gradients at ``scale``."""
        raise_pending()  # A Ctrl-C whose first raise was lost (search.core._interrupts): stop at this step.
        assert self._histograms is not None
        device = scale.device
        unscale = scale.double()
        detailed = step < self.median_steps
        reference = None if self.reference_scales is None or step else float(self.reference_scales[step])
        histogram = self.histogram_every and step % self.histogram_every == 0
        nan = torch.full((), math.nan, dtype=torch.float64, device=device)
        columns: list[torch.Tensor] = [unscale]  # Then 7 per parameter, read in one transfer.
        zero = torch.zeros((), dtype=torch.float64, device=device)
        for index, p in enumerate(self._params):
            g = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
            magnitude = g.abs()
            top = magnitude.amax().double()  # inf or NaN when any entry is: then the step is skipped
            columns += [
                float(g.numel()) - g.count_nonzero().double(),
                (~torch.isfinite(top)).double(),
                top / unscale,
            ]
            if detailed or reference is not None or histogram:
                nonzero = magnitude[(magnitude > 0) & torch.isfinite(magnitude)].double() / unscale
                columns += _shares(nonzero) if detailed and nonzero.numel() else [nan, nan, zero]
                if reference is not None and nonzero.numel():
                    columns.append((torch.log2(nonzero) + math.log2(reference) <= _LOG2_ZERO).sum().double())
                else:
                    columns.append(zero)
                if histogram and nonzero.numel():
                    octave = (
                        torch.log2(nonzero).floor().clamp(LOWEST_OCTAVE, LOWEST_OCTAVE + OCTAVES - 1)
                        - LOWEST_OCTAVE
                    )
                    self._histograms[index] += torch.bincount(octave.long(), minlength=OCTAVES).double()
            else:
                columns += [nan, nan, zero, zero]
        for _, largest, finite, _inputs in self._calls:
            columns += [largest.to(device), finite.double().to(device)]
        values = torch.stack(columns).tolist()
        self.readings.append(self._reading(values))

    def _reading(self, values: list[float]) -> StepReading:
        n = len(self._params)
        scale, grads, calls = values[0], values[1 : 7 * n + 1], values[7 * n + 1 :]
        forward: dict[str, tuple[float, bool]] = {}
        origin = None
        for i, (name, _largest, _finite, inputs) in enumerate(self._calls):
            largest, finite = calls[2 * i], bool(calls[2 * i + 1])
            largest = largest if finite else math.nan  # Its largest finite entry is not read on such a step.
            if origin is None and not finite and bool(_magnitude(inputs)[1]):
                origin = name  # The first non-finite output whose inputs were finite: where it overflowed.
            before = forward.get(name)  # A module called twice in a step (accumulation, a shared module).
            if before is not None:
                largest = max((v for v in (before[0], largest) if not math.isnan(v)), default=math.nan)
            forward[name] = (largest, not finite or (before is not None and before[1]))
        self._calls.clear()
        # 0: every entry zero; inf/NaN: a skipped step, whose largest finite entry is not read.
        largest = [v if 0 < v < math.inf else math.nan for v in grads[2::7]]
        return StepReading(
            scale=scale,
            zeros=[int(v) for v in grads[0::7]],
            nonfinite=[bool(v) for v in grads[1::7]],
            largest=largest,
            median=grads[3::7],
            floor=grads[4::7],
            norm2=grads[5::7],
            would_round=[int(v) for v in grads[6::7]],
            forward_largest=[forward.get(name, (math.nan, False))[0] for name in self.layers],
            forward_nonfinite=[forward.get(name, (math.nan, False))[1] for name in self.layers],
            forward_origin=origin,
        )

    def detach(self) -> None:
        """Called after the last step: removes the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def histograms(self) -> list[list[int]]:
        """Per parameter, the octave counts of its non-zero finite unscaled gradient magnitudes over the run.
        """
        return (
            [] if self._histograms is None else [[int(v) for v in row] for row in self._histograms.tolist()]
        )


def _shares(nonzero: torch.Tensor) -> list[torch.Tensor]:
    """Median, the magnitude below which the entries carry :data:`LOST_SHARE` of the squared norm, and the
    squared norm, of a parameter's non-zero unscaled gradient magnitudes."""
    ordered = nonzero.sort().values
    cumulative = (ordered * ordered).cumsum(0)
    # The first entry at which the entries before it reach LOST_SHARE: those below it carry less.
    index = torch.searchsorted(cumulative, LOST_SHARE * cumulative[-1]).clamp(max=ordered.numel() - 1)
    return [nonzero.median(), ordered[index], cumulative[-1]]


def _tensors(value: object) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a module's output or inputs (a tensor, tuple, list, dict, HF
    ModelOutput)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _magnitude(value: object) -> tuple[torch.Tensor, torch.Tensor]:
    """(largest magnitude, all finite) of the floating-point tensors in ``value``, on their device; the
    largest is inf or NaN when an entry is (two kernels a tensor: this runs on every layer's output every
    step)."""
    tops = [t.detach().abs().amax().double() for t in _tensors(value) if t.numel()]
    if not tops:
        return torch.zeros((), dtype=torch.float64), torch.tensor(True)
    top = tops[0] if len(tops) == 1 else torch.stack([t.to(tops[0].device) for t in tops]).amax()
    return top, torch.isfinite(top)
