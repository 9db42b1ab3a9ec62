"""The end-of-run summary of a study under a framework's rule: its knobs' table, its answer in the framework's
form.

:func:`search.results._summary.summarize` and ``format_summary`` hand a study recorded with
``--scaler deepspeed|megatron|fairseq`` to :func:`summarize_rule_study` and :func:`format_rule_summary`:
the same keys where they mean the same (``verdict``, ``paste``, ``states``, ``baselines`` ...), with
the framework's knobs where GradScaler's four settings would be.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from search.core import (
    ENDED_BY_RULE,
    FAILURE,
    NONFINITE,
    RULE_FAILURES,
    SILENT_FAILURES,
    SpaceConfig,
    baseline_of,
    baseline_trials,
    device_kind,
)
from search.results._format import study_heading
from search.results._horizon import horizon_note, trial_steps
from search.results._rule_answer import answer_rule_study
from search.results._side_by_side import (
    answer_label,
    run_length_line,
    side_by_side,
    side_by_side_line,
    why_sentence,
)
from search.results._tolerance import DEFAULT_TIE_TOLERANCE
from search.results._trials import fail_reasons, good_trials, trial_row
from search.scalers import RULES, shortest


def rule_row(trial: FrozenTrial, space: SpaceConfig, scaler: str) -> dict[str, Any]:
    """One trial of a framework study as a table row: :func:`~search.results.trial_row`'s, and whether the
    framework's rule ended its run."""
    return {**trial_row(trial, space, scaler), "ended_by_rule": trial.user_attrs.get(ENDED_BY_RULE) or None}


