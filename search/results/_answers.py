"""The form a study's answer takes, chosen in one place for every rule, and the entry points that use it.

Every rule is judged the same way (the landscape, :mod:`search.results._choice`, the minimal change by replay,
confirmation runs weighed by :mod:`search.results._verdict`). What differs is how the answer is finished and
written:

* **GradScaler's form** (:func:`~search.results._recommendation.recommend`): an answer per device, its line
  rounded by trials that measure the rounding (a rounded ``init_scale`` changes the run), ranges safe together
  whose corners ``search.confirm`` trains, and the line for each framework that wraps GradScaler (torch,
  accelerate, Lightning, transformers: ``--paste``);
* **a framework's own form** (:func:`~search.results._rule_answer.answer_rule_study`): one answer in the
  framework's own config (DeepSpeed's JSON block, Megatron-LM's or fairseq's flags), its float knobs rounded
  by replay.

:func:`answer_form` is the only place above :mod:`search.scalers` that asks which form a rule's answer takes;
the summary, the confirmation's candidates, the rounding trials, the corner runs and ``--paste`` ask the form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from search.core import Settings, SpaceConfig
from search.results import _rule_summary, _summary
from search.results._candidates import (
    Candidate,
    default_candidate,
    recommended_candidate,
    rule_default_candidate,
    rule_recommended_candidate,
    top_candidates,
)
from search.results._paste import FRAMEWORKS
from search.results._tolerance import DEFAULT_TOLERANCE
from search.scalers import RULES, TORCH


@dataclass(frozen=True)
class AnswerForm:
    """How a rule's answer is finished and written (module docstring).

    Attributes:
        name: ``"gradscaler"`` or ``"framework"``.
        summarize: ``(study, space, confirmation, trials)`` to the summary's data (``--best-out``'s).
        format_summary: ``(data, framework)`` to the text printed at the end of a run.
        format_verdict: ``(data, framework)`` to the verdict's lines.
        recommended_candidate: ``(trials, settings, tolerance)`` to the answer as a confirmation candidate
            (None when it is the default).
        default_candidate: ``settings`` to the default as a candidate, and a note.
        paste_forms: The forms ``--paste`` picks among; empty where the answer is the framework's own block.
        rounds_by_trial: Whether the answer's line is rounded by trials that measure the rounding.
        trains_corners: Whether the answer states ranges safe together, whose corners ``search.confirm``
            trains.
        answer_settings: Summary data to the setting each answer names other than the default (a change, or
            one held back; None: the default), by device kind (GradScaler's per device; a framework's one
            answer under ``""``).
    """

    name: str
    summarize: Callable[[optuna.Study, SpaceConfig, dict[str, Any] | None, list[FrozenTrial]], dict[str, Any]]
    format_summary: Callable[[dict[str, Any], str], str]
    format_verdict: Callable[[dict[str, Any], str], list[str]]
    recommended_candidate: Callable[[Sequence[FrozenTrial], Settings, float], Candidate | None]
    default_candidate: Callable[[Settings], tuple[Candidate, str | None]]
    paste_forms: tuple[str, ...]
    rounds_by_trial: bool
    trains_corners: bool
    answer_settings: Callable[[dict[str, Any]], dict[str, dict[str, Any] | None]]


GRADSCALER_FORM = AnswerForm(
    name="gradscaler",
    summarize=_summary.summarize_gradscaler_study,
    format_summary=_summary.format_gradscaler_summary,
    format_verdict=_summary.format_gradscaler_verdict,
    recommended_candidate=recommended_candidate,
    default_candidate=default_candidate,
    paste_forms=tuple(FRAMEWORKS),
    rounds_by_trial=True,
    trains_corners=True,
    answer_settings=lambda data: {
        kind: rec.get("side_by_side", {}).get("answer_setting")
        for kind, rec in (data.get("recommended") or {}).items()
    },
)
FRAMEWORK_FORM = AnswerForm(
    name="framework",
    summarize=lambda study, space, confirmation, trials: _rule_summary.summarize_rule_study(
        study.study_name, trials, space, study.user_attrs["scaler"], confirmation
    ),
    format_summary=lambda data, framework: _rule_summary.format_rule_summary(data),
    format_verdict=lambda data, framework: _rule_summary.format_rule_verdict(data),
    recommended_candidate=rule_recommended_candidate,
    default_candidate=rule_default_candidate,
    paste_forms=(),
    rounds_by_trial=False,
    trains_corners=False,
    answer_settings=lambda data: {
        "": (data.get("recommended") or {}).get("side_by_side", {}).get("answer_setting")
    },
)


def answer_form(scaler: str) -> AnswerForm:
    """The form of a ``scaler`` study's answer: a framework's own where the service replays the framework's
    rule step by step (:attr:`~search.scalers.ScalerRule.replays`), else GradScaler's."""
    return FRAMEWORK_FORM if RULES[scaler].replays else GRADSCALER_FORM


def summarize(
    study: optuna.Study,
    space: SpaceConfig,
    confirmation: dict[str, Any] | None = None,
    trials: list[FrozenTrial] | None = None,
) -> dict[str, Any]:
    """Collects the summary of ``study`` as plain data (what ``--best-out`` writes), in its rule's form.

    Args:
        study: The search study.
        space: Its search space.
        confirmation: :func:`search.results._confirmations.summarize_confirmation` of the study, if any: the
            answer then reads its runs (as the report's does).
        trials: The study's trials, when the caller has read them already (read here otherwise).
    """
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    form = answer_form(study.user_attrs.get("scaler", TORCH))
    return form.summarize(study, space, confirmation, trials)


def format_summary(data: dict[str, Any], framework: str = "torch") -> str:
    """Renders :func:`summarize` output as the text printed at the end of a run.

    Args:
        data: :func:`summarize` output.
        framework: Whose line a GradScaler verdict shows (a key of :data:`~search.results._paste.FRAMEWORKS`).
    """
    return answer_form(data.get("scaler", TORCH)).format_summary(data, framework)


def format_verdict(data: dict[str, Any], framework: str = "torch") -> list[str]:
    """The summary's verdict lines; ``search.optimize`` prints them inside the summary and ``search.confirm``
    after its table, from the same :func:`summarize` data, so the two never disagree."""
    return answer_form(data.get("scaler", TORCH)).format_verdict(data, framework)


def select_candidates(
    trials: Sequence[FrozenTrial], settings: Settings, top: int, tolerance: float = DEFAULT_TOLERANCE
) -> tuple[list[Candidate], list[str]]:
    """The top-``top`` configurations of a study, its answer and the default, with notes for the user
    (:func:`~search.results._candidates.top_candidates`), the answer and the default in the rule's form."""
    form = answer_form(settings.run.scaler)
    return top_candidates(
        trials, settings, top, tolerance, form.recommended_candidate, form.default_candidate
    )
