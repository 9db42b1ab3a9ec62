"""What a training diagnosis concludes: one verdict from the fp16 run and its controls, with its evidence.

The verdicts, the first that holds wins (each names the evidence it rests on):

* ``diverges-in-fp32``: the fp32 control's loss or weights went inf/NaN, or its evaluation ended worse than
  the initial weights': the run fails without any fp16, so no loss scale is the fix (learning rate, data);
* ``forward-overflow``: a layer's forward output was inf/NaN in fp16 from finite inputs. The loss scale
  multiplies the loss *after* the forward pass, so no scale helps: bf16 (fp32's range) or that layer is the
  fix;
* ``scale-collapse``: under a framework's rule, the scale reached the rule's minimum (DeepSpeed and fairseq
  end the run there, Megatron clamps and goes on skipping); under GradScaler, which has no minimum, it fell
  below 1: some gradients overflow fp16 even unscaled, so scaling down is all a scaler can do;
* ``underflow``: the fp16 run's gradients were exactly zero where the fp32 control's were not, by at least the
  objective's ``underflow_threshold`` (the same rule as a trial's ``underflow`` failure code), over the whole
  model or in one parameter: the scale in use is too small for fp16;
* ``chronic-skipping``: after the scale first grew (the initial search down from ``init_scale`` is expected),
  at least :data:`~search.diagnosis.CHRONIC_RATE` of the steps were skipped: it keeps growing into overflows
  (the growth interval is too short for this run);
* the same two where the fp16 run ends more than the objective's ``learn_threshold`` behind the bf16 control
  (the fp32 control where the device has no bf16) and nothing above explains it: bf16 has fp32's range and
  less precision than fp16, so what fp16 loses beyond it is range; ``underflow`` when its scale was below the
  scale the gradients need, ``chronic-skipping`` when at least ``CHRONIC_RATE`` of its steps were skipped in
  the initial search (a run too short to spend them: start lower);
* ``healthy``: none of these.

The scale the gradients need, from the fp32 control's true magnitudes: ``needed_scale`` keeps, over the first
steps, each parameter's gradient entries that carry all but :data:`~search.diagnosis._evidence.LOST_SHARE` of
its squared norm at or above fp16's smallest subnormal 2^-24, so that no parameter loses more than a tenth of
its gradient's squared norm to rounding; a parameter whose gradient is zero or rounding noise (under
:data:`~search.diagnosis._evidence.NOISE_SHARE` of the model's squared gradient norm, as the attention key
bias by construction) is left out of it and of ``underflow``; ``largest_safe_scale`` keeps the largest
gradient of the run under 65504. ``suggested_init_scale`` is the
user's own ``init_scale`` when it lies between the two, else the power of two nearest their geometric middle;
where the growth window says the scale must move (below), the needed scale rounded up to a power of two, with
the growth that regrows it (``suggested_setting``, :mod:`search.diagnosis._suggestion`); none (nan) where the
verdict says no starting scale is the fix (``diverges-in-fp32``, ``forward-overflow``, ``scale-collapse``).

How often the scale should grow, from the same control's per-step largest gradient (:func:`growth_window`):
where the needed scale is within an octave of the largest safe one (or below it), one steady scale serves the
run and growth only walks it into overflows, so growth need not act within the run (``growth_interval`` at
least its steps); where it is further above, the steps whose gradients overflow at the needed scale must each
back the scale off, and it must regrow before the next such step (``growth_interval`` at most their mean
period: the run's steps per such step, rounded up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from search.core import PenaltyConfig
from search.diagnosis._advice import (
    bf16_note,
    centre_clause,
    chronic_advice,
    collapse_advice,
    collapse_reason,
    first_steps,
    gnum,
    scale_text,
    start_advice,
    suggested_scale,
)
from search.diagnosis._evidence import FP16_MAX, FP16_SMALLEST, RunEvidence
from search.diagnosis._log_reading import CHRONIC_RATE
from search.diagnosis._suggestion import moving_start, suggested_setting
from search.scalers import RULES, RuleSetting, ScalerConfig

VERDICTS = (
    "healthy",
    "underflow",
    "chronic-skipping",
    "forward-overflow",
    "diverges-in-fp32",
    "scale-collapse",
)


@dataclass(frozen=True)
class TrainingVerdict:
    """The diagnosis's conclusion and the numbers it rests on.

    Attributes:
        verdict: One of :data:`VERDICTS`.
        reason: Why, in a sentence of evidence.
        advice: What to do about it.
        needed_scale: The scale at which no counted parameter loses more than a tenth of its squared gradient
            norm to rounding over the first steps (module docstring; nan: no non-zero gradient).
        largest_safe_scale: 65504 over the largest gradient of the fp32 control (nan: none).
        suggested_init_scale: A starting scale that keeps the measured gradients representable (see the
            module); nan where no starting scale is the fix.
        settled_step: The first step at which the scale had grown (the end of the initial search), or None.
        expected_skip_rate: The skip rate of a scaler that grows into an overflow each window and backs off.
        measured_skip_rate: Skipped steps per step after settling, or None when it never settled.
        underflowing: Parameters whose fp16 zeros exceed the fp32 control's by the threshold.
        forward_layer: The layer where the forward pass first overflowed most often, or None.
        overflow_steps_at_needed: The fp32 control's steps whose largest gradient overflows fp16 at
            ``needed_scale``.
        growth_window: The ``growth_interval`` range the gradients call for, (low, high), high None for no
            bound (:func:`growth_window`); None where no starting scale is the fix or nothing was measured.
        suggested_setting: The whole GradScaler setting suggested (:mod:`search.diagnosis._suggestion`), by
            param name; None for a framework's rule, or where no starting scale is the fix.
        suggestion_check: The suggestion's own fp16 run and whether it stands
            (:class:`~search.diagnosis._suggestion_check.SuggestionCheck`, as a dict); None: not trained.
    """

    verdict: str
    reason: str
    advice: str
    needed_scale: float
    largest_safe_scale: float
    suggested_init_scale: float
    settled_step: int | None
    expected_skip_rate: float
    measured_skip_rate: float | None
    underflowing: tuple[str, ...]
    forward_layer: str | None
    overflow_steps_at_needed: int = 0
    growth_window: tuple[int, int | None] | None = None
    suggested_setting: dict[str, float] | None = None
    suggestion_check: dict[str, Any] | None = None

    def growth_sentence(self, steps: int, window_knob: str = "growth_interval") -> str:
        """The growth window in words, with its evidence ("": none); ``window_knob`` names the rule's window
        (:attr:`~search.scalers.ScalerRule.window_knob`)."""
        if self.growth_window is None:
            return ""
        low, high = self.growth_window
        needed, safe = scale_text(self.needed_scale), scale_text(self.largest_safe_scale)
        if high is None and self.needed_scale <= self.largest_safe_scale:
            return (
                f"the first steps need {needed} and the largest gradient allows {safe}: a steady scale"
                " between them keeps every gradient representable, so growth need not act:"
                f" {window_knob} >= {low}"
            )
        if high is None:
            return (
                f"the first steps need {needed} and the largest gradient allows {safe}, within an octave: one"
                " steady scale serves this run about as well as any, and growing walks it into overflows"
                f" ({self.overflow_steps_at_needed} of {steps} steps overflow at {needed}), so growth need"
                f" not act: {window_knob} >= {low}"
            )
        return (
            f"{self.overflow_steps_at_needed} of {steps} steps overflow at the {needed} the first steps need"
            f" (the largest gradient allows {safe}): a scale there backs off at each and must regrow before"
            f" the next, one every {steps / max(1, self.overflow_steps_at_needed):.1f} steps on average:"
            f" {window_knob} <= {high}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; non-finite numbers as None."""
        out = dict(self.__dict__)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        out["underflowing"] = list(self.underflowing)
        out["growth_window"] = None if self.growth_window is None else list(self.growth_window)
        return out


