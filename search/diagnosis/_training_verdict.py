"""What a training diagnosis concludes: one verdict from the fp16 run and its controls, with its evidence.

The verdicts, the first that holds wins (each names the evidence it rests on):

* ``diverges-in-fp32``: the fp32 control's loss or weights went inf/NaN, or its evaluation ended worse than
  the initial weights': the run fails without any fp16, so no loss scale is the fix (learning rate, data);
* ``forward-overflow``: a layer's forward output was inf/NaN in fp16 from finite inputs. The loss scale
  multiplies the loss *after* the forward pass, so no scale helps: bf16 (fp32's range) or that layer is the fix;
* ``scale-collapse``: under a framework's rule, the scale reached the rule's minimum (DeepSpeed and fairseq end
  the run there, Megatron clamps and goes on skipping); under GradScaler, which has no minimum, it fell below 1:
  some gradients overflow fp16 even unscaled, so scaling down is all a scaler can do;
* ``underflow``: the fp16 run's gradients were exactly zero where the fp32 control's were not, by at least the
  objective's ``underflow_threshold`` (the same rule as a trial's ``underflow`` failure code), over the whole
  model or in one parameter: the scale in use is too small for fp16;
* ``chronic-skipping``: after the scale first grew (the initial search down from ``init_scale`` is expected),
  at least :data:`~search.diagnosis.CHRONIC_RATE` of the steps were skipped: it keeps growing into overflows
  (the growth interval is too short for this run);
* the same two where the fp16 run ends more than the objective's ``learn_threshold`` behind the bf16 control
  (the fp32 control where the device has no bf16) and nothing above explains it: bf16 has fp32's range and less
  precision than fp16, so what fp16 loses beyond it is range; ``underflow`` when its scale was below the scale the gradients need,
  ``chronic-skipping`` when at least ``CHRONIC_RATE`` of its steps were skipped in the initial search (a run too
  short to spend them: start lower);
* ``healthy``: none of these.

The scale the gradients need, from the fp32 control's true magnitudes: ``needed_scale`` keeps every
parameter's median non-zero gradient over the first steps at or above fp16's smallest subnormal 2^-24;
``largest_safe_scale`` keeps the largest gradient of the run under 65504. ``suggested_init_scale`` is the
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

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from search.core import PenaltyConfig
from search.diagnosis._evidence import FP16_MAX, FP16_SMALLEST, RunEvidence
from search.diagnosis._log_reading import CHRONIC_RATE
from search.diagnosis._suggestion import moving_start, suggested_setting
from search.scalers import RULES, RuleSetting, ScalerConfig

VERDICTS = ("healthy", "underflow", "chronic-skipping", "forward-overflow", "diverges-in-fp32", "scale-collapse")


@dataclass(frozen=True)
class TrainingVerdict:
    """The diagnosis's conclusion and the numbers it rests on.

    Attributes:
        verdict: One of :data:`VERDICTS`.
        reason: Why, in a sentence of evidence.
        advice: What to do about it.
        needed_scale: The scale that keeps the smallest parameter median over the first steps representable (nan:
            no non-zero gradient).
        largest_safe_scale: 65504 over the largest gradient of the fp32 control (nan: none).
        suggested_init_scale: A starting scale that keeps the measured gradients representable (see the module);
            nan where no starting scale is the fix.
        settled_step: The first step at which the scale had grown (the end of the initial search), or None.
        expected_skip_rate: The skip rate of a scaler that grows into an overflow each window and backs off.
        measured_skip_rate: Skipped steps per step after settling, or None when it never settled.
        underflowing: Parameters whose fp16 zeros exceed the fp32 control's by the threshold.
        forward_layer: The layer where the forward pass first overflowed most often, or None.
        overflow_steps_at_needed: The fp32 control's steps whose largest gradient overflows fp16 at
            ``needed_scale``.
        growth_window: The ``growth_interval`` range the gradients call for, (low, high), high None for no
            bound (:func:`growth_window`); None where no starting scale is the fix or nothing was measured.
        suggested_setting: The whole GradScaler setting suggested (:mod:`search.diagnosis._suggestion`), by param
            name; None for a framework's rule, or where no starting scale is the fix.
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

    def growth_sentence(self, steps: int) -> str:
        """The growth window in words, with its evidence ("": none)."""
        if self.growth_window is None:
            return ""
        low, high = self.growth_window
        needed, safe = scale_text(self.needed_scale), scale_text(self.largest_safe_scale)
        if high is None and self.needed_scale <= self.largest_safe_scale:
            return (f"the first steps need {needed} and the largest gradient allows {safe}: a steady scale between "
                    f"them keeps every gradient representable, so growth need not act: growth_interval >= {low}")
        if high is None:
            return (f"the first steps need {needed} and the largest gradient allows {safe}, within an octave: one "
                    f"steady scale serves this run about as well as any, and growing walks it into overflows "
                    f"({self.overflow_steps_at_needed} of {steps} steps overflow at {needed}), so growth need not "
                    f"act: growth_interval >= {low}")  # fmt: skip
        return (f"{self.overflow_steps_at_needed} of {steps} steps overflow at the {needed} the first steps need "
                f"(the largest gradient allows {safe}): a scale there backs off at each and must regrow before the next, "
                f"one every {steps / max(1, self.overflow_steps_at_needed):.1f} steps on average: growth_interval <= {high}")

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
    """The first step whose scale is above the step before's: the initial search down from the start is over."""
    return next((i for i in range(1, len(scales)) if scales[i] > scales[i - 1]), None)


