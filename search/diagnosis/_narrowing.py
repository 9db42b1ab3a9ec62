"""A diagnosis as the start of a search: ``search.optimize --from-diagnosis FILE`` narrows the starting scale.

The JSON ``search.diagnose --json`` writes holds ``suggested_init_scale``: the scale that keeps the measured
gradients representable (:mod:`search.diagnosis._training_verdict`). A search from it samples the starting
scale within :data:`OCTAVES` octaves either side of it instead of fp16's whole 52-octave range (2^-20..2^32),
and always keeps the diagnosed setting's own start inside (so PyTorch's or the framework's default stays a
point of the space, measured and compared). Only the starting scale is narrowed: the diagnosis measures the
gradients' magnitudes, not how often the scale should grow.

A diagnosis whose verdict says no starting scale is the fix (``diverges-in-fp32``, ``forward-overflow``,
``scale-collapse``) is refused: a search would be the wrong next step. No torch here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from search.core import ParamRange, SpaceConfig
from search.diagnosis._training_verdict import scale_text

OCTAVES = 4  # Either side of the suggested start: 8 octaves where the default space spans 52.
NO_START = ("diverges-in-fp32", "forward-overflow", "scale-collapse")
# Each framework's knob that sets the starting scale, and whether it holds the power of two.
START_KNOBS = {"deepspeed": ("initial_scale_power", True), "megatron": ("initial_loss_scale", False),
               "fairseq": ("fp16_init_scale", False)}  # fmt: skip


class DiagnosisFileError(ValueError):
    """A ``--from-diagnosis`` file that cannot start a search (unreadable, not a diagnosis, or no start in it)."""


@dataclass(frozen=True)
class DiagnosisStart:
    """What a search takes from a diagnosis.

    Attributes:
        path: The file it was read from.
        verdict: The diagnosis's verdict.
        suggested: Its ``suggested_init_scale``.
        diagnosed: The start of the setting it diagnosed (``init_scale``, or the framework's).
        task: The task it trained.
        seed: The task's seed.
        scaler: ``torch`` or the framework whose rule it ran.
    """

    path: str
    verdict: str
    suggested: float
    diagnosed: float
    task: str
    seed: int
    scaler: str

    def attrs(self, space: SpaceConfig) -> dict[str, Any]:
        """What the study records of it (user attr ``diagnosis``): the verdict, the scales and the range searched."""
        name, power = START_KNOBS.get(self.scaler, ("init_scale", False))
        searched = space.ranges(self.scaler)[name]
        return {"file": self.path, "verdict": self.verdict, "suggested_init_scale": self.suggested,
                "diagnosed_start": self.diagnosed, "param": name, "low": searched.low, "high": searched.high}  # fmt: skip

    def note(self, space: SpaceConfig) -> str:
        """The line the search prints about it."""
        name, power = START_KNOBS.get(self.scaler, ("init_scale", False))
        searched = space.ranges(self.scaler)[name]
        low, high = (2.0**searched.low, 2.0**searched.high) if power else (searched.low, searched.high)
        return (f"{name} searched over {scale_text(low)}..{scale_text(high)}, around the {scale_text(self.suggested)} "
                f"the diagnosis in {self.path} suggests ({self.verdict}; the diagnosed start {scale_text(self.diagnosed)} "
                "kept inside)")  # fmt: skip


def read_diagnosis(path: str) -> DiagnosisStart:
    """Reads a ``search.diagnose --json`` file; raises :class:`DiagnosisFileError` in one line."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise DiagnosisFileError(f"--from-diagnosis {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise DiagnosisFileError(f"--from-diagnosis {path}: not JSON ({e})") from None
    keys = ("verdict", "suggested_init_scale", "task", "seed", "scaler", "settings", "runs")
    if not isinstance(data, dict) or any(key not in data for key in keys):
        raise DiagnosisFileError(f"--from-diagnosis {path}: not a diagnosis of a task (search.diagnose --task ... --json)")
    verdict = data["verdict"]
    if verdict in NO_START:
        raise DiagnosisFileError(f"--from-diagnosis {path}: the diagnosis found {verdict}, which no starting scale "
                                 f"fixes ({data.get('advice', '')}): a search is not the next step")  # fmt: skip
    suggested = data["suggested_init_scale"]
    if not isinstance(suggested, (int, float)) or not math.isfinite(suggested) or suggested <= 0:
        raise DiagnosisFileError(f"--from-diagnosis {path}: it suggests no starting scale")
    scaler, settings = data["scaler"], data["settings"]
    if scaler in START_KNOBS:
        name, power = START_KNOBS[scaler]
        diagnosed = 2.0 ** settings[name] if power else float(settings[name])
    else:
        diagnosed = float(settings["init_scale"])
    return DiagnosisStart(path, verdict, float(suggested), diagnosed, data["task"], int(data["seed"]), scaler)


def narrowed_space(space: SpaceConfig, start: DiagnosisStart) -> SpaceConfig:
    """``space`` with its starting scale searched around ``start.suggested`` (module docstring).

    Raises:
        DiagnosisFileError: The config fixes the starting scale (nothing to narrow).
    """
    low = min(start.suggested / 2.0**OCTAVES, start.diagnosed)
    high = max(start.suggested * 2.0**OCTAVES, start.diagnosed)
    if start.scaler not in START_KNOBS:
        old = space.init_scale
        if old.fixed is not None:
            raise DiagnosisFileError("--from-diagnosis narrows init_scale, which the config fixes")
        return replace(space, init_scale=replace(old, low=low, high=high, log=True))
    name, power = START_KNOBS[start.scaler]
    knobs = dict(getattr(space, start.scaler))
    old = knobs[name]
    if old.fixed is not None:
        raise DiagnosisFileError(f"--from-diagnosis narrows {name}, which the config fixes")
    if power:  # DeepSpeed's whole powers of two, within what it accepts.
        knobs[name] = replace(old, low=max(0, math.floor(math.log2(low))), high=math.ceil(math.log2(high)))
    elif start.scaler == "megatron":
        knobs[name] = ParamRange(low, high, True)
    else:  # fairseq's whole scales of at least 1.
        knobs[name] = ParamRange(max(1, math.floor(low)), math.ceil(high), True)
    return replace(space, **{start.scaler: knobs})
