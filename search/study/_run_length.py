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

import torch

from search.core import Settings, resolve_device
from search.scalers import RULES
from search.tasks import LoaderProblem, Problem, build_problem, resolve_task
from search.training import train


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

    The answer is the line the verdict names (``side_by_side``'s ``answer_setting`` of the summary's
    answer on the device trained here, or its first). ``problem``: the study's task on its seed, built
    here when not given; ``device``: the settings' when not given; ``source``: where N came from (the flag,
    or the task's ``run_steps``), said with the figures.
    """
    rule = RULES[settings.run.scaler]
    device = device or resolve_device(settings.run.device)
    if problem is None:
        problem = build_problem(resolve_task(settings.run.task), settings.run.task, settings.run.seed)
    problem = problem.to(device)
    answer = _answer_setting(summary, device.type)
    runs = {"default": rule.setting(dict(rule.default))}
    if answer is not None and dict(answer) != dict(rule.default):
        runs["answer"] = rule.setting(dict(answer))
    out: dict[str, Any] = {"steps": run_steps, "source": source}
    for label, setting in runs.items():
        result = train(problem, setting, steps=run_steps)
        out[label] = {
            "settings": dict(setting.values),
            "skipped": int(sum(result.skipped)),
            "eval_loss": result.eval_loss,
        }
    return out


def _answer_setting(summary: dict[str, Any], device_type: str) -> dict[str, Any] | None:
    recommended = summary.get("recommended") or {}
    if "side_by_side" in recommended:  # A framework's answer: one.
        return recommended["side_by_side"].get("answer_setting")
    answers = [rec for kind, rec in sorted(recommended.items()) if kind == device_type] or list(
        recommended.values()
    )
    return answers[0].get("side_by_side", {}).get("answer_setting") if answers else None
