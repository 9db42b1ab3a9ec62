"""The page of a training diagnosis (``search.diagnose --html``): one self-contained HTML file, no script.

From the top: the verdict and what to do; the scale trace of the fp16 run with each skipped step marked, over
the three runs' loss curves; each parameter's gradient magnitudes (the fp32 control's, unscaled) on one octave
axis against the window fp16 can hold at the scale the fp16 run started with; the skipped steps and what
overflowed; the forward pass's largest activations against 65504. The pictures are inline SVG drawn here (a
few kB), so the page opens anywhere, offline.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from search.diagnosis import FP16_MAX, FP16_SMALLEST, TrainingDiagnosis, format_training, scale_text
from search.diagnosis._evidence import LOWEST_OCTAVE
from search.scalers import RULES

_W, _LEFT, _RIGHT = 760, 80, 20
_COLOURS = {"fp16": "#1f77b4", "fp32": "#2ca02c", "bf16": "#9467bd"}
_STYLE = """
body { font-family: sans-serif; max-width: 800px; margin: 1.5em auto; color: #222; }
.verdict { border-left: 6px solid #888; padding: 0.4em 1em; background: #f6f6f6; }
.verdict.healthy { border-color: #2ca02c; } .verdict.bad { border-color: #d62728; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 2px 8px; border-bottom: 1px solid #ddd; }
td.n { text-align: right; font-variant-numeric: tabular-nums; } pre { font-size: 12px; overflow-x: auto; }
"""


def diagnosis_page(diagnosis: TrainingDiagnosis) -> str:
    """The HTML page of ``diagnosis`` (module docstring)."""
    verdict, fp16 = diagnosis.verdict, diagnosis.runs.fp16
    e = html.escape
    kind = "healthy" if verdict.verdict == "healthy" else "bad"
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        (
            f"<title>Diagnosis of {e(diagnosis.task)}:"
            f" {e(verdict.verdict)}</title><style>{_STYLE}</style></head><body>"
        ),
        f"<h1>Diagnosis of {e(diagnosis.task)}</h1>",
        (
            f"<div class='verdict {kind}'><h2>{e(verdict.verdict)}</h2><p>{e(verdict.reason)}.</p>"
            f"<p><b>{e(verdict.advice[:1].upper() + verdict.advice[1:])}.</b></p>{_growth(diagnosis)}</div>"
        ),
        "<h2>Scale and loss</h2>",
        (
            f"<p>The fp16 run's scale at each step's backward (log2), {fp16.skipped_steps} skipped steps"
            " marked in red; below, each run's training loss.</p>"
        ),
        _curves_svg(diagnosis),
        "<h2>Gradients against fp16's range</h2>",
        (
            "<p>Each parameter's gradient magnitudes in the fp32 control, unscaled, over the run (grey: how"
            " many entries per octave, counted at about 32 steps spread over it; black tick: over the first"
            " steps, the magnitude below which its entries carry a tenth of its squared norm, what the"
            " needed scale keeps at 2^-24; red tick: the largest). The green band is what fp16 holds at the"
            f" scale the fp16 run started with ({e(scale_text(fp16.scales[0]) if fp16.scales else '?')}):"
            " from 2^-24 (below: rounded to 0 or to one bit) to 65504 (above: inf). A gradient left of the"
            " band underflows, right of it overflows; one marked (noise) carries under 2^-48 of the model's"
            " squared gradient norm, zero or rounding noise (as softmax makes the attention key bias's), and"
            " is left out of the needed scale.</p>"
        ),
        _gradients_svg(diagnosis),
        "<h2>Skipped steps</h2>",
        _skips_table(diagnosis),
        "<h2>Forward activations</h2>",
        _forward_table(diagnosis),
        "<h2>The command's output</h2>",
        f"<pre>{e(chr(10).join(format_training(diagnosis)))}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _growth(diagnosis: TrainingDiagnosis) -> str:
    growth = diagnosis.verdict.growth_sentence(
        diagnosis.runs.fp32.steps, RULES[diagnosis.scaler].window_knob
    )
    return f"<p>Growth: {html.escape(growth)}.</p>" if growth else ""


def _curves_svg(diagnosis: TrainingDiagnosis) -> str:
    fp16 = diagnosis.runs.fp16
    panel, gap, top = 160, 50, 20
    height = top + 2 * panel + gap + 40
    steps = max((r.steps for r in diagnosis.runs.all()), default=1)
    out = [_svg_head(height)]
    scales = [math.log2(s) for s in fp16.scales if s > 0 and math.isfinite(s)]
    out += _frame(
        top,
        panel,
        "fp16 scale (log2)",
        scales,
        lambda v: f"2^{v:g}" if float(v).is_integer() else f"2^{v:.1f}",
    )
    if scales:
        lo, hi = _span(scales)
        points = [
            (_x(i, steps), _y(math.log2(s), lo, hi, top, panel)) for i, s in enumerate(fp16.scales) if s > 0
        ]
        out.append(_line(points, _COLOURS["fp16"]))
        for i, skipped in enumerate(fp16.skipped):
            if skipped:
                out.append(
                    f'<line x1="{_x(i, steps):.1f}" y1="{top}" x2="{_x(i, steps):.1f}" y2="{top + panel}" '
                    'stroke="#d62728" stroke-opacity="0.35"/>'
                )
    losses = [v for r in diagnosis.runs.all() for v in r.losses if math.isfinite(v) and v > 0]
    logs = [math.log10(v) for v in losses]
    y2 = top + panel + gap
    out += _frame(y2, panel, "training loss per step (log10)", logs, lambda v: f"{10 ** v:.3g}")
    if logs:
        lo, hi = _span(logs)
        for k, run in enumerate(diagnosis.runs.all()):
            pts = [
                (_x(i, steps), _y(math.log10(v), lo, hi, y2, panel))
                for i, v in enumerate(run.losses)
                if math.isfinite(v) and v > 0
            ]
            out.append(_line(pts, _COLOURS[run.label]))
            label = run.label if len(pts) > 1 else f"{run.label}: no finite loss"
            out.append(
                f'<text x="{_W - _RIGHT - 4}" y="{y2 + 14 + 14 * k}" font-size="12" text-anchor="end" '
                f'fill="{_COLOURS[run.label]}">{label}</text>'
            )
    bottom = y2 + panel
    out.append(f'<text x="{_LEFT}" y="{bottom + 16}" font-size="11">step 0</text>')
    out.append(
        f'<text x="{_W - _RIGHT}" y="{bottom + 16}" font-size="11" text-anchor="end">{steps - 1}</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _gradients_svg(diagnosis: TrainingDiagnosis) -> str:
    fp32, fp16 = diagnosis.runs.fp32, diagnosis.runs.fp16
    params = fp32.parameters
    row, top = 22, 30
    height = top + row * max(1, len(params)) + 40
    values = [p.largest for p in params if math.isfinite(p.largest) and p.largest > 0]
    values += [p.first_floor for p in params if math.isfinite(p.first_floor) and p.first_floor > 0]
    counted = {p.name for p in fp32.counted()}
    start = fp16.scales[0] if fp16.scales else 1.0
    band = (math.log2(FP16_SMALLEST / start), math.log2(FP16_MAX / start))
    ends = [math.log2(v) for v in values] + list(band)
    lo, hi = math.floor(min(ends)) - 1, math.ceil(max(ends)) + 1
    left = 230

    def x(octave: float) -> float:
        return left + (_W - left - _RIGHT) * (octave - lo) / (hi - lo)

    out = [_svg_head(height)]
    out.append(
        f'<rect x="{x(band[0]):.1f}" y="{top - 6}" width="{x(band[1]) - x(band[0]):.1f}" '
        f'height="{row * len(params) + 6}" fill="#2ca02c" fill-opacity="0.12"/>'
    )
    for k, p in enumerate(params):
        y = top + row * k
        out.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12"'
            f' text-anchor="end">{html.escape(_cut(p.name) + ("" if p.name in counted else " (noise)"))}'
            "</text>"
        )
        peak = max(p.histogram) if p.histogram and max(p.histogram) else 1
        for i, count in enumerate(p.histogram):
            octave = LOWEST_OCTAVE + i
            if count and lo <= octave < hi:
                opacity = 0.15 + 0.85 * count / peak
                out.append(
                    f'<rect x="{x(octave):.1f}" y="{y + 3}" width="{x(octave + 1) - x(octave):.1f}"'
                    f' height="14" fill="#555" fill-opacity="{opacity:.2f}"/>'
                )
        for value, colour in ((p.first_floor, "#000"), (p.largest, "#d62728")):
            if math.isfinite(value) and value > 0:
                out.append(
                    f'<line x1="{x(math.log2(value)):.1f}" y1="{y}" x2="{x(math.log2(value)):.1f}"'
                    f' y2="{y + 20}" stroke="{colour}" stroke-width="2"/>'
                )
    axis = top + row * len(params) + 6
    step = max(1, round((hi - lo) / 10))
    for octave in range(lo, hi + 1, step):
        out.append(
            f'<text x="{x(octave):.1f}" y="{axis + 16}" font-size="11" text-anchor="middle">2^{octave}</text>'
        )
    out.append(
        f'<text x="{(left + _W) / 2:.0f}" y="{axis + 32}" font-size="11" text-anchor="middle">'
        "gradient magnitude, unscaled</text></svg>"
    )
    return "\n".join(out)


def _skips_table(diagnosis: TrainingDiagnosis) -> str:
    causes = diagnosis.skip_causes()
    if not causes:
        return "<p>None: every step of the fp16 run was taken.</p>"
    rows = []
    for cause in causes:
        what = (
            f"forward overflow in layer {cause.forward_layer}"
            if cause.forward_layer
            else ", ".join(cause.parameters) or "no parameter shows it"
        )
        rows.append(
            f"<tr><td class='n'>{cause.step}</td><td class='n'>{html.escape(scale_text(cause.scale))}</td>"
            f"<td>{html.escape(what)}</td></tr>"
        )
    return "<table><tr><th>step</th><th>scale</th><th>inf/NaN in</th></tr>" + "".join(rows) + "</table>"


def _forward_table(diagnosis: TrainingDiagnosis) -> str:
    runs = {run.label: run for run in diagnosis.runs.all()}
    fp32, fp16 = runs["fp32"], runs["fp16"]
    fp16_layers = {layer.name: layer for layer in fp16.layers}
    rows = []
    for layer in fp32.layers:
        mine = fp16_layers.get(layer.name)
        share = layer.largest / FP16_MAX if math.isfinite(layer.largest) else math.nan
        rows.append(
            f"<tr><td>{html.escape(layer.name)}</td><td class='n'>{_num(layer.largest)}</td><td"
            f" class='n'>{share:.2%}</td><td class='n'>{_num(mine.largest) if mine else '-'}</td><td"
            f" class='n'>{len(mine.nonfinite_steps) if mine else '-'}</td></tr>"
        )
    return (
        "<table><tr><th>layer</th><th>largest |output|, fp32</th><th>of 65504</th><th>largest, fp16 (steps"
        " all finite)</th><th>steps with inf/NaN, fp16</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _svg_head(height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" '
        'font-family="sans-serif">'
    )


def _frame(top: float, panel: float, title: str, values: Sequence[float], label) -> list[str]:  # noqa: ANN001
    out = [
        f'<text x="{_LEFT}" y="{top - 6}" font-size="12">{html.escape(title)}</text>',
        (
            f'<rect x="{_LEFT}" y="{top}" width="{_W - _LEFT - _RIGHT}" height="{panel}" fill="none"'
            ' stroke="#999"/>'
        ),
    ]
    if not values:
        out.append(f'<text x="{_LEFT + 8}" y="{top + panel / 2}" font-size="12">no finite values</text>')
        return out
    lo, hi = _span(values)
    out.append(f'<text x="{_LEFT - 4}" y="{top + 10}" font-size="11" text-anchor="end">{label(hi)}</text>')
    out.append(f'<text x="{_LEFT - 4}" y="{top + panel}" font-size="11" text-anchor="end">{label(lo)}</text>')
    return out


def _span(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return (lo - 1, hi + 1) if hi - lo < 1e-12 else (lo, hi)


def _x(step: int, steps: int) -> float:
    return _LEFT + (_W - _LEFT - _RIGHT) * step / max(1, steps - 1)


def _y(value: float, lo: float, hi: float, top: float, panel: float) -> float:
    return top + panel - panel * (value - lo) / (hi - lo)


def _line(points: Sequence[tuple[float, float]], colour: str) -> str:
    if len(points) < 2:
        return ""
    return (
        f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"'
        f' points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in points)}"/>'
    )


def _num(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "-"


def _cut(name: str) -> str:
    return name if len(name) <= 30 else "..." + name[-27:]
