"""A suggestion is trained before it is printed: the setting a verdict suggests against the one it diagnosed.

:func:`search.diagnosis.judge` reads the gradients of the fp32 control and proposes where the scale should
start (and, where the scale must move, how it regrows). That proposal is a reading of one run's gradients, not
a measurement of training with it: a gradient the reading trusts can mislead it. So the diagnosis trains the
suggested setting in fp16, on the same task, steps and seed, and keeps the suggestion only if that run

* ends in no failure code that the diagnosed run did not end in (``overflow_churn``, ``nonfinite``, ...),
* ends no worse than the diagnosed run (its evaluation, the one every trial is judged by), and
* skips no more steps than it, unless it ends better by more than the objective's ``learn_threshold`` (a start
  that keeps the smallest gradients may pay a few skipped steps at the start);

and, where the verdict found nothing to fix (``healthy``), only if it ends better by that threshold: a setting
that trains the same is no reason to change. A suggestion that fails this is not given: a ``healthy`` verdict
says the settings are fine, any other says that the start it measured did no better, and that a search of the
whole space is the next step. No torch here: :func:`search.diagnosis.suggestion_run` trains it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from search.core import PenaltyConfig
from search.diagnosis._advice import check_flags, gnum, start_text
from search.diagnosis._evidence import RunEvidence
from search.diagnosis._training_verdict import HEALTHY_ADVICE, TrainingVerdict
from search.scalers import RULES, RuleSetting, ScalerConfig


@dataclass(frozen=True)
class SuggestionCheck:
    """The suggested setting's own fp16 run, beside the diagnosed one.

    Attributes:
        settings: The setting trained, by knob name.
        eval_loss: Its final evaluation.
        skipped_steps: Its skipped steps.
        failure: Its failure code (``none``: none).
        steps: The steps it took.
        kept: Whether the suggestion stands (module docstring).
        why: Why it stands or not, in a clause with both runs' numbers.
    """

    settings: dict[str, float]
    eval_loss: float
    skipped_steps: int
    failure: str
    steps: int
    kept: bool
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; a non-finite evaluation as None."""
        out = dict(self.__dict__)
        out["eval_loss"] = self.eval_loss if math.isfinite(self.eval_loss) else None
        return out


def suggestion_of(
    verdict: TrainingVerdict, setting: ScalerConfig | RuleSetting
) -> ScalerConfig | RuleSetting | None:
    """The setting ``verdict`` suggests in place of ``setting`` (its whole suggestion, or ``setting``
    started at the suggested scale), or None: it suggests no change."""
    rule = RULES[setting.rule]
    if verdict.suggested_setting is not None:
        suggested = rule.setting(verdict.suggested_setting)
    elif math.isfinite(verdict.suggested_init_scale) and verdict.suggested_init_scale > 0:
        start = rule.knob(rule.start_knob)
        value = start.cast(rule.start_value(verdict.suggested_init_scale))
        suggested = rule.setting({**setting.values, rule.start_knob: value})
    else:
        return None
    return None if dict(suggested.values) == dict(setting.values) else suggested


def checked_suggestion(
    verdict: TrainingVerdict,
    setting: ScalerConfig | RuleSetting,
    trained: RunEvidence,
    diagnosed: RunEvidence,
    penalty: PenaltyConfig = PenaltyConfig(),
) -> TrainingVerdict:
    """``verdict`` with its suggestion kept or withdrawn by ``trained``, the suggestion's own fp16 run
    (module docstring); ``diagnosed`` is the fp16 run of ``setting``."""
    suggested = suggestion_of(verdict, setting)
    assert suggested is not None, "only a suggestion is checked"
    better = trained.eval_loss < (1 - penalty.learn_threshold) * diagnosed.eval_loss
    no_worse = math.isfinite(trained.eval_loss) and trained.eval_loss <= diagnosed.eval_loss
    failure_ok = trained.failure in ("none", diagnosed.failure)
    skips_ok = trained.skipped_steps <= diagnosed.skipped_steps or better
    kept = failure_ok and no_worse and skips_ok and (verdict.verdict != "healthy" or better)
    numbers = f"ends at {_outcome(trained)}, against these settings' {_outcome(diagnosed)}"
    if kept:
        why = f"trained here, it {numbers}"
    elif not failure_ok:
        why = f"trained here, it fails ({trained.failure}) where these settings do not: it {numbers}"
    elif not no_worse:
        why = f"trained here, it does worse: it {numbers}"
    elif not skips_ok:
        why = (
            f"trained here, it skips more steps without ending better by {penalty.learn_threshold:.0%}: it"
            f" {numbers}"
        )
    else:
        why = f"trained here, it ends no better by {penalty.learn_threshold:.0%}: it {numbers}"
    check = SuggestionCheck(
        dict(suggested.values),
        trained.eval_loss,
        trained.skipped_steps,
        trained.failure,
        trained.steps,
        kept,
        why,
    )
    if kept:
        return replace(verdict, advice=f"{verdict.advice}; {why}", suggestion_check=check.to_dict())
    withdrawn = f"{_setting_text(suggested)} ({why})"
    if verdict.verdict == "healthy":
        advice = f"{HEALTHY_ADVICE}; the diagnosis's own proposal, {withdrawn}, is not suggested"
    else:
        advice = (
            f"the start these gradients point to, {withdrawn}, does no better, so this diagnosis suggests no"
            " setting: search.optimize over the whole space measures which does"
        )
    init = RULES[setting.rule].start_scale(dict(setting.values))
    return replace(
        verdict,
        advice=advice,
        suggested_init_scale=init if verdict.verdict == "healthy" else math.nan,
        suggested_setting=None,
        suggestion_check=check.to_dict(),
    )


def _outcome(run: RunEvidence) -> str:
    failure = "" if run.failure == "none" else f", {run.failure}"
    return f"{gnum(run.eval_loss)} with {run.skipped_steps} of {run.steps} steps skipped{failure}"


def _setting_text(setting: ScalerConfig | RuleSetting) -> str:
    return f"{start_text(setting)} ({check_flags(setting)})"
