"""The HTML page: one self-contained file (plotly.js embedded once) that opens offline."""

from __future__ import annotations

import html

import plotly.io as pio

from search.publishing.report._build import Report
from search.results import on_new_seeds
from search.scalers import RULES, TORCH

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1d2330;
       background: #ffffff; }
header { background: #1f3b5c; color: #ffffff; padding: 18px 32px; }
header h1 { margin: 0 0 6px 0; font-size: 26px; }
header p { margin: 2px 0; font-size: 14px; color: #d8e2ee; }
header code { color: #ffffff; background: #2d5480; padding: 1px 5px; border-radius: 3px; }
main { padding: 8px 32px 40px 32px; max-width: 1400px; }
nav { font-size: 13px; margin: 10px 0 4px 0; line-height: 1.8; }
nav a { margin-right: 14px; color: #1f5fa8; text-decoration: none; }
section { border-top: 1px solid #d6dbe3; padding-top: 6px; margin-top: 18px; }
h2 { font-size: 20px; margin: 10px 0 4px 0; }
p.intro { font-size: 14px; color: #4a5263; margin: 4px 0 8px 0; max-width: 1100px; }
.message { border: 2px solid #d99a00; background: #fff6d6; color: #5a4300; padding: 12px 16px;
           margin: 10px 0; border-radius: 6px; font-size: 15px; max-width: 1100px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #d6dbe3; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
table.numbers td { text-align: right; white-space: nowrap; }
table.numbers td:first-child { text-align: left; }
table.wide td:last-child { max-width: 780px; }
pre.code { background: #f3f5f8; border: 1px solid #d6dbe3; padding: 10px 14px; font-size: 14px;
           white-space: pre-wrap; overflow-wrap: anywhere; }
details.paste { margin: 6px 0 10px 0; font-size: 14px; }
details.paste summary { cursor: pointer; color: #1f5fa8; }
p.paste-label { margin: 10px 0 2px 0; font-size: 14px; color: #4a5263; }
.verdict { font-size: 15px; }
p.text { font-size: 14px; max-width: 1100px; }
footer { color: #6b7385; font-size: 12px; padding: 0 32px 24px 32px; }
"""


def render_html(report: Report) -> str:
    """The whole page: one embedded plotly.js (the first figure's), no external resources."""
    data = report.data
    esc = html.escape
    rec = data.get("recommendation")
    states = ", ".join(f"{n.lower()} {c}" for n, c in data["states"].items() if c) or "no trials"
    ignored = data["ignored"]
    rule = RULES[data["settings"].get("scaler", TORCH)]
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(report.study_name)}: {esc(rule.title)} search report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<header>",
        f"<h1>{esc(rule.title)} search report: study {esc(report.study_name)}</h1>",
        f"<p>storage <code>{esc(report.storage)}</code> · task {esc(str(data['settings']['task']))}, "
        f"{_length(data['settings'])}, {esc(str(data['settings']['amp_dtype']))} · trials: {esc(states)}"
        + (
            f" · ignored while running: {ignored['RUNNING']} running, {ignored['WAITING']} waiting"
            if ignored["RUNNING"] or ignored["WAITING"]
            else ""
        )
        + "</p>",
    ]
    if rec:
        what = {"keep-default": f"keep {rule.maker}'s default", "none-safe": "no setting is safe here"}.get(
            rec["verdict"], "change " + ", ".join(rec["changed"])
        )
        lines.append(
            f'<p class="verdict"><b>Verdict: {esc(what)}</b>'
            + (
                f" ({esc(on_new_seeds(rec['confirmed'], rec.get('confirmed_seeds')))})"
                if rec.get("confirmed")
                else ""
            )
            + (
                f": <code>{esc(rec['code'])}</code>"
                if rec.get("code") and rec["verdict"] != "none-safe"
                else ""
            )
            + ' · <a href="#recommendation">'
            + (
                "why, and the line for other frameworks"
                if len(rec.get("paste") or {}) > 1
                else f"why, and {esc(rule.title)}'s block to paste"
            )
            + "</a></p>"
        )
    if data.get("best"):
        lines.append(f"<p>best objective {data['best']['value']:.4f} (trial #{data['best']['number']})</p>")
    lines.append(f"<p>generated {esc(report.generated)} by python -m search.report</p>")
    lines.append("</header><main>")
    lines.append(
        "<nav>"
        + "".join(f'<a href="#{s.key}">{i}. {esc(s.title)}</a>' for i, s in enumerate(report.sections, 1))
        + "</nav>"
    )
    plotly_js_done = False
    for i, s in enumerate(report.sections, 1):
        lines.append(f'<section id="{s.key}"><h2>{i}. {esc(s.title)}</h2>')
        if s.intro:
            lines.append(f'<p class="intro">{esc(s.intro)}</p>')
        if s.message:
            lines.append(f'<div class="message" role="note">{esc(s.message)}</div>')
        if s.figure is not None:
            lines.append(
                pio.to_html(
                    s.figure,
                    full_html=False,
                    include_plotlyjs=not plotly_js_done,
                    div_id=f"figure-{s.key}",
                    config={"displaylogo": False, "responsive": True},
                )
            )
            plotly_js_done = True
        if s.body:
            lines.append(s.body)
        lines.append("</section>")
    lines.append("</main>")
    lines.append(
        "<footer>Numbers: search.results (safe ranges, recommendation); plots: optuna.visualization and"
        " search.publishing._figures. The same numbers as JSON: python -m search.report --format"
        " json.</footer>"
    )
    lines.append("</body></html>")
    return "\n".join(lines) + "\n"


def _length(settings: dict) -> str:
    """How long each trial trained: its steps when the study counts steps (``--steps``, or a loader task's
    own), else its epochs."""
    start = ""
    if settings.get("checkpoint"):  # Steps counted as the user's run counts them.
        start = f" from step {settings.get('first_step', 0)} of checkpoint {settings['checkpoint']}"
    if settings.get("steps_per_trial"):
        return f"{settings['steps_per_trial']} steps a trial{start}"
    return (f"{settings['epochs']} epochs" if settings["epochs"] else "the task's own steps a trial") + start