def growth_window(
    needed: float, safe: float, step_largest: tuple[float, ...], steps: int
) -> tuple[tuple[int, int | None] | None, int]:
    """The growth intervals a run's gradients call for, and how many steps overflow at the needed scale.

    ``step_largest`` is the fp32 control's per-step largest gradient. Where ``needed <= 2 * safe``, a scale held
    steady serves every step about as well as one scale can, and growing only overflows: ``(steps, None)``,
    growth need not act within the run. Further above, the scale that keeps the first steps' gradients must back
    off at every step overflowing it and be regrown before the next one: at most their mean period (the run's
    steps per such step, rounded up), a whole window per regrowth since a scaler grows only after a window of
    clean steps.
    """
    overflowing = sum(1 for v in step_largest if math.isfinite(v) and v * needed > FP16_MAX) if math.isfinite(needed) else 0
    if not (math.isfinite(needed) and math.isfinite(safe)) or not step_largest or steps < 1:
        return None, overflowing
    if needed <= 2 * safe:
        return (steps, None), overflowing
    return (1, max(1, math.ceil(steps / max(1, overflowing)))), overflowing


# What a healthy verdict can claim: no failure at these settings. Not "keep them": whether other settings train
# better is what a search measures, and its study may find some (it compares with its best, not with a control).
HEALTHY_ADVICE = ("nothing to fix at these settings: they show no loss-scaling failure (whether other settings train "
                  "better is what search.optimize measures)")