def init_scale_of(setting: ScalerConfig | RuleSetting, scales: tuple[float, ...]) -> float:
    """The scale a run starts at: the setting's start knob, as the rule holds it (Megatron's float32)."""
    machine = setting.make()  # None: GradScaler, which starts at the start knob's value.
    if machine is None:
        return float(setting.values[RULES[setting.rule].start_knob])
    return scales[0] if scales else machine.scale


def expected_skip_rate(setting: ScalerConfig | RuleSetting) -> float:
    """Skips per step of a scale that sits at its overflow edge: it grows after a window of clean steps, the
    next step overflows, and it backs off (``hysteresis`` overflows where the rule has one); with a backoff
    deeper than one growth, it takes several windows to reach the edge again."""
    window, growth, backoff, overflows = RULES[setting.rule].cycle(setting.values)
    windows = max(1, math.ceil(math.log(1 / backoff) / math.log(growth) - 1e-9))
    return overflows / (window * windows + overflows)


def settled_step(scales: tuple[float, ...]) -> int | None:
    """The first step whose scale is above the step before's: the initial search down from the start is over.
    """
    return next((i for i in range(1, len(scales)) if scales[i] > scales[i - 1]), None)


def growth_window(
    needed: float, safe: float, step_largest: tuple[float, ...], steps: int
) -> tuple[tuple[int, int | None] | None, int]:
    """The growth intervals a run's gradients call for, and how many steps overflow at the needed scale.

    ``step_largest`` is the fp32 control's per-step largest gradient. Where ``needed <= 2 * safe``, a scale
    held steady serves every step about as well as one scale can, and growing only overflows: ``(steps,
    None)``, growth need not act within the run. Further above, the scale that keeps the first steps'
    gradients must back off at every step overflowing it and be regrown before the next one: at most their
    mean period (the run's steps per such step, rounded up), a whole window per regrowth since a scaler grows
    only after a window of clean steps.
    """
    overflowing = (
        sum(1 for v in step_largest if math.isfinite(v) and v * needed > FP16_MAX)
        if math.isfinite(needed)
        else 0
    )
    if not (math.isfinite(needed) and math.isfinite(safe)) or not step_largest or steps < 1:
        return None, overflowing
    if needed <= 2 * safe:
        return (steps, None), overflowing
    return (1, max(1, math.ceil(steps / max(1, overflowing)))), overflowing


