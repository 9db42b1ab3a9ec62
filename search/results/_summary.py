"""The end-of-run summary of a GradScaler study: a table for people and the same numbers as JSON.

:mod:`search.results._answers` hands a study to it by its answer's form (a framework's study to
:mod:`search.results._rule_summary`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search.core import (
    DEFAULT_BASELINE,
    DEFAULTS,
    FAILURE,
    NONFINITE,
    POPULATION,
    SILENT_FAILURES,
    TRAIN_SECONDS,
    SpaceConfig,
    baseline_of,
    device_kind,
    scaler_config,
)
from search.results._dominance import dominance_note
from search.results._format import format_range, offsets_text, study_heading
from search.results._horizon import horizon_note, trial_steps
from search.results._landscape import MIN_SUPPORT
from search.results._paste import FRAMEWORKS, paste_lines
from search.results._recommendation import recommend
from search.results._side_by_side import (
    answer_label,
    run_length_line,
    side_by_side,
    side_by_side_line,
    why_sentence,
)
from search.results._tolerance import DEFAULT_TIE_TOLERANCE
from search.results._trials import fail_reasons, good_trials, trial_row
from search.scalers import format_scale


def summarize_gradscaler_study(
    study: optuna.Study,
    space: SpaceConfig,
    confirmation: dict[str, Any] | None,
    trials: list[FrozenTrial],
) -> dict[str, Any]:
    """Collects the summary of a GradScaler study as plain data (what ``--best-out`` writes).

    Args:
        study: The search study.
        space: Its search space.
        confirmation: :func:`search.results._confirmations.summarize_confirmation` of the study, if any:
            the recommendation then reads its runs (as the report's does).
        trials: The study's trials.
    """
    states = Counter(t.state.name for t in trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    by_device: dict[str, list[FrozenTrial]] = {}
    for t in complete:
        by_device.setdefault(device_kind(t), []).append(t)

    best_by_device, recommended = {}, {}
    for kind, group in sorted(by_device.items()):
        best = min(group, key=lambda t: t.value)
        row = trial_row(best, space)
        row["gradscaler"] = scaler_config(best.params, space).as_code(kind)
        best_by_device[kind] = row
        rec = recommend(group, space, device_type=kind, confirmation=confirmation)
        if rec is not None:
            data = rec.to_dict()
            data["paste"] = paste_lines(rec.config, kind) if rec.safe else {}
            data["n_good"] = len(good_trials(group))
            data["best_ties"] = max(0, len(good_trials(group, DEFAULT_TIE_TOLERANCE)) - 1)
            line = rec.held_back or (rec.config if rec.verdict == "change" else None)
            data["side_by_side"] = side_by_side(
                group, rec.source_trial, rec.default_trial, None if line is None else line.values
            )
            recommended[kind] = data

    baselines = {}
    for t in complete:
        tag = baseline_of(t)
        if tag is not None and tag not in baselines:
            baselines[tag] = trial_row(t, space)

    failures = Counter(t.user_attrs.get(FAILURE, "none") for t in complete)
    train_seconds = [t.user_attrs[TRAIN_SECONDS] for t in complete if "train_seconds" in t.user_attrs]
    wall = [
        # A population's K members share one wall clock from start to finish: each cost 1/K of it.
        (t.datetime_complete - t.datetime_start).total_seconds() / t.user_attrs.get(POPULATION, 1)
        for t in complete
        if t.datetime_complete and t.datetime_start
    ]
    # The answer of the device most trials ran on: the one a --best-out reader acts on.
    primary = max(recommended, key=lambda kind: (len(by_device[kind]), kind), default=None)
    evaluation = (study.user_attrs.get("penalty") or {}).get("evaluation", "mean")
    best_overall = min(complete, key=lambda t: t.value, default=None)
    return {
        "study_name": study.study_name,
        "evaluation": evaluation,
        "evaluation_note": dominance_note(best_overall, evaluation),
        "horizon_note": horizon_note(trial_steps(best_overall), space),
        "verdict": recommended[primary]["verdict"] if primary else None,
        "paste": recommended[primary]["paste"] if primary else {},
        "states": {s.name: states.get(s.name, 0) for s in TrialState},
        "best": best_by_device,
        "recommended": recommended,
        "baselines": dict(sorted(baselines.items())),
        "nonfinite_trials": sum(bool(t.user_attrs.get(NONFINITE)) for t in complete),
        "silent_failures": {code: failures.get(code, 0) for code in SILENT_FAILURES},
        "fail_reasons": fail_reasons(trials),
        "mean_train_seconds": statistics.fmean(train_seconds) if train_seconds else None,
        "mean_trial_seconds": statistics.fmean(wall) if wall else None,
    }


def _num(value: Any, fmt: str = ".4f") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def format_gradscaler_summary(data: dict[str, Any], framework: str = "torch") -> str:
    """Renders :func:`summarize_gradscaler_study` output as the text printed at the end of a run.

    Args:
        data: :func:`summarize_gradscaler_study` output.
        framework: Whose line the verdict shows (a key of :data:`~search.results._paste.FRAMEWORKS`).
    """
    lines = study_heading(f"Study {data['study_name']!r}", data["states"], bool(data["best"]))
    if not data["best"]:
        return "\n".join(lines)

    # The evaluation column is the one the objective reads ([penalty] evaluation).
    evaluated = "eval_median" if data.get("evaluation") == "median" else "eval_loss"
    header = (
        f"  {'':9} {'#':>4} {'init_scale':>10} {'growth':>7} {'backoff':>7} {'interval':>8} "
        f"{evaluated:>11} {'skipped':>7} {'learned':>7} {'failure':>14} {'objective':>9}"
    )

    def line(label: str, row: dict[str, Any]) -> str:
        return (
            f"  {label:9} {row['number']:>4} {format_scale(row['init_scale']):>10} "
            f"{row['growth_factor']:>7.3g} {row['backoff_factor']:>7.3g} {row['growth_interval']:>8} "
            f"{_num(row[evaluated]):>11} {_num(row['skipped_steps'], 'd'):>7} "
            f"{_num(row['learned']):>7} {row['failure'] or '-':>14} {_num(row['value']):>9}"
        )

    lines.append("")
    lines.append(header)
    for kind, row in data["best"].items():
        label = "best" if len(data["best"]) == 1 else f"best/{kind}"
        lines.append(line(label, row))
    for tag, row in data["baselines"].items():
        lines.append(line(tag, row))
    lines.append("")
    lines += format_gradscaler_verdict(data, framework)
    default = data["baselines"].get(DEFAULT_BASELINE)
    for kind, row in data["best"].items():
        if default and default["value"] is not None and row["value"] >= default["value"] * (1 - 1e-3):
            lines.append(
                f"  note: the best on {kind} is within 0.1% of seed-1 (PyTorch's default settings): "
                "on this task the default is already as good as anything found"
            )
    if data.get("evaluation_note"):
        lines.append(f"  note: {data['evaluation_note']}")
    if data.get("horizon_note"):
        lines.append(f"  {data['horizon_note']}")
    silent = ", ".join(f"{c} {k}" for k, c in data["silent_failures"].items() if c) or "none"
    lines.append(f"  nonfinite trials: {data['nonfinite_trials']}; silent failures: {silent}")
    if data["fail_reasons"]:
        reasons = "; ".join(f"{c}x {r}" for r, c in data["fail_reasons"].items())
        lines.append(f"  failed trials (not counted): {reasons}")
    if data["mean_train_seconds"] is not None:
        lines.append(
            f"  time per trial: {data['mean_train_seconds']:.3f} s training, "
            f"{data['mean_trial_seconds']:.3f} s start to finish"
        )
    return "\n".join(lines)


def format_gradscaler_verdict(data: dict[str, Any], framework: str = "torch") -> list[str]:
    """The summary's verdict lines (per device: the verdict, why, the line to paste, ranges safe together)."""
    lines = []
    for kind, rec in data.get("recommended", {}).items():
        where = "" if len(data["best"]) == 1 else f" on {kind}"
        reason = _recommendation_reason(rec, data["best"][kind], _command("report", data))
        lines += _verdict_lines(rec, where, framework, reason, data.get("run_length"))
        together = _together_line(rec, _command("confirm", data))
        if together:
            lines.append("    " + together)
    return lines


DEFAULT_STORAGE = DEFAULTS.run.storage


def _command(name: str, data: dict[str, Any]) -> str:
    """The command line that reads this study (it works when the storage holds several studies)."""
    storage = data.get("storage")
    where = f" --storage {storage}" if storage and storage != DEFAULT_STORAGE else ""
    return f"python -m search.{name}{where} --study-name {data['study_name']}"


def _verdict_lines(
    rec: dict[str, Any], where: str, framework: str, reason: str, run_length: dict[str, Any] | None
) -> list[str]:
    """The first screen: the verdict, why in one sentence, the answer's trial and the default's side by side
    (and over the user's run), the line to paste for ``framework`` and how to get another framework's; then
    the reasons at length."""
    verdict = rec["verdict"]
    if verdict == "none-safe":
        return [f"  verdict{where}: no setting is safe here, nothing to paste", f"    {reason}"]
    what = "keep the default" if verdict == "keep-default" else f"change {', '.join(rec['changed'])}"
    if verdict == "change" and rec["init_scale"] < 1:  # Named for what it does.
        what += f" (init_scale {rec['init_scale']:.4g} < 1 scales the loss and its gradients down)"
    others = "|".join(name for name in FRAMEWORKS if name != framework)
    label = answer_label(verdict, rec.get("held_back"))
    pair = side_by_side_line(
        rec.get("side_by_side", {}), label, rec.get("confirmed"), rec.get("confirmed_seeds")
    )
    over = run_length_line(run_length, label)
    return [
        f"  verdict{where}: {what}",
        f"    why: {why_sentence(rec)}",
        *([f"    {pair}"] if pair else []),
        *([f"    {over}"] if over else []),
        f"    for {FRAMEWORKS[framework]}:",
        *(f"      {line}" if line else "" for line in rec["paste"][framework].splitlines()),
        (
            f"    --paste {others} prints another framework's line; search.optimize --best-out writes them"
            " all to JSON"
        ),
        f"    details: {reason}",
    ]


def _together_line(rec: dict[str, Any], confirm: str) -> str:
    """The ranges that are safe together, stated only once their corners were trained, and what they cannot
    say."""
    idle = set(rec.get("together_idle", []))

    def ranges(box: dict[str, Any]) -> str:
        return ", ".join(
            f"{p} {format_range(p, lo, hi)}"
            + (" (it acted in no run inside: this range says nothing)" if p in idle else "")
            for p, (lo, hi) in box.items()
        )

    check = rec.get("together_check", "none")
    outside = (
        "; PyTorch's default lies outside and ran without failure: this is where the answer can move, not the"
        " edge of what is safe"
        if rec.get("default_outside_together")
        else ""
    )
    if check == "checked":
        return (
            "safe together, in any combination (all corners trained without failure):"
            f" {ranges(rec['together'])}"
            + outside
        )
    if check == "refuted":
        return "no ranges safe together: every box tried had a corner that failed (search.confirm)"
    if check == "unchecked":
        return f"ranges safe together: not checked yet; {confirm} trains their corners"
    return ""


def _recommendation_reason(rec: dict[str, Any], best: dict[str, Any], report: str) -> str:
    margin = (
        "no trial is not good"
        if rec["nearest_bad"] is None
        else (
            f"the nearest trial that is not good, #{rec['nearest_bad']}, has"
            f" {offsets_text(rec['nearest_offsets'])}"
        )
    )
    tied = rec["best_ties"]
    others = f"{tied} other trial{'s' if tied != 1 else ''}"
    ties = f"the argmin #{best['number']} ties with {others}" if tied else ""
    if not rec["n_good"]:  # The best trial itself failed: nothing here is safe to use.
        return (
            f"(the best trial, #{rec['source_trial']}, failed ({best.get('failure') or '-'}), so no trial"
            f" counts as good: this is only the lowest objective found, not a safe setting; {report}"
            " explains)"
        )
    if rec["keep_default"] and rec.get("confirmed"):
        # Confirmation turned the answer to the default: source_trial is the trial it tested.
        why = (
            f"{_answer_trial(rec)} ({margin}), was "
            f"{rec['confirmed']} on new seeds against the default; {_default_status(rec)}"
        )
    elif rec["keep_default"] and rec["source_trial"] != rec["default_trial"]:
        why = (
            f"{_answer_trial(rec)} ({margin}), differs from "
            "the default only in settings that did not act in its run"
        )
    elif rec["keep_default"]:
        why = f"seed-1 (#{rec['source_trial']}) is good here: {margin}"
    else:
        why = f"{_answer_trial(rec)}: {margin}"
        if rec.get("confirmed"):
            why += f"; {rec['confirmed']} on new seeds"
    n = len(rec["neighbours"])
    weak = (
        f"; weak: only {n} good trial{'s' if n != 1 else ''} around it, more trials would show how wide the"
        " good region is"
        if n < MIN_SUPPORT and not (rec["keep_default"] and rec.get("confirmed"))
        else ""
    )
    return f"({why}{weak}{'; ' + ties if ties else ''}; {report} explains)"


def _answer_trial(rec: dict[str, Any]) -> str:
    """The trial the answer is, as the report names it: the deepest good trial, or the trial that measured its
    line rounded (search.results._answer_rounding), which is not itself the deepest."""
    deepest = "the only good trial" if rec["n_good"] == 1 else f"the deepest of {rec['n_good']} good trials"
    rounded_from = rec.get("rounded_from")
    if rounded_from is not None and rounded_from != rec["source_trial"]:
        return f"trial #{rec['source_trial']}, the line of trial #{rounded_from} ({deepest}) rounded"
    return f"trial #{rec['source_trial']}, {deepest}"


def _default_status(rec: dict[str, Any]) -> str:
    """What the search itself says of PyTorch's default (seed-1)."""
    if rec["default_trial"] is None:
        return "seed-1 has not run in this study"
    if rec["default_depth"] is None:
        return f"seed-1 (#{rec['default_trial']}) is not good in the search"
    if rec["default_nearest"] is None:
        return f"seed-1 (#{rec['default_trial']}) is good here and no trial is not good"
    return (
        f"seed-1 (#{rec['default_trial']}) is good here: the nearest trial that is not good, "
        f"#{rec['default_nearest']}, has {offsets_text(rec['default_offsets'])}"
    )


def write_best_json(data: dict[str, Any], path: str) -> None:
    """Writes the summary as JSON (``--best-out``)."""
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
