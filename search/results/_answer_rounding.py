"""The answer's line rounded: the coarsest values that measure the same, each one measured.

A sampled trial's values carry 16 digits that no run tells apart. The settings the answer changes
(:func:`search.results._minimal.changed_settings`) are rounded, coarse to fine
(:func:`rounding_candidates`): ``init_scale`` to a power of two, then to 2 and to 3 significant
digits; ``backoff_factor`` and ``growth_interval`` to 2, then 3 significant digits;
``growth_factor`` the same through ``growth_factor - 1`` (1.0437 becomes 1.044, not 1.0, which
would never grow); last, each to the fewest digits that read as the same float32 (:func:`float32_digits`),
the precision of the scale GradScaler keeps. A rounded value outside the searched range keeps the trial's own.

A rounded line is never assumed to behave like the trial it comes from: on a rough objective it
can land outside the tolerance. Each one is trained as a trial of the study (enqueued by
:mod:`search.study._rounding_trials` when a run has reached its N trials; user attr ``rounding_of``),
and the answer takes the coarsest whose trial (:func:`measured_rounding`)

* is good (no failure, within the tolerance of the best: the one meaning of good), and
* had the same settings act in its run, so that its own minimal change *is* the rounded line.

The line a user pastes is then that trial's, and every number shown with it is that trial's own.
When none qualifies, the line keeps the source trial's own values.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from optuna.distributions import IntDistribution
from optuna.trial import FrozenTrial, TrialState

from search.core import POW2_NAME, SpaceConfig, distributions, scaler_config
from search.results._landscape import Landscape
from search.results._minimal import changed_settings, minimal_change
from search.scalers import ScalerConfig


@dataclass(frozen=True)
class Rounding:
    """What the study measured of the answer's line rounded.

    Attributes:
        trial: The trial that ran the accepted rounded line, or None.
        config: Its line (the rounded settings; those that did not act at PyTorch's defaults).
        rejected: ``(trial number, why)`` of each coarser rounding that was measured and did not qualify.
        pending: Params of the next rounding to train (none accepted and this one not yet
            measured), or None.
        queued: Whether ``pending`` is already queued or training in the study.
    """

    trial: FrozenTrial | None = None
    config: ScalerConfig | None = None
    rejected: tuple[tuple[int, str], ...] = ()
    pending: dict[str, Any] | None = None
    queued: bool = False

    @property
    def tried(self) -> bool:
        """Whether the line had a rounding to try (it is not round already)."""
        return self.trial is not None or bool(self.rejected) or self.pending is not None

    def tag(self, source: int) -> str:
        """The ``rounding_of`` value of the trial that trains ``pending``: its source and params."""
        assert self.pending is not None
        return f"#{source} " + ", ".join(f"{k}={v!r}" for k, v in sorted(self.pending.items()))


def significant(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits (``618.3, 2 -> 620.0``)."""
    return float(f"{value:.{digits}g}")


def float32_digits(value: float) -> float:
    """``value`` with the fewest significant digits that still read as the same float32: GradScaler holds its
    scale as a float32 tensor, so an ``init_scale`` written so starts the very same run, and the factors lose
    only what float32 arithmetic on the scale cannot keep."""
    same = struct.pack("f", value)
    fewest = (significant(value, d) for d in range(4, 10) if struct.pack("f", significant(value, d)) == same)
    return next(fewest, value)


def _rounded(name: str, value: float, level: int) -> float:
    """One setting at rounding level 0 (coarsest), 1, 2 or 3 (float32's own digits)."""
    if level == 3:
        return float(round(value)) if name == "growth_interval" else float32_digits(value)
    digits = 2 if level < 2 else 3
    if name == "init_scale" and math.log2(value).is_integer():
        return value  # A power of two is as round as a scale gets.
    if name == "init_scale":
        return 2.0 ** round(math.log2(value)) if level == 0 else significant(value, digits)
    if name == "growth_factor":  # 1 + 1.89 is 2.8899999999999997 in floats: printed as people write it.
        return significant(1.0 + significant(value - 1.0, digits), 12)
    if name == "growth_interval":
        return float(max(1, round(significant(value, digits))))
    return significant(value, digits)


def rounding_candidates(line: ScalerConfig, measured: ScalerConfig, space: SpaceConfig) -> list[ScalerConfig]:
    """The rounded lines to try, coarse to fine, without repeats and without ``line`` itself.

    Args:
        line: The answer's line: the minimal change of the trial that measured ``measured``.
        measured: That trial's own settings.
        space: The study's space: only its searched settings are rounded, within their ranges.
    """
    searched = {("init_scale" if n == POW2_NAME else n): d for n, d in distributions(space).items()}
    out: list[ScalerConfig] = []
    for level in range(4):
        values = {}
        for name in changed_settings(line):
            value = getattr(line, name)
            if name in searched:
                rounded = _rounded(name, value, level)
                low, high = _range(searched[name], name)
                value = rounded if low <= rounded <= high else value
            values[name] = int(value) if name == "growth_interval" else value
        candidate = replace(line, **values)
        if candidate != line and candidate not in out and candidate != measured:
            out.append(candidate)
    return out


def _range(dist: Any, name: str) -> tuple[float, float]:
    if name == "init_scale" and isinstance(dist, IntDistribution):  # Searched as powers of two.
        return 2.0**dist.low, 2.0**dist.high
    return dist.low, dist.high


def candidate_params(candidate: ScalerConfig, measured: ScalerConfig, space: SpaceConfig) -> dict[str, Any]:
    """The study params that train ``candidate``: its values; a setting at PyTorch's default that the
    searched range excludes keeps ``measured``'s value (it did not act there; the run checks it again)."""
    params: dict[str, Any] = {}
    for name, dist in distributions(space).items():
        setting = "init_scale" if name == POW2_NAME else name
        value = getattr(candidate, setting)
        if not dist.low <= (math.log2(value) if name == POW2_NAME else value) <= dist.high:
            value = getattr(measured, setting)
        if name == POW2_NAME:
            value = round(math.log2(value))
        params[name] = int(value) if isinstance(dist, IntDistribution) else float(value)
    return params


def measured_rounding(
    source: FrozenTrial,
    line: ScalerConfig,
    landscape: Landscape,
    space: SpaceConfig,
    trials: Sequence[FrozenTrial],
) -> Rounding:
    """The coarsest rounding of ``line`` that a trial of the study measured the same (module docstring).

    Args:
        source: The good trial the answer's line comes from.
        line: Its minimal change.
        landscape: The study's COMPLETE trials (the rounded ones among them) and which are good.
        space: The study's space.
        trials: All the study's trials, any state (a rounding may be queued, training or pruned).
    """
    measured = scaler_config(source.params, space)
    rejected: list[tuple[int, str]] = []
    for candidate in rounding_candidates(line, measured, space):
        params = candidate_params(candidate, measured, space)
        same = [t for t in trials if t.params == params or _fixed_params(t) == params]
        done = next((t for t in same if t.number in landscape.values), None)
        pruned = next((t for t in same if t.state == TrialState.PRUNED), None)
        if done is None and pruned is None:
            queued = any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in same)
            return Rounding(rejected=tuple(rejected), pending=params, queued=queued)
        if done is None:
            rejected.append((pruned.number, "pruned"))
            continue
        if done.number not in landscape.good_ids:
            rejected.append((done.number, f"objective {done.value:.4g}, not good"))
            continue
        own, _reset = minimal_change(done, scaler_config(done.params, space))
        if own != candidate:
            acted = sorted(set(changed_settings(own)) ^ set(changed_settings(candidate)))
            rejected.append((done.number, f"{', '.join(acted)} acted differently in its run"))
            continue
        return Rounding(trial=done, config=candidate, rejected=tuple(rejected))
    return Rounding(rejected=tuple(rejected))


def _fixed_params(trial: FrozenTrial) -> dict[str, Any] | None:
    """A WAITING trial's params (``study.enqueue_trial`` keeps them in a system attr until it runs)."""
    return trial.system_attrs.get("fixed_params") if trial.state == TrialState.WAITING else None