def summarize_rule_study(
    study_name: str,
    trials: list[FrozenTrial],
    space: SpaceConfig,
    scaler: str,
    confirmation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a framework study as plain data (what ``--best-out`` writes); ``confirmation``
    (``search.confirm``'s runs, if any) weighs its answer as for a GradScaler study."""
    states = Counter(t.state.name for t in trials)
    complete = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    best = min(complete, key=lambda t: (t.value, t.number), default=None)
    answer = answer_rule_study(trials, space, scaler, confirmation=confirmation)
    recommended = {}
    if answer is not None:
        recommended = answer.to_dict()
        line = answer.held_back or (answer.values if answer.verdict == "change" else None)
        recommended["side_by_side"] = side_by_side(trials, answer.source_trial, answer.default_trial, line)
        recommended["best_ties"] = max(0, len(good_trials(complete, DEFAULT_TIE_TOLERANCE)) - 1)
    baselines: dict[str, Any] = {}
    for t in complete:
        tag = baseline_of(t)
        if tag is not None and tag not in baselines:
            baselines[tag] = rule_row(t, space, scaler)
    failures = Counter(t.user_attrs.get(FAILURE, "none") for t in complete)
    return {
        "study_name": study_name,
        "scaler": scaler,
        "verdict": recommended.get("verdict"),
        "paste": recommended.get("paste", {}),
        "states": {s.name: states.get(s.name, 0) for s in TrialState},
        "best": {} if best is None else {device_kind(best): rule_row(best, space, scaler)},
        "recommended": recommended,
        "baselines": dict(sorted(baselines.items())),
        "nonfinite_trials": sum(bool(t.user_attrs.get(NONFINITE)) for t in complete),
        "silent_failures": {code: failures.get(code, 0) for code in SILENT_FAILURES + RULE_FAILURES[1:]},
        "ended_at_minimum": failures.get(RULE_FAILURES[0], 0),
        "fail_reasons": fail_reasons(trials),
        "horizon_note": horizon_note(trial_steps(best), space, scaler),
        "baselines_left_out": [n for n in baseline_trials(space, scaler)[1] if " left out: " in n],
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) else str(value)
    return str(value)


def format_rule_summary(data: dict[str, Any]) -> str:
    """Renders :func:`summarize_rule_study` output as the text printed at the end of a run."""
    rule = RULES[data["scaler"]]
    title = f"Study {data['study_name']!r} ({rule.title}'s loss-scale rule)"
    lines = study_heading(title, data["states"], bool(data["best"]))
    if not data["best"]:
        return "\n".join(lines)
    names = [k.name for k in rule.knobs]
    widths = [max(len(n), 8) for n in names]
    header = "  " + f"{'':24} {'#':>4} " + " ".join(f"{n:>{w}}" for n, w in zip(names, widths))
    lines += ["", header + f" {'eval_loss':>9} {'skipped':>7} {'failure':>17} {'objective':>9}"]

    def line(label: str, row: dict[str, Any]) -> str:
        knobs = " ".join(
            f"{float(row[n]):>{w}.4g}" for n, w in zip(names, widths)
        )  # The block has every digit.
        return (
            f"  {label:24} {row['number']:>4} {knobs} {_cell(row['eval_loss']):>9}"
            f" {_cell(row['skipped_steps']):>7} {row['failure'] or '-':>17} {_cell(row['value']):>9}"
        )

    lines.append(line("best", next(iter(data["best"].values()))))
    for tag, row in data["baselines"].items():
        lines.append(line(tag, row))
    lines.append("")
    lines += format_rule_verdict(data)
    if data.get("horizon_note"):
        lines.append(f"  {data['horizon_note']}")
    silent = ", ".join(f"{c} {k}" for k, c in data["silent_failures"].items() if c) or "none"
    lines.append(
        f"  nonfinite trials: {data['nonfinite_trials']}; ended at the minimum scale:"
        f" {data['ended_at_minimum']}; silent failures: {silent}"
    )
    if data["fail_reasons"]:
        lines.append(
            "  failed trials (not counted): "
            + "; ".join(f"{c}x {r}" for r, c in data["fail_reasons"].items())
        )
    return "\n".join(lines)


def _offsets(rec: dict[str, Any]) -> str:
    """``initial_scale_power 10 higher, loss_scale_window 3.3 octaves lower``: the nearest bad trial, knob by
    knob."""
    rule = RULES[rec["scaler"]]
    parts = []
    for name, delta in rec["nearest_offsets"].items():
        unit = " octaves" if rule.knob(name).log else ""
        parts.append(f"{name} {abs(delta):.2g}{unit} {'higher' if delta > 0 else 'lower'}")
    return ", ".join(parts) or "the same knobs"


def format_rule_verdict(data: dict[str, Any]) -> list[str]:
    """The verdict lines of :func:`summarize_rule_study` data: ``search.optimize`` prints them in its summary
    and ``search.confirm`` after its table, from the same data, so the two never disagree."""
    rec = data["recommended"]
    if not rec:
        return []
    lines = _verdict_lines(rec, RULES[data["scaler"]].title, data.get("run_length"))
    rule = RULES[data["scaler"]]
    if rec["verdict"] != "none-safe" and rec["default_trial"] is None:
        why = "; ".join(data.get("baselines_left_out") or []) or "it has no complete trial"
        lines.append(
            f"    note: {rule.maker}'s default ({rule.default_tag}) did not run in this study ({why}), so"
            " this answer is the best of the space searched, not measured against the default"
        )
    return lines


def _deepest(rec: dict[str, Any]) -> str:
    return "the only good trial" if rec["n_good"] == 1 else f"the deepest of {rec['n_good']} good trials"


def _verdict_lines(rec: dict[str, Any], title: str, run_length: dict[str, Any] | None = None) -> list[str]:
    verdict = rec["verdict"]
    if verdict == "none-safe":
        # Not "search.report explains": the report reads GradScaler studies only.
        return [
            "  verdict: no setting is safe here, nothing to paste (no trial is good: see the failure column)"
        ]
    where = f"#{rec['source_trial']}"
    if rec["nearest_bad"] is None:
        margin = "no trial is not good"
    else:
        margin = f"the nearest trial that is not good, #{rec['nearest_bad']}, has {_offsets(rec)}"
    n = len(rec["neighbours"])
    weak = f"; weak: only {n} good trial{'s' if n != 1 else ''} around it" if n < 3 else ""
    if verdict == "keep-default":
        what = "keep the default"
        if rec.get("held_back") is not None:
            why = rec["held_back_reason"]
        elif rec.get("confirmed") in ("overturned", "not better"):
            why = f"trial {where}'s change was run on new seeds against the default: " + " ".join(
                rec["confirmation"]
            )
        elif rec["source_trial"] == rec["default_trial"]:
            why = f"the default ({where}) is good here: {margin}"
        else:
            why = (
                f"trial {where}, {_deepest(rec)}, differs from the default only in knobs that did not act in"
                " its run"
            )
    else:
        what = f"change {', '.join(rec['changed'])}"
        why = f"trial {where}, {_deepest(rec)}: {margin}{weak}"
    reset = "".join(f"; {k} put back to the default: {why_}" for k, why_ in rec["reset"].items())
    reset += "".join(
        f"; {k} {shortest(old)} written {shortest(new)}: the rule replays this run the same with it"
        for k, (old, new) in rec["rounded"].items()
    )
    label = answer_label(verdict, rec.get("held_back"))
    pair = side_by_side_line(
        rec.get("side_by_side", {}), label, rec.get("confirmed"), rec.get("confirmed_seeds")
    )
    over = run_length_line(run_length, label)
    # The first screen: the verdict, why in a sentence, the two trials side by side, the block to paste; then
    # the reasons at length.
    lines = [f"  verdict: {what}", f"    why: {why_sentence(rec)}"]
    lines += [*(f"    {line}" for line in (pair, over) if line), f"    for {title}:"]
    lines += [f"      {text}" for text in RULES[rec["scaler"]].block(rec["values"]).splitlines()]
    lines += [f"    note: {note}" for note in rec["notes"]]
    lines.append(f"    details: ({why}{reset})")
    if rec.get("confirmed") == "confirmed":
        lines += [f"    {sentence}" for sentence in rec["confirmation"]]
    return lines
