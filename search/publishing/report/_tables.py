"""The sections that are tables: baselines, safe ranges, the recommendation, confirmation runs.

The numbers come from :mod:`search.results` (safe ranges, the recommendation, the summary) and the
snapshot's confirmation; here they become escaped HTML, and each builder also returns the data the JSON
repeats, so the page and the JSON cannot disagree.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from optuna.trial import FrozenTrial

from search.core import CONFIRM_SUFFIX, SpaceConfig, baseline_of, baseline_trials
from search.publishing.report._reading import ReportSnapshot
from search.publishing.report._section import SECTION_TITLES, Section
from search.results import (
    DEFAULT_MARGIN,
    FRAMEWORKS,
    MIN_SUPPORT,
    Recommendation,
    answer_label,
    best_trial,
    dominance_note,
    format_ends,
    format_range,
    format_value,
    horizon_note,
    on_new_seeds,
    param_values,
    paste_lines,
    recommend,
    safe_ranges,
    searched_params,
    side_by_side,
    side_by_side_line,
    trial_row,
    trial_steps,
    why_sentence,
)
from search.scalers import RULES, TORCH


def _fmt(value: Any, spec: str = ".4f") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], classes: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{classes}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _baselines_section(
    done: list[FrozenTrial],
    space: SpaceConfig,
    best: FrozenTrial | None,
    evaluation: str = "mean",
    scaler: str = TORCH,
) -> tuple[Section, dict[str, Any]]:
    rule = RULES[scaler]
    section = Section(
        "baselines",
        SECTION_TITLES["baselines"],
        f"{rule.title}'s baselines"
        f" ({rule.baselines_about + '; ' if rule.baselines_about else ''}{rule.default_tag} is {rule.maker}'s"
        " default), re-measured inside the study (those inside its space), and in a study searched from a"
        " diagnosis the setting it suggested (diagnosis), next to the best trial. The evaluation is the one"
        " the objective reads (the final weights' loss over the evaluation set, or its median chunk loss"
        ' with [penalty] evaluation = "median"), not a last mini-batch\'s loss. Δ best: how much worse than'
        " the best objective.",
    )
    judged = "eval_median" if evaluation == "median" else "eval_loss"
    baselines: dict[str, dict[str, Any]] = {}
    for t in done:
        tag = baseline_of(t)
        if tag is not None and tag not in baselines:
            baselines[str(tag)] = trial_row(t, space, scaler)
    baselines = dict(sorted(baselines.items()))
    data = {"best": trial_row(best, space, scaler) if best else None, "baselines": baselines}
    if best is None:
        section.message = "No complete trial yet: nothing to compare."
        return section, data
    rows = []
    for label, row in [("best", data["best"]), *baselines.items()]:
        delta = (row["value"] - best.value) / abs(best.value) * 100 if best.value else 0.0
        rows.append(
            [
                f"<b>{html.escape(label)}</b>",
                f"#{row['number']}",
                *(html.escape(knob.cell(row[knob.name])) for knob in rule.knobs),
                _fmt(row[judged]),
                _fmt(row["skipped_steps"], "d"),
                _fmt(row["learned"]),
                html.escape(str(row["failure"] or "–")),
                _fmt(row["value"]),
                f"{delta:+.2f}%",
            ]
        )
    header = ["", "trial", *rule.names, judged, "skipped steps", "learned?", "failure", "objective", "Δ best"]
    section.body = _table(header, rows, "numbers")
    every = RULES[scaler].baselines
    in_space = {tag for tag, _params in baseline_trials(space, scaler)[0]}
    missing = [tag for tag, _config in every if tag not in baselines]
    outside = [tag for tag in missing if tag not in in_space]
    waiting = [tag for tag in missing if tag in in_space]
    said = []
    if outside:
        said.append(
            f"{', '.join(outside)} {'lies' if len(outside) == 1 else 'lie'} outside this study's search space"
            " (not run)"
        )
    if waiting:
        said.append(f"no complete trial yet for {', '.join(waiting)} (still queued or running)")
    if said:
        section.message = f"{'; '.join(said)}."
        section.message = section.message[0].upper() + section.message[1:]
    return section, data


def _safe_section(
    done: list[FrozenTrial], space: SpaceConfig, tolerance: float, scaler: str = TORCH
) -> tuple[Section, list[dict[str, Any]]]:
    rule = RULES[scaler]
    grows = ", ".join([*rule.grows_with, rule.window_knob])
    pct = f"{tolerance * 100:g}%"
    section = Section(
        "safe_ranges",
        SECTION_TITLES["safe_ranges"],
        f"A trial is good when its objective is within x = {pct} of the best objective (objective ≤ best +"
        f" {pct} · |best|; --tolerance), and it had no non-finite value and no silent failure (failure code"
        " none). A setting's good range runs from its smallest to its largest value among the good trials,"
        " one setting at a time: a combination of values each inside its range can still fail (the"
        " recommendation below gives ranges that are safe together). Bad trials inside that range are"
        " listed: when every other setting of such a trial is inside its own good range too, or idle in its"
        f" run (its scale curve shows that it could not have acted: {', '.join(rule.skips_with)} when no step"
        f" was skipped; {grows} when the scale never grew, for {rule.window_knob} only where a longer one in"
        " range would not have grown it either), the good set is not an interval (not a box), and the"
        " stretch around the best trial without such a trial is given.",
    )
    ranges = safe_ranges(done, space, tolerance, scaler)
    data = [r.to_dict() for r in ranges]
    if not done:
        section.message = "No complete trial yet: no good range."
        return section, data
    rows = []
    for r in ranges:
        if r.fixed is not None:
            span = f"fixed at {format_value(r.param, r.fixed)}"
        elif r.low is None:
            span = "none"
        else:
            low, high = format_ends(r.param, r.low, r.high)
            span = low if low == high else f"{low} … {high}"
        rows.append(
            [
                f"<b>{r.param}</b>",
                html.escape(span),
                "yes" if r.is_interval else f"no ({len(r.holes)} inside)",
                html.escape(r.text),
            ]
        )
    section.body = _table(["setting", "good range", "an interval?", "in words"], rows, "wide")
    return section, data


def _recommendation_section(
    done: list[FrozenTrial],
    space: SpaceConfig,
    tolerance: float,
    confirmation: dict[str, Any] | None,
    evaluation: str = "mean",
) -> tuple[Section, dict[str, Any] | None]:
    pct = f"{tolerance * 100:g}%"
    section = Section(
        "recommendation",
        SECTION_TITLES["recommendation"],
        "The verdict, the line to paste and why. Not the argmin, which among near-equal trials is noise: the"
        f" deepest good trial (within {pct} of the best, no failure) with at least {MIN_SUPPORT} good trials"
        " within its distance to the nearest trial that is not good (octaves, the four settings' log2"
        f" combined), or PyTorch's default when it is good and at least {DEFAULT_MARGIN:g} octaves deep; a"
        " change keeps only the settings that acted in its run; confirmation runs on new seeds, when there"
        " are any, decide (docs/report.md). The last column: ranges safe together, in any combination,"
        " stated only once search.confirm has trained every corner without failure.",
    )
    rec = recommend(done, space, tolerance, confirmation=confirmation)
    notes = [
        n
        for n in (
            dominance_note(best_trial(done), evaluation),
            horizon_note(trial_steps(best_trial(done)), space),
        )
        if n
    ]
    if notes:
        section.message = " ".join(
            ("" if n.startswith("horizon:") else "Note: ") + f"{n[0].upper()}{n[1:]}." for n in notes
        )
    if rec is None:
        section.message = "No complete trial yet: nothing to recommend."
        return section, None
    source = next(t for t in done if t.number == rec.source_trial)
    values = param_values(source, space)
    rows = []
    for param in searched_params(space):
        edge = rec.edge.get(param)
        rows.append(
            [
                f"<b>{param}</b>",
                html.escape(format_value(param, float(getattr(rec.config, param)))),
                html.escape(format_value(param, values[param])),
                "–" if edge is None else html.escape(format_value(param, edge)),
                "–" if edge is None else _octaves(math.log2(edge) - math.log2(values[param])),
                _together_cell(rec, param),
            ]
        )
    title = verdict_title(rec)
    if rec.confirmed:
        title += f" ({on_new_seeds(rec.confirmed, rec.confirmed_seeds)})"
    pair_data = side_by_side(done, rec.source_trial, rec.default_trial)
    why = why_sentence({**rec.to_dict(), "side_by_side": pair_data})  # As the summary says it.
    pair = side_by_side_line(
        pair_data,
        answer_label(rec.verdict, rec.held_back),
        rec.confirmed,
        rec.confirmed_seeds,
    )  # As the summary states it, under the verdict.
    section.body = (
        f"<p><b>{html.escape(title)}</b></p>"
        + f'<p class="text">Why: {html.escape(why)}.</p>'
        + (f'<p class="text">{html.escape(pair[0].upper() + pair[1:])}.</p>' if pair else "")
        + (_paste_blocks(rec) if rec.safe else "")
        + f'<p class="text">{html.escape(rec.text)}</p>'
        + _table(
            [
                "setting",
                "answer",
                f"trial #{rec.source_trial}"
                + (
                    f" ({on_new_seeds(rec.confirmed, rec.confirmed_seeds)})"
                    if rec.keep_default and rec.confirmed
                    else ""
                ),
                "nearest trial that is not good"
                + (f" (#{rec.nearest_bad})" if rec.nearest_bad is not None else ""),
                "octaves to it",
                {
                    "checked": "safe together (corners trained)",
                    "unchecked": "candidate, not checked (run search.confirm)",
                    "refuted": "safe together: refuted by its corners",
                }.get(rec.together_check, "safe together"),
            ],
            rows,
            "numbers",
        )
    )
    return section, rec.to_dict()


def verdict_title(rec: Recommendation) -> str:
    """The verdict in words: the same three answers the summary and ``--best-out`` give."""
    if rec.verdict == "none-safe":
        return "Verdict: no setting is safe here"
    if rec.verdict == "keep-default":
        return "Verdict: keep PyTorch's default"
    return f"Verdict: change {', '.join(rec.changed)}"


def _paste_blocks(rec: Recommendation) -> str:
    """The answer's line for plain PyTorch, then the other frameworks' lines folded away (one click)."""
    lines = paste_lines(rec.config, rec.device_type)

    def block(name: str) -> str:
        return (
            f'<p class="paste-label">{html.escape(FRAMEWORKS[name])}</p>'
            f'<pre class="code">{html.escape(lines[name])}</pre>'
        )

    others = [name for name in lines if name != "torch"]
    return (
        block("torch")
        + '<details class="paste"><summary>The same settings for '
        + html.escape(", ".join(FRAMEWORKS[name] for name in others))
        + "</summary>"
        + "".join(block(name) for name in others)
        + "</details>"
    )


def _together_cell(rec: Recommendation, param: str) -> str:
    box = rec.together if rec.together_check == "checked" else rec.candidate
    if rec.together_check == "refuted" or param not in box:
        return "–"
    idle = " (acted in no run inside: says nothing)" if param in rec.together_idle else ""
    return html.escape(format_range(param, *box[param]) + idle)


def _confirmation_section(snapshot: ReportSnapshot) -> Section:
    seeds = "new data/initialisation seeds"
    if snapshot.settings.run.checkpoint:  # The weights are the checkpoint's on every seed.
        seeds = "new data seeds, every run from the study's checkpoint"
    section = Section(
        "confirmation",
        SECTION_TITLES["confirmation"],
        f"Re-runs of the best configurations and of the default on {seeds} "
        f"(python -m search.confirm, stored in the sibling study {snapshot.study_name}{CONFIRM_SUFFIX}).",
    )
    data = snapshot.confirmation
    if data is None:
        extra = (
            f" ({snapshot.confirmation_note})"
            if snapshot.confirmation_note not in ("", "no sibling study")
            else ""
        )
        section.message = f"no confirmation runs (run python -m search.confirm){extra}"
        return section
    rows = []
    for c in data.get("configs", []):
        mean, sd = c.get("mean"), c.get("sd")
        pm = "–" if mean is None else f"{mean:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")
        source = "–" if c.get("source_trial") is None else f"#{c['source_trial']}"
        rows.append([f"<b>{html.escape(str(c.get('label')))}</b>", source, str(c.get("n", 0)), pm])
    seeds = data.get("seeds", [])
    body = f"<p>Seeds: {html.escape(', '.join(str(s) for s in seeds)) or 'none'}.</p>"
    body += _table(["config", "source trial", "runs", "score mean ± sd"], rows, "numbers")
    comparison = data.get("comparison")
    if comparison:
        better = comparison.get("better_beyond_noise")
        p, t, diff = comparison.get("p"), comparison.get("t"), comparison.get("mean_diff")
        stats = ", ".join(
            part
            for part in (
                f"mean difference {diff:+.4g}" if diff is not None else "",
                f"t = {t:.2f}" if t is not None else "",
                f"p = {p:.3g}" if p is not None else "",
            )
            if part
        )
        if better:
            verdict = (
                f"{comparison.get('best_label')} is better than {comparison.get('default_label')} beyond"
                " noise"
            )
        elif comparison.get("worse_beyond_noise"):
            verdict = (
                f"{comparison.get('default_label')} is better than {comparison.get('best_label')} beyond"
                " noise"
            )
        else:
            verdict = (
                f"{comparison.get('best_label')} and {comparison.get('default_label')} are not"
                " distinguishable"
            )
        body += (
            f'<p class="verdict"><b>Paired test:</b> {html.escape(verdict)} ({html.escape(stats)}; '
            f"{html.escape(str(comparison.get('test', '')))}).</p>"
        )
    else:
        body += (
            '<p class="verdict"><b>Paired test:</b> nothing to compare yet (the best or the default has no'
            " runs).</p>"
        )
    corners = data.get("corners", [])
    if corners:
        failed = Counter(c["failure"] for c in corners if c["failure"] != "none")
        seeds_used = sorted({c.get("data_seed") for c in corners if c.get("data_seed") is not None})
        body += (
            f"<p>Corner runs of the ranges that may be safe together (10. The answer): {len(corners)} "
            f"on the search's own data (seed {', '.join(map(str, seeds_used)) or '?'}), "
            + (", ".join(f"{n} {code}" for code, n in failed.items()) if failed else "none failed")
            + ".</p>"
        )
    section.body = body
    return section


def _octaves(difference: float) -> str:
    """``+0.42``: two decimals of octaves, and 0 as ``+0.00`` (a difference that rounds to it is none: not
    ``-0.00``)."""
    return f"{difference if round(difference, 2) != 0 else 0.0:+.2f}"