# What a healthy verdict can claim: no failure at these settings. Not "keep them": whether other settings
# train
# better is what a search measures, and its study may find some (it compares with its best, not with a
# control).
HEALTHY_ADVICE = (
    "nothing to fix at these settings: they show no loss-scaling failure (whether other settings train "
    "better is what search.optimize measures)"
)


def judge(
    fp16: RunEvidence,
    fp32: RunEvidence,
    bf16: RunEvidence | None,
    setting: ScalerConfig | RuleSetting,
    penalty: PenaltyConfig = PenaltyConfig(),
) -> TrainingVerdict:
    """The verdict on ``setting`` from its fp16 run and the controls (module docstring)."""
    counted = fp32.counted()  # Not the gradients that are zero or rounding noise by construction.
    floors = [p.first_floor for p in counted if math.isfinite(p.first_floor) and p.first_floor > 0]
    needed = FP16_SMALLEST / min(floors) if floors else math.nan
    largest = fp32.largest_gradient()
    safe = FP16_MAX / largest if math.isfinite(largest) and largest > 0 else math.nan
    init = init_scale_of(setting, fp16.scales)
    window, overflowing = growth_window(needed, safe, fp32.step_largest, fp32.steps)
    moving = window is not None and window[1] is not None  # The scale must back off and regrow (_suggestion).
    suggested = moving_start(needed) if moving else suggested_scale(init, needed, safe)
    settled = settled_step(fp16.scales)
    later = None
    if settled is not None:
        later = sum(fp16.skipped[settled:]) / max(1, len(fp16.skipped) - settled)
    fp32_zeros = {p.name: p.zero_share for p in counted}
    underflowing = tuple(
        p.name
        for p in fp16.parameters
        if p.name in fp32_zeros and p.zero_share - fp32_zeros[p.name] >= penalty.underflow_threshold
    )
    origins = fp16.forward_origins()
    layer = max(origins, key=lambda name: len(origins[name])) if origins else None
    whole = suggested_setting(setting, suggested, window, overflowing, fp32.steps)
    common = dict(
        needed_scale=needed,
        largest_safe_scale=safe,
        suggested_init_scale=suggested,
        settled_step=settled,
        expected_skip_rate=expected_skip_rate(setting),
        measured_skip_rate=later,
        underflowing=underflowing,
        forward_layer=layer,
        overflow_steps_at_needed=overflowing,
        growth_window=window,
        suggested_setting=None if whole is None else dict(whole.values),
    )
    bf16_line = bf16_note(bf16)

    # Worse by more than the learning threshold: a control that stays flat has not diverged.
    worse = fp32.eval_loss > (1 + penalty.learn_threshold) * fp32.initial_eval_loss
    if not fp32.finite or fp32.failure == "nonfinite" or worse:
        what = (
            "went inf/NaN"
            if not fp32.finite or fp32.failure == "nonfinite"
            else (
                f"ended at {gnum(fp32.eval_loss)}, more than {penalty.learn_threshold:.0%} worse than the"
                f" initial weights' {gnum(fp32.initial_eval_loss)}"
            )
        )
        common.update(
            suggested_init_scale=math.nan, growth_window=None, suggested_setting=None
        )  # No setting is the fix.
        return TrainingVerdict(
            "diverges-in-fp32",
            f"the fp32 control, with no fp16 and no scaling, {what}",
            "this is not a loss-scaling problem: look at the learning rate, the data and the "
            "model first (then diagnose again)",
            **common,
        )
    if layer is not None:
        steps = len(origins[layer])
        common.update(suggested_init_scale=math.nan, growth_window=None, suggested_setting=None)
        fp32_layer = next((f.largest for f in fp32.layers if f.name == layer), math.nan)
        return TrainingVerdict(
            "forward-overflow",
            f"the forward pass overflowed fp16 in layer {layer!r} at {steps} of {fp16.steps} steps (its"
            f" outputs reach {gnum(fp32_layer)} in the fp32 control; fp16 ends at 65504), before any loss"
            " scale acts",
            f"no loss scale helps: train in bf16{bf16_line}, or keep {layer!r} in fp32 / bound its outputs",
            **common,
        )
    collapse = collapse_reason(fp16)
    if collapse:
        common.update(suggested_init_scale=math.nan, growth_window=None, suggested_setting=None)
        return TrainingVerdict("scale-collapse", collapse, collapse_advice(fp16, safe), **common)
    if fp16.zero_share - fp32.zero_share >= penalty.underflow_threshold or underflowing:
        where = ", ".join(underflowing) or "the model"
        return TrainingVerdict(
            "underflow",
            f"{fp16.zero_share:.1%} of the fp16 gradients were exactly 0 against {fp32.zero_share:.1%} in the"
            f" fp32 control (at least {penalty.underflow_threshold:.0%} more in: {where}): the scale"
            f" {scale_text(min(fp16.scales))} is too small for these gradients (they need"
            f" {scale_text(needed)})",
            start_advice(setting, suggested, whole, safe),
            **common,
        )
    # Where the scale must move, skipping the steps whose gradients overflow at the needed scale is the cure
    # (_suggestion), not churn: only skipping beyond their share is chronic.
    forced = overflowing / max(1, fp32.steps) if moving else 0.0
    if later is not None and later >= CHRONIC_RATE and later > forced:
        after = len(fp16.skipped) - settled
        beyond = (
            f", more than the {forced:.1%} of steps whose gradients overflow at the {scale_text(needed)} the "
            "first steps need"
            if moving
            else ""
        )
        return TrainingVerdict(
            "chronic-skipping",
            f"after the scale first grew (step {settled}), {sum(fp16.skipped[settled:])} of {after} steps"
            f" were skipped ({later:.1%}, at least {CHRONIC_RATE:.0%}{beyond}); a scaler that grows into an"
            f" overflow once per window skips about {expected_skip_rate(setting):.2%}",
            chronic_advice(setting, whole, safe),
            **common,
        )
    # bf16 has fp32's range and less precision than fp16: what fp16 loses beyond bf16 is range, not precision.
    control = bf16 if bf16 is not None and bf16.finite else fp32
    best = control.eval_loss
    behind = fp16.eval_loss > (1 + penalty.learn_threshold) * best
    start = (
        min(fp16.scales[: fp16.start_steps]) if fp16.scales else math.nan
    )  # The scale while `needed` is measured.
    # A moving scale that starts at the needed scale dips below it only at the backoffs the overflowing steps
    # force.
    if behind and math.isfinite(needed) and start < needed and not (moving and init >= needed):
        return TrainingVerdict(
            "underflow",
            f"fp16 ends at {gnum(fp16.eval_loss)}, more than {penalty.learn_threshold:.0%} behind the"
            f" {control.label} control's {gnum(best)}, with its scale over {first_steps(fp16.start_steps)} at"
            f" {scale_text(start)}, below the {scale_text(needed)} the gradients need there"
            f" ({fp16.zero_share:.1%} of its gradients were 0 against {fp32.zero_share:.1%} in fp32)",
            start_advice(setting, suggested, whole, safe),
            **common,
        )
    share = fp16.skipped_steps / max(1, fp16.steps)
    if behind and share >= CHRONIC_RATE and not (moving and share <= forced):
        return TrainingVerdict(
            "chronic-skipping",
            f"fp16 ends at {gnum(fp16.eval_loss)}, more than {penalty.learn_threshold:.0%} behind the"
            f" {control.label} control's {gnum(best)}, and {fp16.skipped_steps} of {fp16.steps} steps"
            f" ({share:.1%}) were skipped while the scale searched down from {scale_text(fp16.scales[0])}"
            + ("" if settled is not None else " (it never grew)"),
            f"the run is too short to spend them: {start_advice(setting, suggested, whole, safe)}",
            **common,
        )
    if suggested != init and math.isfinite(suggested):
        if moving and whole is not None:
            advice = (
                "nothing to fix at these settings (no loss-scaling failure); a search can start from the"
                f" setting this diagnosis suggests, init_scale {scale_text(suggested)} (the"
                f" {scale_text(needed)} the first steps need, rounded up), growth_factor"
                f" {whole.growth_factor:g}, growth_interval {whole.growth_interval} (search.optimize"
                " --from-diagnosis trains it first)"
            )
        else:
            advice = (
                "nothing to fix at these settings (no loss-scaling failure); a search can centre init_scale"
                f" on {scale_text(suggested)}, {centre_clause(suggested, needed, safe)} (search.optimize"
                " --from-diagnosis)"
            )
    else:
        advice = HEALTHY_ADVICE
    skips = f"{fp16.skipped_steps} skipped steps"
    if moving and fp16.skipped_steps:
        skips += f" ({share:.1%}; {forced:.1%} of the steps overflow at the needed scale in the fp32 control)"
    return TrainingVerdict(
        "healthy",
        f"no forward overflow, {skips}, {fp16.zero_share:.1%} zero gradients against {fp32.zero_share:.1%} in"
        f" fp32; fp16 ends at {gnum(fp16.eval_loss)}, the {control.label} control at {gnum(best)}",
        advice,
        **common,
    )
