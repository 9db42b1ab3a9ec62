"""The advice a training diagnosis gives, in words: where to start the scale, what a collapse or a chronic
overflow asks for, the flags that write a setting, scales as powers of two.

:func:`search.diagnosis._training_verdict.judge` decides the verdict; these functions only say it.
"""

from __future__ import annotations

import dataclasses
import math

from search.diagnosis._evidence import RunEvidence
from search.scalers import RULES, RuleSetting, ScalerConfig


def chronic_advice(setting: ScalerConfig | RuleSetting, whole: ScalerConfig | None) -> str:
    """Where the scale must move, the growth that regrows one backoff per overflow period (the window bounds
    the interval, so a longer one is no cure); else a longer interval."""
    if (
        isinstance(setting, ScalerConfig)
        and whole is not None
        and whole.growth_factor != setting.growth_factor
    ):
        return start_advice(setting, whole.init_scale, whole)
    return "lengthen the growth interval (GradScaler's growth_interval, a framework's loss_scale_window)"


def collapse_reason(fp16: RunEvidence) -> str:
    if fp16.ended_by_rule:
        return (
            f"the scale reached the rule's minimum and the framework ended the run at step {fp16.steps - 1} "
            f"(after {fp16.steps} of {fp16.planned_steps} steps)"
        )
    if fp16.min_scale is not None:
        at = [i for i, (s, k) in enumerate(zip(fp16.scales, fp16.skipped)) if s <= fp16.min_scale and k]
        if at:
            return (
                f"the scale reached the rule's minimum {scale_text(fp16.min_scale)} at step {at[0]} and "
                f"{len(at)} steps overflowed there"
            )
        return ""
    low = [i for i, s in enumerate(fp16.scales) if s < 1]
    if not low:
        return ""
    return (
        f"the scale fell below 1 at step {low[0]} and ended at {scale_text(fp16.scales[-1])}:"
        f" {fp16.skipped_steps} steps had gradients that overflow fp16 even unscaled (GradScaler has no"
        " minimum; DeepSpeed's rule, at its default minimum 1, ends such a run)"
    )


def collapse_advice(fp16: RunEvidence, safe: float) -> str:
    return (
        f"gradients above 65504 (fp32 control: the largest needs a scale of {scale_text(safe)} or less) skip"
        " at every scale: find the batches or layers behind them (a summed loss, corrupted labels) or train"
        " in bf16"
    )


def bf16_note(bf16: RunEvidence | None) -> str:
    if bf16 is None:
        return " (not measured: this device has no bf16)"
    outcome = "went inf/NaN" if not bf16.finite else f"ended at {gnum(bf16.eval_loss)}"
    return f" (the bf16 control {outcome}, {bf16.skipped_steps} skipped)"


def suggested_scale(init: float, needed: float, safe: float) -> float:
    if math.isfinite(needed) and math.isfinite(safe) and needed <= init <= safe:
        return init
    ends = [math.log2(v) for v in (needed, safe) if math.isfinite(v) and v > 0]
    if not ends:
        return init
    return 2.0 ** round(sum(ends) / len(ends))


def scale_text(value: float, digits: int = 1) -> str:
    """A scale as people write it: 2^k when it is a power of two, else 2^k.k to ``digits`` decimals
    (``unknown``: not finite or <= 0)."""
    if not math.isfinite(value) or value <= 0:
        return "unknown"
    k = math.log2(value)
    return f"2^{int(k)}" if k.is_integer() else f"2^{k:.{digits}f}"


def first_steps(steps: int) -> str:
    return "the first step" if steps == 1 else f"the first {steps} steps"


def start_advice(setting: ScalerConfig | RuleSetting, scale: float, whole: ScalerConfig | None = None) -> str:
    """ "start at ..." in the setting's own terms: GradScaler's init_scale (with the growth ``whole`` suggests
    where it changes the user's), or the framework's starting knob."""
    if isinstance(setting, ScalerConfig):
        target = dataclasses.replace(whole if whole is not None else setting, init_scale=scale)
        check = f"rerun this diagnosis with {check_flags(target)} to check it"
        if (
            whole is not None and whole.growth_factor != setting.growth_factor
        ):  # A moving scale (_suggestion).
            return (
                f"start at init_scale {scale_text(scale)} and regrow after each backoff: growth_factor "
                f"{whole.growth_factor:g}, growth_interval {whole.growth_interval} ({check})"
            )
        if (
            whole is not None and whole.growth_interval != setting.growth_interval
        ):  # Steady: growth need not act.
            return (
                f"start at init_scale {scale_text(scale)}, growth_interval {whole.growth_interval} (growth"
                f" need not act within these steps; {check})"
            )
        return f"start at init_scale {scale_text(scale)} ({check})"
    rule = RULES[setting.rule]
    knob, value = rule.start_knob, plain_number(rule.start_value(scale))
    return (
        f"start at {scale_text(scale)}: {knob} {value} (rerun this diagnosis with --knob {knob}={value} to"
        " check it)"
    )


def check_flags(setting: ScalerConfig) -> str:
    """The ``search.diagnose`` flags that set ``setting``: those that differ from GradScaler's defaults, which
    the command's flags default to (--init-scale always). The user adds them to the command of their run (its
    --task,
    --steps), which the verdict cannot know."""
    words = [f"--init-scale {plain_number(setting.init_scale)}"]
    for flag, value, default in (
        ("--growth-factor", setting.growth_factor, 2.0),
        ("--backoff-factor", setting.backoff_factor, 0.5),
        ("--growth-interval", setting.growth_interval, 2000),
    ):
        if value != default:
            words.append(f"{flag} {value:g}")
    return " ".join(words)


def plain_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def gnum(value: float) -> str:
    return f"{value:.4g}"