def judge(
    fp16: RunEvidence,
    fp32: RunEvidence,
    bf16: RunEvidence | None,
    setting: ScalerConfig | RuleSetting,
    penalty: PenaltyConfig = PenaltyConfig(),
) -> TrainingVerdict:
    """The verdict on ``setting`` from its fp16 run and the controls (module docstring)."""
    medians = [p.first_median for p in fp32.parameters if math.isfinite(p.first_median) and p.first_median > 0]
    needed = FP16_SMALLEST / min(medians) if medians else math.nan
    largest = fp32.largest_gradient()
    safe = FP16_MAX / largest if math.isfinite(largest) and largest > 0 else math.nan
    init = init_scale_of(setting, fp16.scales)
    window, overflowing = growth_window(needed, safe, fp32.step_largest, fp32.steps)
    moving = window is not None and window[1] is not None  # The scale must back off and regrow (_suggestion).
    suggested = moving_start(needed) if moving else _suggested(init, needed, safe)
    settled = settled_step(fp16.scales)
    later = None
    if settled is not None:
        later = sum(fp16.skipped[settled:]) / max(1, len(fp16.skipped) - settled)
    fp32_zeros = {p.name: p.zero_share for p in fp32.parameters}
    underflowing = tuple(
        p.name for p in fp16.parameters if p.zero_share - fp32_zeros.get(p.name, 0.0) >= penalty.underflow_threshold
    )
    origins = fp16.forward_origins()
    layer = max(origins, key=lambda name: len(origins[name])) if origins else None
    whole = suggested_setting(setting, suggested, window, overflowing, fp32.steps)
    common = dict(needed_scale=needed, largest_safe_scale=safe, suggested_init_scale=suggested, settled_step=settled,
                  expected_skip_rate=expected_skip_rate(setting), measured_skip_rate=later,
                  underflowing=underflowing, forward_layer=layer, overflow_steps_at_needed=overflowing,
                  growth_window=window, suggested_setting=None if whole is None else dataclasses.asdict(whole))  # fmt: skip
    bf16_line = _bf16_line(bf16)

    if not fp32.finite or fp32.failure == "nonfinite" or fp32.eval_loss > fp32.initial_eval_loss:
        what = "went inf/NaN" if not fp32.finite or fp32.failure == "nonfinite" else (
            f"ended at {_g(fp32.eval_loss)}, worse than the initial weights' {_g(fp32.initial_eval_loss)}")  # fmt: skip
        common.update(suggested_init_scale=math.nan, growth_window=None, suggested_setting=None)  # No setting is the fix.
        return TrainingVerdict("diverges-in-fp32", f"the fp32 control, with no fp16 and no scaling, {what}",
                               "this is not a loss-scaling problem: look at the learning rate, the data and the "
                               "model first (then diagnose again)", **common)  # fmt: skip
    if layer is not None:
        steps = len(origins[layer])
        common.update(suggested_init_scale=math.nan, growth_window=None, suggested_setting=None)
        fp32_layer = next((f.largest for f in fp32.layers if f.name == layer), math.nan)
        return TrainingVerdict(
            "forward-overflow",
            f"the forward pass overflowed fp16 in layer {layer!r} at {steps} of {fp16.steps} steps (its outputs "
            f"reach {_g(fp32_layer)} in the fp32 control; fp16 ends at 65504), before any loss scale acts",
            f"no loss scale helps: train in bf16{bf16_line}, or keep {layer!r} in fp32 / bound its outputs", **common)
    collapse = _collapse(fp16)
    if collapse:
        common.update(suggested_init_scale=math.nan, growth_window=None, suggested_setting=None)
        return TrainingVerdict("scale-collapse", collapse, _collapse_advice(fp16, safe), **common)
    if fp16.zero_share - fp32.zero_share >= penalty.underflow_threshold or underflowing:
        where = ", ".join(underflowing) or "the model"
        return TrainingVerdict(
            "underflow",
            f"{fp16.zero_share:.1%} of the fp16 gradients were exactly 0 against {fp32.zero_share:.1%} in the fp32 "
            f"control (at least {penalty.underflow_threshold:.0%} more in: {where}): the scale "
            f"{scale_text(min(fp16.scales))} is too small for these gradients (they need {scale_text(needed)})",
            start_advice(setting, suggested, whole), **common)  # fmt: skip
    # Where the scale must move, skipping the steps whose gradients overflow at the needed scale is the cure
    # (_suggestion), not churn: only skipping beyond their share is chronic.
    forced = overflowing / max(1, fp32.steps) if moving else 0.0
    if later is not None and later >= CHRONIC_RATE and later > forced:
        after = len(fp16.skipped) - settled
        beyond = (f", more than the {forced:.1%} of steps whose gradients overflow at the {scale_text(needed)} the "
                  "first steps need" if moving else "")  # fmt: skip
        return TrainingVerdict(
            "chronic-skipping",
            f"after the scale first grew (step {settled}), {sum(fp16.skipped[settled:])} of {after} steps were "
            f"skipped ({later:.1%}, at least {CHRONIC_RATE:.0%}{beyond}); a scaler that grows into an overflow once "
            f"per window skips about {expected_skip_rate(setting):.2%}",
            _chronic_advice(setting, whole), **common)
    # bf16 has fp32's range and less precision than fp16: what fp16 loses beyond bf16 is range, not precision.
    control = bf16 if bf16 is not None and bf16.finite else fp32
    best = control.eval_loss
    behind = fp16.eval_loss > (1 + penalty.learn_threshold) * best
    start = min(fp16.scales[: fp16.start_steps]) if fp16.scales else math.nan  # The scale while `needed` is measured.
    # A moving scale that starts at the needed scale dips below it only at the backoffs the overflowing steps force.
    if behind and math.isfinite(needed) and start < needed and not (moving and init >= needed):
        return TrainingVerdict(
            "underflow",
            f"fp16 ends at {_g(fp16.eval_loss)}, more than {penalty.learn_threshold:.0%} behind the {control.label} control's "
            f"{_g(best)}, with its scale over {_first(fp16.start_steps)} at {scale_text(start)}, below the "
            f"{scale_text(needed)} the gradients need there ({fp16.zero_share:.1%} of its gradients were 0 against {fp32.zero_share:.1%} in fp32)",
            start_advice(setting, suggested, whole), **common)  # fmt: skip
    share = fp16.skipped_steps / max(1, fp16.steps)
    if behind and share >= CHRONIC_RATE and not (moving and share <= forced):
        return TrainingVerdict(
            "chronic-skipping",
            f"fp16 ends at {_g(fp16.eval_loss)}, more than {penalty.learn_threshold:.0%} behind the {control.label} control's "
            f"{_g(best)}, and {fp16.skipped_steps} of {fp16.steps} steps ({share:.1%}) were skipped while the scale "
            f"searched down from {scale_text(fp16.scales[0])}" + ("" if settled is not None else " (it never grew)"),
            f"the run is too short to spend them: {start_advice(setting, suggested, whole)}", **common)  # fmt: skip
    if suggested != init and math.isfinite(suggested):
        if moving and whole is not None:
            advice = (f"nothing to fix at these settings (no loss-scaling failure); a search can start from the setting "
                      f"this diagnosis suggests, init_scale {scale_text(suggested)} (the {scale_text(needed)} the first "
                      f"steps need, rounded up), growth_factor {whole.growth_factor:g}, growth_interval "
                      f"{whole.growth_interval} (search.optimize --from-diagnosis trains it first)")  # fmt: skip
        else:
            advice = (f"nothing to fix at these settings (no loss-scaling failure); a search can centre init_scale on "
                      f"{scale_text(suggested)}, between the {scale_text(needed)} the smallest gradients need and the "
                      f"{scale_text(safe)} the largest allow (search.optimize --from-diagnosis)")  # fmt: skip
    else:
        advice = HEALTHY_ADVICE
    skips = f"{fp16.skipped_steps} skipped steps"
    if moving and fp16.skipped_steps:
        skips += f" ({share:.1%}; {forced:.1%} of the steps overflow at the needed scale in the fp32 control)"
    return TrainingVerdict(
        "healthy",
        f"no forward overflow, {skips}, {fp16.zero_share:.1%} zero gradients against "
        f"{fp32.zero_share:.1%} in fp32; fp16 ends at {_g(fp16.eval_loss)}, the {control.label} control at {_g(best)}",
        advice, **common)  # fmt: skip


