"""The answer and the default side by side, under any rule: what each trial measured, how sure the answer is.

The first thing a verdict owes its reader is the two runs it chose between: the trial the answer comes from
and the default's, each with its objective and its skipped steps over the trials' length, then whether new
seeds have confirmed the answer. A change held back for want of evidence
(:func:`search.results._choice.unseparated`) is shown as the change it would have been. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.trial import FrozenTrial

from search.core import SKIPPED_STEPS, failure_of
from search.results._choice import DEFAULT_MARGIN
from search.results._horizon import trial_steps


def side_by_side(
    trials: Sequence[FrozenTrial],
    answer_trial: int | None,
    default_trial: int | None,
    answer_setting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"answer": ..., "default": ..., "answer_setting": ...}``: each trial's number, objective, skipped
    steps, steps and failure code (None where it did not run; the answer's None when it is the default's
    trial), and the line the verdict names other than the default (a change, or one held back), by knob."""
    by_number = {t.number: t for t in trials}

    def measured(number: int | None) -> dict[str, Any] | None:
        trial = by_number.get(number) if number is not None else None
        if trial is None or trial.value is None:
            return None
        return {
            "trial": trial.number,
            "objective": trial.value,
            "skipped": int(trial.user_attrs.get(SKIPPED_STEPS, 0)),
            "steps": trial_steps(trial),
            "failure": failure_of(trial),
        }

    same = answer_trial is not None and answer_trial == default_trial
    return {
        "answer": None if same else measured(answer_trial),
        "default": measured(default_trial),
        "answer_setting": None if answer_setting is None else dict(answer_setting),
    }


def answer_label(verdict: str, held_back: object) -> str:
    """What the answer's trial is called beside the default's: the answer, the change held back, or the
    change the verdict weighed and turned down."""
    if verdict == "change":
        return "the answer"
    return "the change held back" if held_back is not None else "the change weighed"


def on_new_seeds(confirmed: str | None, seeds: int | None) -> str:
    """How sure an answer is: what confirmation runs said of it and on how many new seeds ("": none ran)."""
    if not confirmed:
        return ""
    return f"{confirmed} on {seeds} new seeds" if seeds else f"{confirmed} on new seeds"


def side_by_side_line(
    pair: dict[str, Any], answer_label: str, confirmed: str | None, seeds: int | None = None
) -> str:
    """One line: the answer's trial and the default's, each objective and skipped steps, and how sure."""
    parts = []
    for label, run in ((answer_label, pair.get("answer")), ("the default", pair.get("default"))):
        if run is None:
            continue
        steps = f" of {run['steps']}" if run["steps"] else ""
        failure = "" if run["failure"] == "none" else f", {run['failure']}"
        parts.append(
            f"{label} (#{run['trial']}): objective {run['objective']:.4g}, {run['skipped']}{steps} steps"
            f" skipped{failure}"
        )
    if not parts:
        return ""
    if pair.get("default") is None:
        parts.append("the default has not run in this study")
    if pair.get("answer") is None:
        return "; ".join(parts)
    sure = on_new_seeds(confirmed, seeds) or "not yet run on new seeds (search.confirm)"
    return "; ".join(parts) + f"; {sure}"


def why_sentence(rec: dict[str, Any]) -> str:
    """The verdict's reason in one sentence, from the numbers beside it (a summary's ``recommended`` data,
    under any rule); the long reasons (octaves, ties, the nearest trial) follow it elsewhere."""
    pair = rec.get("side_by_side") or {}
    answer, default = pair.get("answer"), pair.get("default")
    if rec["verdict"] == "change":
        if default is None:
            return "the default did not run in this study: this is the best of the space searched"
        if answer is not None and default["failure"] != "none" and answer["failure"] == "none":
            return f"the default ends in {default['failure']} here and the answer trains without failure"
        if answer is None:
            return "the answer's trial is the default's, with settings that did not act put back"
        return (
            f"the answer's trial ends at {answer['objective']:.4g} against the default's"
            f" {default['objective']:.4g}, apart beyond the spread this study measured"
            + ("; new seeds agree" if rec.get("confirmed") == "confirmed" else "")
        )
    if rec["verdict"] != "keep-default":
        return "no trial is good: see the failure column"
    if rec.get("confirmed") in ("overturned", "not better"):
        return f"the change weighed was {on_new_seeds(rec['confirmed'], rec.get('confirmed_seeds'))}"
    if rec.get("held_back") is not None:
        return (
            "the change found is not separated from the default by this study's own evidence"
            " (search.confirm settles it)"
        )
    if answer is None:
        return (
            f"the default is a good trial here, at least {DEFAULT_MARGIN:g} octaves from any trial that is"
            " not good, with good trials around it"
        )
    return "the change found differs from the default only in settings that did not act in its run"


def run_length_line(run_length: dict[str, Any] | None, answer_label: str) -> str:
    """The skipped steps over the user's run (``search.optimize --run-steps``), as measured ("": none)."""
    if not run_length:
        return ""
    steps = run_length["steps"]
    runs = ((answer_label, run_length.get("answer")), ("the default", run_length.get("default")))
    parts = [
        f"{label} skips {run['skipped']} of {steps} and ends at {run['eval_loss']:.4g}"
        for label, run in runs
        if run is not None
    ]
    source = run_length.get("source", "--run-steps")
    return (
        f"over a run of {steps} steps ({source}; measured: each trained {steps} steps on this study's seed): "
        + "; ".join(parts)
    )
