"""A diagnosis as the start of a search: ``search.optimize --from-diagnosis [FILE]`` narrows two settings.

The JSON ``search.diagnose --json`` writes (and the record ``search.diagnose --storage`` keeps in the study)
holds ``suggested_init_scale``, the scale that keeps the measured
gradients representable, and ``growth_window``, the growth intervals the run's gradients call for
(:mod:`search.diagnosis._training_verdict`). A search from it samples

* the starting scale within :data:`OCTAVES` octaves either side of the suggested one, instead of fp16's whole
  52-octave range (2^-20..2^32);
* the growth interval (GradScaler's ``growth_interval``, a framework's ``loss_scale_window`` or
  ``fp16_scale_window``) within the window: at least the run's steps where one steady scale serves it, at most
  the steps per overflowing step (rounded up) where the scale must move.

Each is intersected with the space's own range: a starting scale outside it is refused, a growth window beyond
it keeps the range's nearest end (a run longer than the default range's 2000 steps: 2000), with a note; a
growth knob the config fixes is left as it is. The window is about the diagnosed run's length, so a search of
other steps is refused. The diagnosed setting (PyTorch's or the framework's default) and the other baselines
may fall outside the narrowed space (all five use growth_interval 2000): each is then left out with a note,
and the diagnosis's own fp16 run measures the default.

A diagnosis whose verdict says no starting scale is the fix (``diverges-in-fp32``, ``forward-overflow``,
``scale-collapse``) is refused: a search would be the wrong next step. No torch here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from search.core import DEFAULTS, Settings, SpaceConfig
from search.diagnosis._advice import scale_text

OCTAVES = 4  # Either side of the suggested start: 8 octaves where the default space spans 52.
NO_START = ("diverges-in-fp32", "forward-overflow", "scale-collapse")
# Each framework's knob that sets the starting scale, and whether it holds the power of two.
START_KNOBS = {
    "deepspeed": ("initial_scale_power", True),
    "megatron": ("initial_loss_scale", False),
    "fairseq": ("fp16_init_scale", False),
}
# Each scaler's knob that sets how many clean steps come before a growth.
GROWTH_KNOBS = {
    "torch": "growth_interval",
    "deepspeed": "loss_scale_window",
    "megatron": "loss_scale_window",
    "fairseq": "fp16_scale_window",
}


class DiagnosisFileError(ValueError):
    """A ``--from-diagnosis`` file that cannot start a search (unreadable, not a diagnosis, or no start in
    it)."""


@dataclass(frozen=True)
class DiagnosisStart:
    """What a search takes from a diagnosis.

    Attributes:
        source: Where it was read from, for the user: the file, or the study that recorded it.
        verdict: The diagnosis's verdict.
        suggested: Its ``suggested_init_scale``.
        diagnosed: The start of the setting it diagnosed (``init_scale``, or the framework's).
        task: The task it trained.
        seed: The task's seed.
        scaler: ``torch`` or the framework whose rule it ran.
        growth: Its ``growth_window`` (low, high; high None: no bound), or None (not in the file: no
            narrowing).
        steps: The steps it trained (a search of other steps is refused: the window is about that length).
        path: The file it was read from; None when a study recorded it.
        recorded_at: When ``search.diagnose --storage`` recorded it (the record's ``recorded_at``); None for a
            file.
        setting: Its ``suggested_setting`` (GradScaler's four settings by name), which the search trains first
            (baseline ``diagnosis``); None where it suggests none (a framework's rule, or an older file).
        first_step: The global step its runs started from (its checkpoint's; 0: the initial weights).
    """

    source: str
    verdict: str
    suggested: float
    diagnosed: float
    task: str
    seed: int
    scaler: str
    growth: tuple[int, int | None] | None = None
    steps: int | None = None
    path: str | None = None
    recorded_at: str | None = None
    setting: dict[str, float] | None = None
    first_step: int = 0

    def attrs(self, space: SpaceConfig) -> dict[str, Any]:
        """What the study records of it (user attr ``diagnosis``): the verdict, the scales and the ranges
        searched."""
        name, _power = START_KNOBS.get(self.scaler, ("init_scale", False))
        ranges = space.ranges(self.scaler)
        growth = GROWTH_KNOBS[self.scaler]
        window = ranges[growth]
        return {
            "file": self.path,
            "source": self.source,
            "recorded_at": self.recorded_at,
            "verdict": self.verdict,
            "suggested_init_scale": self.suggested,
            "suggested_setting": self.setting,
            "diagnosed_start": self.diagnosed,
            "param": name,
            "low": ranges[name].low,
            "high": ranges[name].high,
            "growth_window": None if self.growth is None else list(self.growth),
            "growth_param": growth,
            "growth_low": window.fixed if window.fixed is not None else window.low,
            "growth_high": window.fixed if window.fixed is not None else window.high,
        }

    def note(self, space: SpaceConfig) -> str:
        """The line the search prints about it (the setting it suggests has its own, when it is enqueued)."""
        name, power = START_KNOBS.get(self.scaler, ("init_scale", False))
        ranges = space.ranges(self.scaler)
        searched = ranges[name]
        low, high = (2.0**searched.low, 2.0**searched.high) if power else (searched.low, searched.high)
        line = (
            f"from the diagnosis in {self.source} ({self.verdict}): {name} searched over {scale_text(low)}.."
            f"{scale_text(high)}, around the {scale_text(self.suggested)} it suggests"
        )
        growth = GROWTH_KNOBS[self.scaler]
        window = ranges[growth]
        if self.growth is None:
            return line + f"; {growth} not narrowed (the file has no growth window)"
        if window.fixed is not None:
            return line + f"; {growth} stays at the config's {window.fixed:g}"
        wanted = f">= {self.growth[0]}" if self.growth[1] is None else f"<= {self.growth[1]}"
        first, last = self.growth
        honoured = window.low >= first and (last is None or window.high <= last)
        if honoured:
            return line + f"; {growth} over {window.low:g}..{window.high:g} (the diagnosis: {wanted})"
        return (
            line
            + f"; {growth} at {window.low:g}..{window.high:g}, the end of the config's range nearest the "
            f"diagnosis's {wanted}, which lies outside it"
        )


def setting_text(setting: dict[str, float]) -> str:
    """GradScaler's four settings as the diagnosis prints them: ``init_scale 2^21, growth_factor 1.228, ...``.
    """
    return ", ".join(
        f"{name} {scale_text(value) if name == 'init_scale' else f'{value:g}'}"
        for name, value in setting.items()
    )


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
        raise DiagnosisFileError(
            f"--from-diagnosis {path}: not a diagnosis of a task (search.diagnose --task ... --json)"
        )
    return _start(data, path, path)


def recorded_start(record: dict[str, Any], study_name: str) -> DiagnosisStart:
    """The start a diagnosis recorded in a study gives (``search.diagnose --storage``,
    :mod:`search.diagnosis._recorded_diagnosis`); raises :class:`DiagnosisFileError` in one line."""
    keys = ("verdict", "suggested_init_scale", "task", "seed", "scaler", "settings", "recorded_at")
    if any(key not in record for key in keys):
        raise DiagnosisFileError(
            f"--from-diagnosis: the diagnosis recorded in study {study_name!r} lacks "
            f"{', '.join(key for key in keys if key not in record)}"
        )
    start = _start(record, f"study {study_name!r}, recorded {record['recorded_at']}", None)
    return replace(start, recorded_at=str(record["recorded_at"]))


def _start(data: dict[str, Any], source: str, path: str | None) -> DiagnosisStart:
    verdict = data["verdict"]
    if verdict in NO_START:
        raise DiagnosisFileError(
            f"--from-diagnosis {source}: the diagnosis found {verdict}, which no starting scale "
            f"fixes ({data.get('advice', '')}): a search is not the next step"
        )
    suggested = data["suggested_init_scale"]
    if not isinstance(suggested, (int, float)) or not math.isfinite(suggested) or suggested <= 0:
        raise DiagnosisFileError(f"--from-diagnosis {source}: it suggests no starting scale")
    scaler, settings = data["scaler"], data["settings"]
    if scaler in START_KNOBS:
        name, power = START_KNOBS[scaler]
        diagnosed = 2.0 ** settings[name] if power else float(settings[name])
    else:
        diagnosed = float(settings["init_scale"])
    steps = data.get("steps")
    return DiagnosisStart(
        source,
        verdict,
        float(suggested),
        diagnosed,
        data["task"],
        int(data["seed"]),
        scaler,
        _growth_window(source, data.get("growth_window")),
        steps if _whole(steps) else None,
        path,
        setting=_setting(source, data.get("suggested_setting")),
        first_step=int(data.get("first_step") or 0),  # A diagnosis without the key trained from step 0.
    )


def _setting(source: str, setting: object) -> dict[str, float] | None:
    """The file's ``suggested_setting``: absent or null is None; anything but GradScaler's four positive
    numbers is refused."""
    if setting is None:
        return None
    names = ("init_scale", "growth_factor", "backoff_factor", "growth_interval")
    if (
        isinstance(setting, dict)
        and set(setting) == set(names)
        and all(
            isinstance(setting[n], (int, float))
            and not isinstance(setting[n], bool)
            and math.isfinite(setting[n])
            and setting[n] > 0
            for n in names
        )
    ):
        return {n: float(setting[n]) for n in names}
    raise DiagnosisFileError(
        f"--from-diagnosis {source}: suggested_setting {json.dumps(setting)} is not GradScaler's "
        "four settings"
    )


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _growth_window(source: str, window: object) -> tuple[int, int | None] | None:
    """The file's ``growth_window``: absent or null (a diagnosis of no window, or one written before windows
    existed) is None; anything but ``[low, high]`` of whole numbers, high null or at least low, is refused."""
    if window is None:
        return None
    if isinstance(window, list) and len(window) == 2 and _whole(window[0]):
        if window[1] is None or (_whole(window[1]) and window[1] >= window[0]):
            return window[0], window[1]
    raise DiagnosisFileError(
        f"--from-diagnosis {source}: growth_window {json.dumps(window)} is not [low, high] of "
        "whole numbers (high null: no bound)"
    )


def narrowed_space(space: SpaceConfig, start: DiagnosisStart) -> SpaceConfig:
    """``space`` with its starting scale searched around ``start.suggested`` and its growth interval within
    ``start.growth`` (module docstring).

    Raises:
        DiagnosisFileError: The config fixes the starting scale, its range lies outside the narrowed one, or
            it samples powers of two and none lies in the narrowed range.
    """
    low, high = start.suggested / 2.0**OCTAVES, start.suggested * 2.0**OCTAVES
    ranges = space.ranges(start.scaler)
    name, power = START_KNOBS.get(start.scaler, ("init_scale", False))
    old = ranges[name]
    if old.fixed is not None:
        raise DiagnosisFileError(f"--from-diagnosis narrows {name}, which the config fixes")
    if power:  # DeepSpeed's whole powers of two.
        wanted = (math.floor(math.log2(low)), math.ceil(math.log2(high)))
    elif start.scaler == "fairseq":  # Whole scales.
        wanted = (math.floor(low), math.ceil(high))
    else:
        wanted = (low, high)
    lo, hi = max(old.low, wanted[0]), min(old.high, wanted[1])
    if lo > hi:
        shown = (2.0**old.low, 2.0**old.high) if power else (old.low, old.high)
        raise DiagnosisFileError(
            f"--from-diagnosis: the config searches {name} over {scale_text(shown[0])}.."
            f"{scale_text(shown[1])}, outside the {scale_text(low)}..{scale_text(high)} around "
            f"the {scale_text(start.suggested)} the diagnosis suggests"
        )
    if old.powers_of_two and math.ceil(math.log2(lo)) > math.floor(math.log2(hi)):
        # Two decimals: 2^13.97 must not read as the power of two 2^14.0.
        raise DiagnosisFileError(
            "--from-diagnosis: the config samples powers of two of init_scale, and none lies in "
            f"{scale_text(lo, 2)}..{scale_text(hi, 2)} around the {scale_text(start.suggested, 2)} "
            "the diagnosis suggests"
        )
    # GradScaler's init_scale is searched on a log scale; a framework's knob keeps its own (DeepSpeed's is an
    # exponent).
    ranges[name] = replace(old, low=lo, high=hi, log=True if start.scaler not in START_KNOBS else old.log)
    growth = GROWTH_KNOBS[start.scaler]
    window = ranges[growth]
    if start.growth is not None and window.fixed is None:
        first, last = start.growth
        lo = min(
            max(window.low, first), window.high
        )  # A window beyond the space: its nearest end (the note says).
        hi = max(min(window.high, last if last is not None else window.high), lo)
        ranges[growth] = replace(window, low=lo, high=hi)
    if start.scaler not in START_KNOBS:
        return replace(space, **ranges)
    return replace(space, **{start.scaler: ranges})


def why_no_search(record: Mapping[str, Any], settings: Settings, searched: bool) -> str | None:
    """Why ``search.optimize --from-diagnosis`` on the study would be refused, in a clause; None: it would
    start.

    ``searched``: the study already holds a search, whose recorded space a narrowing would change.
    """
    if record["verdict"] in NO_START:
        return f"{record['verdict']} is not fixed by a starting scale"
    if searched:
        return (
            "the study already holds a search, whose space --from-diagnosis would change: to search from this"
            " diagnosis, record it under another --study-name"
        )
    try:
        narrowed_space(settings.space, recorded_start(dict(record), settings.study_name))
    except DiagnosisFileError as e:
        return str(e).removeprefix("--from-diagnosis: ")
    return None


def not_a_search(study_name: str, record: Any) -> str:
    """Why a command that reads a search (report, confirm) cannot read this study: it records no settings.

    ``record``: the diagnosis the study keeps (its ``recorded_diagnosis`` user attr), or None.
    """
    if isinstance(record, dict):
        held = f"study {study_name!r} holds a diagnosis (task {record.get('task')}: {record.get('verdict')})"
        if record.get("verdict") in NO_START:
            return f"{held}, which no loss-scaler setting fixes, and no search"
        refused = why_no_search(
            record, DEFAULTS, searched=False
        )  # As the default config's search would take it.
        if refused:
            return (
                f"{held} and no search yet; a search from it with the default space would be refused:"
                f" {refused}"
            )
        return f"{held} and no search yet: run search.optimize there (--from-diagnosis starts from it)"
    return f"study {study_name!r} was not created by search.optimize (it records no task/space)"