def _chronic_advice(setting: ScalerConfig | RuleSetting, whole: ScalerConfig | None) -> str:
    """Where the scale must move, the growth that regrows one backoff per overflow period (the window bounds the
    interval, so a longer one is no cure); else a longer interval."""
    if isinstance(setting, ScalerConfig) and whole is not None and whole.growth_factor != setting.growth_factor:
        return start_advice(setting, whole.init_scale, whole)
    return "lengthen the growth interval (GradScaler's growth_interval, a framework's loss_scale_window)"


def _collapse(fp16: RunEvidence) -> str:
    if fp16.ended_by_rule:
        return (f"the scale reached the rule's minimum and the framework ended the run at step {fp16.steps - 1} "
                f"(after {fp16.steps} of {fp16.planned_steps} steps)")
    if fp16.min_scale is not None:
        at = [i for i, (s, k) in enumerate(zip(fp16.scales, fp16.skipped)) if s <= fp16.min_scale and k]
        if at:
            return (f"the scale reached the rule's minimum {scale_text(fp16.min_scale)} at step {at[0]} and "
                    f"{len(at)} steps overflowed there")  # fmt: skip
        return ""
    low = [i for i, s in enumerate(fp16.scales) if s < 1]
    if not low:
        return ""
    return (f"the scale fell below 1 at step {low[0]} and ended at {scale_text(fp16.scales[-1])}: {fp16.skipped_steps} "
            "steps had gradients that overflow fp16 even unscaled (GradScaler has no minimum; DeepSpeed's rule, at its "
            "default minimum 1, ends such a run)")  # fmt: skip


