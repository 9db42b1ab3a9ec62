"""The advice a training diagnosis gives, in words: where to start the scale, what a collapse or a chronic
overflow asks for, the flags that write a setting, scales as powers of two.

:func:`search.diagnosis._training_verdict.judge` decides the verdict; these functions only say it.
"""

from __future__ import annotations

import math

from search.diagnosis._evidence import RunEvidence
from search.scalers import RULES, RuleSetting, ScalerConfig


def chronic_advice(
    setting: ScalerConfig | RuleSetting, whole: ScalerConfig | RuleSetting | None, safe: float = math.nan
) -> str:
    """Where the scale must move, the growth that regrows one backoff per overflow period (the window bounds
    the interval, so a longer one is no cure); else a longer interval."""
    if whole is not None and _regrows(setting, whole):
        rule = RULES[setting.rule]
        return start_advice(setting, rule.start_scale(whole.values), whole, safe)
    return "lengthen the growth interval (GradScaler's growth_interval, a framework's loss_scale_window)"


def _regrows(setting: ScalerConfig | RuleSetting, whole: ScalerConfig | RuleSetting) -> bool:
    """Whether a suggested setting moves the scale: it changes a knob that acts only when the scale grows."""
    return any(whole.values[k] != setting.values[k] for k in RULES[setting.rule].grows_with)


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


def centre_clause(suggested: float, needed: float, safe: float) -> str:
    """Where a suggested start lies, in words that agree with the two scales it comes from."""
    if needed <= suggested <= safe:
        return (
            f"between the {scale_text(needed)} the smallest gradients need and the {scale_text(safe)} the"
            " largest allow"
        )
    if needed > safe:
        return (
            f"halfway, in octaves, from the {scale_text(safe)} the largest gradients allow to the"
            f" {scale_text(needed)} the smallest need (no one scale keeps both)"
        )
    return f"the nearest power of two to the middle of {scale_text(needed)}..{scale_text(safe)}"


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


def start_advice(
    setting: ScalerConfig | RuleSetting,
    scale: float,
    whole: ScalerConfig | RuleSetting | None = None,
    safe: float = math.nan,
) -> str:
    """ "start at ..." in the rule's own terms: its starting knob, with the growth ``whole`` suggests where it
    changes the user's (:mod:`search.diagnosis._suggestion`), and the flags that rerun the diagnosis so. A
    start above ``safe``, the largest safe scale, says so and what it costs."""
    rule = RULES[setting.rule]
    start = rule.knob(rule.start_knob)
    target = {**(whole or setting).values, start.name: start.cast(rule.start_value(scale))}
    check = f"rerun this diagnosis with {check_flags(rule.setting(target))} for its own diagnosis"
    scale_written = scale_text(rule.start_scale(target))
    at = start_text(rule.setting(target))
    above = ""
    if math.isfinite(safe) and rule.start_scale(target) > safe:
        above = (
            f"; {scale_written} is above the {scale_text(safe)} the largest gradient allows: the steps whose"
            " gradients reach it are skipped and the scale backs off"
        )
    if whole is not None and _regrows(setting, whole):  # A moving scale (_suggestion).
        growth = ", ".join(f"{k} {whole.values[k]:g}" for k in (*rule.grows_with, rule.window_knob))
        return f"start at {at} and regrow after each backoff: {growth} ({check}){above}"
    window = rule.window_knob
    if whole is not None and whole.values[window] != setting.values[window]:  # Steady: growth need not act.
        return (
            f"start at {at}, {window} {whole.values[window]:g} (growth need not act within these steps;"
            f" {check}){above}"
        )
    return f"start at {at} ({check}){above}"


def start_text(setting: ScalerConfig | RuleSetting) -> str:
    """Where ``setting`` starts the scale, in its rule's knob: ``init_scale 2^20``, or ``initial_scale_power
    20, a scale of 2^20`` where the knob is the scale's exponent."""
    rule = RULES[setting.rule]
    start = rule.knob(rule.start_knob)
    written = scale_text(rule.start_scale(dict(setting.values)))
    if start.octaves:
        return f"{start.name} {plain_number(setting.values[start.name])}, a scale of {written}"
    return f"{start.name} {written}"


def check_flags(setting: ScalerConfig | RuleSetting) -> str:
    """The ``search.diagnose`` flags that set ``setting``: the starting knob always, the others where they
    differ from the rule's defaults, which the command's flags default to (GradScaler's own flags,
    ``--knob NAME=VALUE`` for a framework's knobs). The user adds them to the command of their run (its
    --task, --steps), which the verdict cannot know."""
    rule = RULES[setting.rule]
    words = []
    for knob in rule.knobs:
        value = setting.values[knob.name]
        if knob.name != rule.start_knob and value == knob.default:
            continue
        text = plain_number(value) if knob.name == rule.start_knob else f"{value:g}"
        words.append(f"{knob.flag} {text}" if knob.flag else f"--knob {knob.name}={text}")
    return " ".join(words)


def plain_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def gnum(value: float) -> str:
    return f"{value:.4g}"
