"""The whole GradScaler setting a diagnosis suggests: where the scale starts, and how it grows back.

The growth window (:func:`search.diagnosis._training_verdict.growth_window`) tells two kinds of run apart:

* **steady**: one scale serves every step (the first steps' needed scale is within an octave of the largest
  safe one). The suggestion starts at ``suggested_init_scale`` and keeps the user's factors, with
  ``growth_interval`` at least the run's steps: growth need not act, and then its factors cannot matter.
* **moving**: the scale the first steps need overflows on some steps, one every ``P`` steps on average
  (``P`` = the run's steps over the steps overflowing at the needed scale). The scale must sit at the needed
  scale, back off at each of those steps and regrow before the next. A scale that starts below the needed one
  and only grows as fast as it backs off stays below it and underflows, so the start is the needed scale
  rounded up to a power of two. ``growth_interval`` 1 lets it regrow at the first clean step, and
  ``growth_factor`` = ``(1 / backoff_factor) ** (1 / P)``: ``P`` growths undo one backoff (where overflows are
  so rare that this factor is under :data:`MIN_GROWTH`, the interval ``n`` is the smallest that makes
  ``(1 / backoff_factor) ** (n / P)`` at least that, the same regrowth per period). Counting every step
  of the period as a growth (the overflowing one grows nothing) errs low: the scale drifts a little down from
  the needed scale, to where overflows come a little less often, instead of growing into more of them.

The user's ``backoff_factor`` is kept. A framework's rule has fixed factors (DeepSpeed and fairseq double and
halve): its window already says how often it must grow, so no whole setting is suggested for it. No torch
here.
"""

from __future__ import annotations

import math

from search.scalers import RULES, RuleSetting, ScalerConfig


def moving_start(needed: float) -> float:
    """The start of a moving scale: the needed scale rounded up to a power of two (module docstring)."""
    return 2.0 ** math.ceil(math.log2(needed))


def suggested_setting(
    setting: ScalerConfig | RuleSetting,
    start: float,
    window: tuple[int, int | None] | None,
    overflowing: int,
    steps: int,
) -> ScalerConfig | RuleSetting | None:
    """The whole setting a diagnosis of ``setting`` suggests (module docstring), in its rule's knobs, or None:
    a rule whose growth factor is not a knob (a framework's), no growth window, or no starting scale
    (``start`` not finite).

    Args:
        setting: The diagnosed setting.
        start: The suggested starting scale (``suggested_init_scale``).
        window: The growth window, (low, high); high None for a steady run.
        overflowing: The fp32 control's steps that overflow fp16 at the needed scale.
        steps: The run's optimizer steps.
    """
    rule = RULES[setting.rule]
    if not rule.grows_with or window is None or not math.isfinite(start) or start <= 0:
        return None
    values = {**setting.values, rule.start_knob: rule.start_value(start)}
    low, high = window
    if high is None:
        values[rule.window_knob] = max(int(setting.values[rule.window_knob]), low)
        return rule.setting(values)
    period = steps / max(1, overflowing)
    # Rare overflows would ask for a factor barely above 1: grow less often instead, each growth at least
    # MIN_GROWTH (n growths of (1/b)^(n/P) still undo one backoff per period).
    backoff = math.log(1.0 / rule.cycle(setting.values).backoff)
    interval = max(1, math.ceil(period * math.log(MIN_GROWTH) / backoff - 1e-9))
    values[rule.grows_with[0]] = round(math.exp(backoff * interval / period), 3)  # What a person pastes.
    values[rule.window_knob] = interval
    return rule.setting(values)


MIN_GROWTH = 1.01  # The smallest growth_factor the default space samples (search.core._settings).