def _collapse_advice(fp16: RunEvidence, safe: float) -> str:
    return (f"gradients above 65504 (fp32 control: the largest needs a scale of {scale_text(safe)} or less) skip at "
            "every scale: find the batches or layers behind them (a summed loss, corrupted labels) or train in bf16")


def _bf16_line(bf16: RunEvidence | None) -> str:
    if bf16 is None:
        return " (not measured: this device has no bf16)"
    outcome = "went inf/NaN" if not bf16.finite else f"ended at {_g(bf16.eval_loss)}"
    return f" (the bf16 control {outcome}, {bf16.skipped_steps} skipped)"


def _suggested(init: float, needed: float, safe: float) -> float:
    if math.isfinite(needed) and math.isfinite(safe) and needed <= init <= safe:
        return init
    ends = [math.log2(v) for v in (needed, safe) if math.isfinite(v) and v > 0]
    if not ends:
        return init
    return 2.0 ** round(sum(ends) / len(ends))


def scale_text(value: float, digits: int = 1) -> str:
    """A scale as people write it: 2^k when it is a power of two, else 2^k.k to ``digits`` decimals (``unknown``:
    not finite or <= 0)."""
    if not math.isfinite(value) or value <= 0:
        return "unknown"
    k = math.log2(value)
    return f"2^{int(k)}" if k.is_integer() else f"2^{k:.{digits}f}"


def _first(steps: int) -> str:
    return "the first step" if steps == 1 else f"the first {steps} steps"


def start_advice(setting: ScalerConfig | RuleSetting, scale: float, whole: ScalerConfig | None = None) -> str:
    """"start at ..." in the setting's own terms: GradScaler's init_scale (with the growth ``whole`` suggests where
    it changes the user's), or the framework's starting knob."""
    if isinstance(setting, ScalerConfig):
        target = dataclasses.replace(whole if whole is not None else setting, init_scale=scale)
        check = f"rerun this diagnosis with {check_flags(target)} to check it"
        if whole is not None and whole.growth_factor != setting.growth_factor:  # A moving scale (_suggestion).
            return (f"start at init_scale {scale_text(scale)} and regrow after each backoff: growth_factor "
                    f"{whole.growth_factor:g}, growth_interval {whole.growth_interval} ({check})")  # fmt: skip
        if whole is not None and whole.growth_interval != setting.growth_interval:  # Steady: growth need not act.
            return (f"start at init_scale {scale_text(scale)}, growth_interval {whole.growth_interval} (growth need "
                    f"not act within these steps; {check})")  # fmt: skip
        return f"start at init_scale {scale_text(scale)} ({check})"
    rule = RULES[setting.rule]
    knob, value = rule.start_knob, _plain(rule.start_value(scale))
    return f"start at {scale_text(scale)}: {knob} {value} (rerun this diagnosis with --knob {knob}={value} to check it)"


def check_flags(setting: ScalerConfig) -> str:
    """The ``search.diagnose`` flags that set ``setting``: those that differ from GradScaler's defaults, which the
    command's flags default to (--init-scale always). The user adds them to the command of their run (its --task,
    --steps), which the verdict cannot know."""
    words = [f"--init-scale {_plain(setting.init_scale)}"]
    for flag, value, default in (("--growth-factor", setting.growth_factor, 2.0),
                                 ("--backoff-factor", setting.backoff_factor, 0.5),
                                 ("--growth-interval", setting.growth_interval, 2000)):  # fmt: skip
        if value != default:
            words.append(f"{flag} {value:g}")
    return " ".join(words)


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def _g(value: float) -> str:
    return f"{value:.4g}"
