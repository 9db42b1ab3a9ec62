"""A whole training diagnosis: what was run, the runs' evidence, the verdict, and the lines and JSON it makes.

No torch: ``search.diagnose`` builds one from :func:`~search.diagnosis.diagnosis_runs` and
:func:`~search.diagnosis.judge`, then prints :func:`format_training` and writes
:meth:`TrainingDiagnosis.to_dict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from search.diagnosis._advice import scale_text
from search.diagnosis._evidence import (
    FP16_MAX,
    FP16_ROUNDS_TO_ZERO,
    FP16_SMALLEST,
    LOST_SHARE,
    NOISE_SHARE,
    DiagnosisRuns,
    RunEvidence,
    json_ready,
)
from search.diagnosis._training_verdict import TrainingVerdict
from search.scalers import RULES

SHOWN_SKIPS = 12  # Skipped steps listed one by one; the rest are counted.


@dataclass(frozen=True)
class SkipCause:
    """Why one step of the fp16 run was skipped.

    Attributes:
        step: The step (from 0).
        scale: The scale its backward used.
        parameters: The parameters whose gradients held an inf or NaN.
        forward_layer: The layer whose forward output overflowed first at this step, or None (the backward
            did).
    """

    step: int
    scale: float
    parameters: tuple[str, ...]
    forward_layer: str | None


@dataclass(frozen=True)
class TrainingDiagnosis:
    """One ``search.diagnose`` run on a task.

    Attributes:
        task: The task's name.
        seed: Its seed.
        device: Where it trained (``cpu``, ``cuda:0 (NVIDIA H100 ...)``).
        scaler: ``torch`` (GradScaler) or a framework's rule.
        settings: The settings diagnosed, by name (GradScaler's four, or the framework's knobs).
        runs: The fp16 run and its controls.
        verdict: The conclusion.
        run_length: The user's run length measured (``--run-steps``:
            :func:`search.diagnosis.diagnosis_run_length`), or None.
        checkpoint: The checkpoint the runs continued (``StartState.where``), or "": the initial weights. Step
            numbers are then the user's run's global steps.
    """

    task: str
    seed: int
    device: str
    scaler: str
    settings: dict[str, float]
    runs: DiagnosisRuns
    verdict: TrainingVerdict
    run_length: dict[str, Any] | None = None
    checkpoint: str = ""

    def skip_causes(self) -> list[SkipCause]:
        """Each skipped step of the fp16 run, with what overflowed."""
        fp16 = self.runs.fp16
        forward = {step: layer.name for layer in reversed(fp16.layers) for step in layer.origin_steps}
        causes = []
        for step, skipped in enumerate(fp16.skipped):
            if skipped:
                names = tuple(p.name for p in fp16.parameters if step in p.overflow_steps)
                causes.append(SkipCause(fp16.first_step + step, fp16.scales[step], names, forward.get(step)))
        return causes

    def to_dict(self) -> dict[str, Any]:
        """What ``--json`` writes: the verdict's keys at the top, then what was run, the skips and the runs.
        """
        return {
            **self.verdict.to_dict(),
            "task": self.task,
            "seed": self.seed,
            "device": self.device,
            "scaler": self.scaler,
            "settings": self.settings,
            "steps": self.runs.fp16.planned_steps,
            "checkpoint": self.checkpoint or None,
            "first_step": self.runs.fp16.first_step,
            "skipped_steps": self.runs.fp16.skipped_steps,
            "skips": [
                cause.__dict__ | {"parameters": list(cause.parameters)} for cause in self.skip_causes()
            ],
            "run_length": json_ready(self.run_length),
            "runs": {run.label: run.to_dict() for run in self.runs.all()},
        }


def format_training(diagnosis: TrainingDiagnosis) -> list[str]:
    """The lines ``search.diagnose`` prints for a training diagnosis."""
    runs, verdict = diagnosis.runs, diagnosis.verdict
    fp16, fp32 = runs.fp16, runs.fp32
    shown = ", ".join(f"{k} {_value(k, v)}" for k, v in diagnosis.settings.items())
    start = ""
    if diagnosis.checkpoint:  # Every step number below is the user's run's own.
        start = f" from step {fp16.first_step} of {diagnosis.checkpoint}"
    lines = [
        f"Diagnosis of {diagnosis.task} (seed {diagnosis.seed}, {fp16.planned_steps} steps{start},"
        f" {diagnosis.device}), {_rule_title(diagnosis.scaler)}: {shown}"
    ]
    lines.append(
        "  runs: "
        + ", ".join(f"{_title(r)} {r.seconds:.1f} s" for r in runs.all())
        + ("" if runs.bf16 else "; no bf16 control (this device has no bf16)")
    )
    evals = ", ".join(f"{r.label} {r.eval_loss:.4g} ({r.failure})" for r in runs.all())
    lines.append(f"  evaluation (initial {fp16.initial_eval_loss:.4g}; failure code): {evals}")
    lines += _scale_lines(fp16)
    lines += _skip_lines(diagnosis)
    lines += _forward_lines(fp16, fp32)
    lines += _gradient_lines(fp16, fp32, verdict)
    growth = verdict.growth_sentence(fp32.steps, RULES[diagnosis.scaler].window_knob)
    if growth:
        lines.append(f"  growth: {growth}")
    lines.append(f"  verdict: {verdict.verdict}")
    lines.append(f"    ({verdict.reason})")
    lines.append(f"    {verdict.advice}")
    if diagnosis.run_length:
        lines.append(f"    {_run_length_line(diagnosis.run_length)}")
    return lines


def _run_length_line(measured: dict[str, Any]) -> str:
    steps = measured["steps"]
    runs = (
        ("these settings", "skip", "end", measured["diagnosed"]),
        ("the suggestion", "skips", "ends", measured.get("suggested")),
    )
    parts = [
        f"{label} {skip} {run['skipped']} of {steps} and {end} at {run['eval_loss']:.4g}"
        for label, skip, end, run in runs
        if run is not None
    ]
    source = measured.get("source", "--run-steps")
    return f"over a run of {steps} steps ({source}; measured: each trained {steps} steps): " + "; ".join(
        parts
    )


def _scale_lines(fp16: RunEvidence) -> list[str]:
    if not fp16.scales:
        return ["  scale: no step taken"]
    moves = sum(1 for a, b in zip(fp16.scales, fp16.scales[1:]) if a != b)
    first = fp16.first_step
    return [
        f"  scale: {scale_text(fp16.scales[0])} at step {first}, {scale_text(fp16.scales[-1])} at step"
        f" {first + fp16.steps - 1}; lowest {scale_text(min(fp16.scales))},"
        f" highest {scale_text(max(fp16.scales))}, {moves} changes"
    ]


def _skip_lines(diagnosis: TrainingDiagnosis) -> list[str]:
    fp16 = diagnosis.runs.fp16
    causes = diagnosis.skip_causes()
    lines = [f"  skipped steps: {len(causes)} of {fp16.steps}" + (":" if causes else "")]
    for cause in causes[:SHOWN_SKIPS]:
        if cause.forward_layer is not None:
            why = f"the forward pass overflowed in layer {cause.forward_layer!r}"
        elif cause.parameters:
            names = list(cause.parameters)
            why = (
                "inf/NaN gradients in "
                + ", ".join(names[:4])
                + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            )
        else:
            why = "the scaler counted an overflow no parameter's gradient shows"
        lines.append(f"    step {cause.step} (scale {scale_text(cause.scale)}): {why}")
    if len(causes) > SHOWN_SKIPS:
        lines.append(f"    ... {len(causes) - SHOWN_SKIPS} more (--json lists every one)")
    return lines


def _forward_lines(fp16: RunEvidence, fp32: RunEvidence) -> list[str]:
    finite = [layer for layer in fp32.layers if math.isfinite(layer.largest)]
    if not finite:
        return ["  forward: no layer output measured"]
    top = max(finite, key=lambda layer: layer.largest)
    share = top.largest / FP16_MAX
    line = (
        f"  forward: largest activation {top.largest:.4g} in layer {top.name!r} (fp32 control), {share:.2%}"
        " of fp16's 65504"
    )
    origins = fp16.forward_origins()
    if origins:
        line += "; in fp16 it overflowed first in " + ", ".join(
            f"{name!r} ({len(s)} steps)" for name, s in origins.items()
        )
    return [line]


def _gradient_lines(fp16: RunEvidence, fp32: RunEvidence, verdict: TrainingVerdict) -> list[str]:
    lines = [
        (
            f"  gradients (fp32 control, unscaled): needed scale {scale_text(verdict.needed_scale)} (the"
            f" largest of the parameters' needs over {_first(fp32.start_steps)}), largest safe scale"
            f" {scale_text(verdict.largest_safe_scale)} (keeps the largest under 65504)"
        ),
        (
            f"    {'parameter':<24} {'size':>9} {'largest':>9} {'safe up to':>10} {'needs':>8}"
            f" {'zero fp16':>9} {'zero fp32':>9} {'rounds to 0':>11}"
        ),
    ]
    zeros16 = {p.name: p.zero_share for p in fp16.parameters}
    counted = {p.name for p in fp32.counted()}
    for p in fp32.parameters:
        safe = FP16_MAX / p.largest if math.isfinite(p.largest) and p.largest > 0 else math.nan
        floor = p.first_floor
        needs = FP16_SMALLEST / floor if math.isfinite(floor) and floor > 0 else math.nan
        rounds = (
            "-"
            if p.would_round_share is None or math.isnan(p.would_round_share)
            else f"{p.would_round_share:.1%}"
        )
        lines.append(
            f"    {_cut(p.name, 24):<24} {p.size:>9} {_octave(p.largest):>9} {scale_text(safe):>10}"
            f" {_octave(needs) if p.name in counted else 'noise':>8} {zeros16.get(p.name, math.nan):>9.1%}"
            f" {p.zero_share:>9.1%} {rounds:>11}"
        )
    lines.append(
        "    (largest: over the run; needs: the scale that keeps the entries carrying all but"
        f" {LOST_SHARE:.0%} of its squared gradient norm at or above 2^-24 over"
        f" {_first(fp32.start_steps)}; noise: under 2^{math.log2(NOISE_SHARE):.0f} of the model's squared"
        " gradient norm there, zero or rounding noise (as softmax makes the attention key bias's), left out"
        " of the needed scale and of underflow; rounds to 0: its non-zero gradients at the first step, where"
        " both runs have the same weights, that are"
        f" 2^{math.log2(FP16_ROUNDS_TO_ZERO):.0f} or less at the fp16 run's scale)"
    )
    return lines


def _first(steps: int) -> str:
    return "the first step" if steps == 1 else f"the first {steps} steps"


def _octave(value: float) -> str:
    return scale_text(value) if math.isfinite(value) and value > 0 else "-"


def _cut(name: str, width: int) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3) :]


def _value(name: str, value: float) -> str:
    if (
        "scale" in name
        and "power" not in name
        and value > 0
        and math.log2(value).is_integer()
        and value >= 1024
    ):
        return scale_text(value)
    return f"{value:g}"


def _title(run: RunEvidence) -> str:
    return {"fp16": "fp16 (these settings)", "fp32": "fp32 control", "bf16": "bf16 control"}[run.label]


def _rule_title(scaler: str) -> str:
    return f"{RULES[scaler].title}'s rule"
