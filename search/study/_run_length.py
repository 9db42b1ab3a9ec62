"""The skipped steps of the user's own run length (``search.optimize`` and ``search.confirm --run-steps N``),
measured.

A trial runs a few tens of steps, and its skips say little about a run of N: a start-up search down from
a high scale is paid once, while a scale that grows into an overflow every window skips at a steady rate
for ever, and a scale that starts low may only reach its overflow edge after hundreds of steps. A projection
from the trial's record misses the last kind entirely (from 2^10.3, growing 1.37x every 7 clean steps,
seed-mlp skips nothing in 30 steps and 7 of 300) and underestimates the second (growth_interval 3: 21 of
300 projected from the first growth on, 36 measured). So the figure is measured: the answer's line (or the
change held back) and the rule's default each train N steps on the study's seed, exactly as a trial trains
(:func:`search.training.train`), and their skipped steps are counted. That costs two runs of N steps,
said before they start.
"""

from __future__ import annotations

from typing import Any

import optuna
import torch

from search.core import Settings, resolve_device
from search.results import answer_form
from search.scalers import RULES
from search.storage import first_line, open_existing_storage, redact
from search.tasks import LoaderProblem, Problem, build_problem, resolve_task
from search.training import skips_over


def measure_run_length(
    settings: Settings,
    summary: dict[str, Any],
    run_steps: int,
    problem: Problem | LoaderProblem | None = None,
    device: torch.device | None = None,
    source: str = "--run-steps",
) -> dict[str, Any]:
    """``{"steps": N, "default": {...}, "answer": {...}}``: each setting's skipped steps and evaluation
    after ``run_steps`` steps; ``answer`` absent where the verdict names no other setting than the default.

    The answer is the setting the verdict names (:attr:`~search.results.AnswerForm.answer_settings`: the
    answer on the device trained here, or a framework's one answer, or the first). ``problem``: the study's
    task on its seed, built here when not given; ``device``: the settings' when not given; ``source``: where N
    came from (the flag, or the task's ``run_steps``), said with the figures.
    """
    rule = RULES[settings.run.scaler]
    device = device or resolve_device(settings.run.device)
    if problem is None:
        problem = build_problem(
            resolve_task(settings.run.task), settings.run.task, settings.run.seed, settings.run.checkpoint
        )
    problem = problem.to(device)
    answers = answer_form(settings.run.scaler).answer_settings(summary)
    answer = answers.get(device.type, answers.get("", next(iter(answers.values()), None)))
    runs = {"default": rule.setting(dict(rule.default))}
    if answer is not None and dict(answer) != dict(rule.default):
        runs["answer"] = rule.setting(dict(answer))
    return {"steps": run_steps, "source": source, **skips_over(problem, runs, run_steps)}


def publish_run_length(settings: Settings, summary: dict[str, Any]) -> str:
    """Writes the dashboard's study note again from ``summary``, which now holds the run length (the note was
    written as the trials ended); a warning line where that failed ("" where it did not)."""
    from search.publishing import publish_study_note  # Plotly: only for a run that measured a run length.

    url = settings.run.storage
    try:
        storage = open_existing_storage(url)
        try:
            study = optuna.load_study(storage=storage, study_name=settings.run.study_name)
            publish_study_note(study, summary)
        finally:
            storage.engine.dispose()
    except Exception as e:  # The results are stored; only the dashboard's note lacks the run length.
        return f"warning: dashboard note without the run length: {redact(first_line(e), url)}"
    return ""
