"""The recommendation section of a study of a framework's own rule (DeepSpeed, Megatron-LM, fairseq).

The answer is :func:`search.results.summarize_rule_study`'s, the one ``search.optimize`` prints and
``--best-out`` writes, and its verdict lines are :func:`search.results.format_rule_verdict`'s, so the page,
the summary and the JSON say the same. Beside them, a table of every knob: the answer, the trial it comes
from and the framework's default.
"""

from __future__ import annotations

import html
from typing import Any

from optuna.trial import FrozenTrial

from search.core import SpaceConfig
from search.publishing.report._section import SECTION_TITLES, Section
from search.publishing.report._tables import _table
from search.results import (
    DEFAULT_MARGIN,
    MIN_SUPPORT,
    best_trial,
    dominance_note,
    format_rule_verdict,
    horizon_note,
    on_new_seeds,
    param_values,
    summarize_rule_study,
    trial_steps,
)
from search.scalers import RULES

_TITLES = {"none-safe": "Verdict: no setting is safe here", "keep-default": "Verdict: keep {maker}'s default"}


def _rule_recommendation_section(
    study_name: str,
    done: list[FrozenTrial],
    space: SpaceConfig,
    scaler: str,
    confirmation: dict[str, Any] | None,
    evaluation: str = "mean",
) -> tuple[Section, dict[str, Any] | None]:
    rule = RULES[scaler]
    section = Section(
        "recommendation",
        SECTION_TITLES["recommendation"],
        f"The verdict, {rule.title}'s block to paste and why, as search.optimize's summary states it. Not the"
        " argmin, which among near-equal trials is noise: the deepest good trial (no failure, within the"
        f" tolerance of the best) with at least {MIN_SUPPORT} good trials within its distance to the nearest"
        f" trial that is not good (octaves on log knobs), or {rule.maker}'s default when it is good and at"
        f" least {DEFAULT_MARGIN:g} deep; a change keeps only the knobs that acted in its run; confirmation"
        " runs on new seeds, when there are any, decide (docs/report.md).",
    )
    best = best_trial(done)
    notes = [
        n for n in (dominance_note(best, evaluation), horizon_note(trial_steps(best), space, scaler)) if n
    ]
    if notes:
        section.message = " ".join(
            ("" if n.startswith("horizon:") else "Note: ") + f"{n[0].upper()}{n[1:]}." for n in notes
        )
    data = summarize_rule_study(study_name, done, space, scaler, confirmation=confirmation)
    rec = data["recommended"]
    if not rec:
        section.message = "No complete trial yet: nothing to recommend."
        return section, None
    title = _TITLES.get(rec["verdict"], "Verdict: change {changed}").format(
        maker=rule.maker, changed=", ".join(rec["changed"])
    )
    if rec.get("confirmed"):
        title += f" ({on_new_seeds(rec['confirmed'], rec.get('confirmed_seeds'))})"
    source = next((t for t in done if t.number == rec["source_trial"]), None)
    measured = param_values(source, space, scaler) if source is not None else {}
    rows = [
        [
            f"<b>{html.escape(knob.name)}</b>",
            html.escape(knob.cell(rec["values"][knob.name])),
            html.escape(knob.cell(measured[knob.name])) if measured else "–",
            html.escape(knob.cell(knob.default)),
            "yes" if knob.name in rec["changed"] else "no",
        ]
        for knob in rule.knobs
    ]
    header = [
        "knob",
        "answer",
        f"trial #{rec['source_trial']}" if source else "trial",
        f"{rule.maker}'s default",
        "changed?",
    ]
    block = rule.block(rec["values"]) if rec["verdict"] != "none-safe" else None  # as the summary prints it
    section.body = (
        f"<p><b>{html.escape(title)}</b></p>"
        + (
            f'<p class="paste-label">{html.escape(rule.title)}</p><pre'
            f' class="code">{html.escape(block)}</pre>'
            if block
            else ""
        )
        + "".join(f'<p class="text">{html.escape(note)}</p>' for note in rec["notes"])
        + "".join(f'<p class="text">{html.escape(line)}</p>' for line in _reasons(data, rule.title))
        + _table(header, rows, "numbers")
    )
    return section, rec


def _reasons(data: dict[str, Any], title: str) -> list[str]:
    """The summary's verdict lines without its block and the block's own notes (the page shows them above)."""
    shown = {f"    for {title}:", *(f"    note: {note}" for note in data["recommended"].get("notes", []))}
    return [
        line.strip()
        for line in format_rule_verdict(data)
        if line not in shown and not line.startswith("      ")
    ]
