"""Watching one training run step by step: each parameter's gradients and each layer's forward output.

:func:`search.training.train` calls an observer at three points (``attach`` once the model is built,
``gradients`` after each step's backward, ``detach`` after the last step), so the diagnosis reads the very
run a trial trains, with GradScaler's (or a framework's) scale, not a copy of the loop. What it reads:

* **gradients**, as backward produced them (still scaled, before ``unscale_`` and clipping, the same place
  the trainer counts zeros), per parameter: exact zeros, whether any entry is inf/NaN (the step's overflow
  cause), the largest and the median non-zero magnitude *unscaled* (divided by the scale in use), an
  octave histogram of the unscaled magnitudes, and, given the scales another run used step by step, how
  many non-zero entries would round to 0 in fp16 at that scale (scaled magnitude <= 2^-25: fp16's smallest
  subnormal is 2^-24, and round-to-nearest-even sends half of it to 0);
* **forward outputs** of every leaf module, per step: the largest finite magnitude, whether any entry is
  inf/NaN, and the first module (in call order) whose output was not finite while its inputs were: where
  the forward pass overflowed.

Every step costs one host read (a diagnosis is three runs, not a search).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from search.diagnosis._evidence import FP16_ROUNDS_TO_ZERO, LOWEST_OCTAVE, OCTAVES

_LOG2_ZERO = math.log2(FP16_ROUNDS_TO_ZERO)


@dataclass
class StepReading:
    """What one step's host read returned."""

    scale: float  # The scale the step's backward used.
    zeros: list[int]
    nonfinite: list[bool]
    largest: list[float]  # Unscaled; nan where a parameter has no finite non-zero entry.
    median: list[float]
    would_round: list[int]  # Non-zero entries that round to 0 at the reference scale (0 without one).
    forward_largest: list[float]
    forward_nonfinite: list[bool]
    forward_origin: str | None  # The first leaf module whose output was not finite from finite inputs.


@dataclass
class RunObserver:
    """Reads every step of one run for the diagnosis (see the module docstring).

    Args:
        reference_scales: Per step, the scale another run (the fp16 run) used: the fp32 control then counts
            how many of its non-zero gradients would round to 0 in fp16 at that scale. None: not counted.
    """

    reference_scales: Sequence[float] | None = None
    names: list[str] = field(default_factory=list)
    numels: list[int] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    readings: list[StepReading] = field(default_factory=list)
    _params: list[nn.Parameter] = field(default_factory=list)
    _histograms: torch.Tensor | None = None
    _handles: list = field(default_factory=list)
    _calls: list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)

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
                self._calls.append((name, largest, _magnitude(inputs)[1], finite))

        return hook

    def gradients(self, step: int, scale: torch.Tensor) -> None:
        """Called after a step's backward, before unscaling: reads the gradients at ``scale``."""
        assert self._histograms is not None
        reference = None if self.reference_scales is None else float(self.reference_scales[step])
        columns: list[torch.Tensor] = [scale]  # Then five per parameter, read in one transfer with the forward's.
        for index, p in enumerate(self._params):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            magnitude = (g.detach().float().abs() / scale.float()).flatten()
            finite = torch.isfinite(magnitude)
            nonzero = magnitude[finite & (magnitude > 0)]
            none = torch.full((), math.nan, device=g.device)
            rounds = torch.zeros((), device=g.device)
            if reference is not None and nonzero.numel():
                rounds = (torch.log2(nonzero) + math.log2(reference) <= _LOG2_ZERO).sum()
            columns += [
                g.numel() - g.count_nonzero(),
                ~finite.all(),
                nonzero.max() if nonzero.numel() else none,
                nonzero.median() if nonzero.numel() else none,
                rounds,
            ]
            if nonzero.numel():
                octave = torch.log2(nonzero).floor().clamp(LOWEST_OCTAVE, LOWEST_OCTAVE + OCTAVES - 1) - LOWEST_OCTAVE
                self._histograms[index] += torch.bincount(octave.long(), minlength=OCTAVES).double()
        for _, largest, inputs_finite, finite in self._calls:
            columns += [largest, inputs_finite, finite]
        values = torch.stack([torch.as_tensor(c).double().cpu().reshape(()) for c in columns]).tolist()
        self.readings.append(self._reading(values))

    def _reading(self, values: list[float]) -> StepReading:
        n = len(self._params)
        scale, grads, calls = values[0], values[1 : 5 * n + 1], values[5 * n + 1 :]
        forward: dict[str, tuple[float, bool]] = {}
        origin = None
        for i, (name, *_rest) in enumerate(self._calls):
            largest, inputs_finite, finite = calls[3 * i : 3 * i + 3]
            if origin is None and inputs_finite and not finite:
                origin = name
            before = forward.get(name)  # A module called twice in a step (accumulation, a shared module).
            forward[name] = (largest, not finite) if before is None else (max(before[0], largest), before[1] or not finite)
        self._calls.clear()
        return StepReading(
            scale=scale,
            zeros=[int(v) for v in grads[0::5]],
            nonfinite=[bool(v) for v in grads[1::5]],
            largest=grads[2::5],
            median=grads[3::5],
            would_round=[int(v) for v in grads[4::5]],
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
        """Per parameter, the octave counts of its non-zero finite unscaled gradient magnitudes over the run."""
        return [] if self._histograms is None else [[int(v) for v in row] for row in self._histograms.tolist()]


def _tensors(value: object) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a module's output or inputs (a tensor, tuple, list, dict, HF ModelOutput)."""
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
    """(largest finite magnitude, all finite) of the floating-point tensors in ``value``, on their device."""
    largest, finite = None, None
    for t in _tensors(value):
        t = t.detach()
        ok = torch.isfinite(t)
        top = torch.where(ok, t.abs(), torch.zeros((), dtype=t.dtype, device=t.device)).amax().double() if t.numel() else torch.zeros((), dtype=torch.float64, device=t.device)
        largest = top if largest is None else torch.maximum(largest, top.to(largest.device))
        finite = ok.all() if finite is None else finite & ok.all().to(finite.device)
    if largest is None:
        return torch.zeros((), dtype=torch.float64), torch.tensor(True)
    return largest, finite
