"""The three runs of a training diagnosis: the user's settings in fp16, an fp32 control, a bf16 control; and
the whole diagnosis, whose suggestion is trained before it is given (:func:`diagnose_training`).

Each is :func:`search.training.train`, the loop every trial runs; the fp16 run and the fp32 control are
watched by a :class:`~search.diagnosis._observer.RunObserver` (the bf16 control's outcome is all the verdict
reads). The fp16 run goes first, so that the fp32 control can count which of its true gradients at step 0
would round to 0 in fp16 at the scale the fp16 run started with. The controls train at scale 1 with no growth:
fp32 needs no scaling, bf16 has fp32's range.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from search.core import PenaltyConfig
from search.diagnosis._evidence import DiagnosisRuns, LayerForward, ParameterGradients, RunEvidence
from search.diagnosis._observer import RunObserver
from search.diagnosis._suggestion_check import checked_suggestion, suggestion_of
from search.diagnosis._training_verdict import TrainingVerdict, judge
from search.scalers import RuleSetting, ScalerConfig
from search.tasks import LoaderProblem, Problem
from search.training import TrainResult, assess, skips_over, train

HISTOGRAM_STEPS = 32  # The gradient histograms count about this many steps, spread over the run.
# The controls' GradScaler: scale 1 and no growth in any run's length, i.e. no scaling at all.
UNSCALED = ScalerConfig(1.0, 2.0, 0.5, 2**30)


def bf16_supported(device: torch.device) -> bool:
    """Whether autocast can run bf16 on ``device`` (every CPU; a GPU from Ampere on)."""
    return device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_bf16_supported())


def diagnosis_runs(
    problem: Problem | LoaderProblem,
    setting: ScalerConfig | RuleSetting,
    *,
    epochs: int = 0,
    steps: int | None = None,
    penalty: PenaltyConfig = PenaltyConfig(),
    controls: Sequence[str] = ("fp32", "bf16"),
    continue_scaler: bool = False,
) -> DiagnosisRuns:
    """Trains ``setting`` in fp16 and the controls (module docstring).

    Example:
        ::

            from search.core import PYTORCH_DEFAULT as default
            from search.diagnosis import diagnosis_runs, judge
            from search.tasks.deep_mlp import build

            runs = diagnosis_runs(build(42), default)
            print(judge(runs.fp16, runs.fp32, runs.bf16, default).verdict)  # underflow

    Args:
        problem: The task's problem, on its device.
        setting: The user's GradScaler settings, or a framework's (``--scaler``).
        epochs: As :func:`search.training.train`.
        steps: As :func:`search.training.train`.
        penalty: The thresholds a trial is judged by (its failure code is part of the evidence).
        controls: ``fp32`` (always trained) and ``bf16`` (trained where the device supports it).
        continue_scaler: The fp16 run continues the scaler the problem's checkpoint saved (``setting`` is
            then its own, :func:`checkpoint_setting`).
    """
    device = next(problem.model.parameters()).device
    if isinstance(problem, Problem) and not epochs and not steps:
        epochs = problem.epochs  # The task's own default, as a trial's.
    fp16_observer = RunObserver()
    fp16, fp16_seconds = _timed(
        lambda: train(
            problem,
            setting,
            epochs=epochs,
            steps=steps,
            observer=fp16_observer,
            fp32_reference=False,
            continue_scaler=continue_scaler,
        )
    )
    scales = [reading.scale for reading in fp16_observer.readings]
    planned = fp16.planned_steps
    reference = scales + [scales[-1] if scales else 1.0] * (
        planned - len(scales)
    )  # A rule may end the run early.
    fp32_observer = RunObserver(
        reference_scales=reference,
        median_steps=start_steps(planned),
        histogram_every=max(1, planned // HISTOGRAM_STEPS),
    )
    fp32, fp32_seconds = _timed(
        lambda: train(problem, UNSCALED, epochs=epochs, steps=steps, amp_dtype=None, observer=fp32_observer)
    )
    fp32_zeros = fp32.zero_grad_fraction
    min_scale = fp16.min_scale  # The rule's floor, or None where it has none (GradScaler).
    runs = {
        "fp16": _evidence("fp16", fp16, fp16_observer, fp32_zeros, penalty, fp16_seconds, min_scale),
        "fp32": _evidence("fp32", fp32, fp32_observer, fp32_zeros, penalty, fp32_seconds, None),
    }
    if "bf16" in controls and bf16_supported(device):  # Its outcome is what the verdict reads: not watched.
        bf16, bf16_seconds = _timed(
            lambda: train(
                problem, UNSCALED, epochs=epochs, steps=steps, amp_dtype=torch.bfloat16, fp32_reference=False
            )
        )
        runs["bf16"] = _evidence("bf16", bf16, None, fp32_zeros, penalty, bf16_seconds, None)
    return DiagnosisRuns(runs["fp16"], runs["fp32"], runs.get("bf16"))


def diagnose_training(
    problem: Problem | LoaderProblem,
    setting: ScalerConfig | RuleSetting,
    *,
    epochs: int = 0,
    steps: int | None = None,
    penalty: PenaltyConfig = PenaltyConfig(),
    continue_scaler: bool = False,
) -> tuple[DiagnosisRuns, TrainingVerdict]:
    """A whole training diagnosis of ``setting``: its runs and their verdict, whose suggestion (if any) was
    trained before it is given (:mod:`search.diagnosis._suggestion_check`); ``continue_scaler``: as
    :func:`diagnosis_runs` (the suggestion is a restart: its scaler starts afresh)."""
    runs = diagnosis_runs(
        problem, setting, epochs=epochs, steps=steps, penalty=penalty, continue_scaler=continue_scaler
    )
    verdict = judge(runs.fp16, runs.fp32, runs.bf16, setting, penalty)
    suggested = suggestion_of(verdict, setting)
    if suggested is None:
        return runs, verdict
    trained = suggestion_run(
        problem, suggested, runs.fp32.zero_share, epochs=epochs, steps=steps, penalty=penalty
    )
    return runs, checked_suggestion(verdict, setting, trained, runs.fp16, penalty)


def checkpoint_setting(
    problem: Problem | LoaderProblem, setting: ScalerConfig | RuleSetting, chosen: bool
) -> tuple[ScalerConfig | RuleSetting, bool]:
    """The setting a diagnosis trains, and whether it continues the checkpoint's scaler: from a checkpoint
    that saved GradScaler's state, with no setting ``chosen`` by the user, the run as it was (its scaler goes
    on from that state); else ``setting``, its scaler started afresh (a restart)."""
    saved = None if problem.start is None else problem.start.scaler_setting()
    if chosen or saved is None or setting.rule != saved.rule:
        return setting, False
    return saved, True


def diagnosis_run_length(
    problem: Problem | LoaderProblem,
    setting: ScalerConfig | RuleSetting,
    verdict: TrainingVerdict,
    run_steps: int,
    source: str = "--run-steps",
    continue_scaler: bool = False,
) -> dict[str, Any]:
    """The user's run length (``search.diagnose --run-steps N``), measured: the diagnosed setting and the
    suggestion the verdict gives (if any) each train ``run_steps`` steps in fp16 as a trial does; their
    skipped steps and evaluation (``{"steps", "diagnosed", "suggested"}``, ``suggested`` absent without a
    suggestion). A diagnosis of tens of steps shows neither a steady skip rate nor a scale that reaches its
    overflow edge late (:mod:`search.study._run_length`)."""
    runs = {"diagnosed": setting}
    kept = verdict.suggestion_check is not None and verdict.suggestion_check["kept"]
    suggested = suggestion_of(verdict, setting) if kept else None
    if suggested is not None:
        runs["suggested"] = suggested
    continued = ("diagnosed",) if continue_scaler else ()  # The run as it was; a suggestion is a restart.
    return {"steps": run_steps, "source": source, **skips_over(problem, runs, run_steps, continued)}


def suggestion_run(
    problem: Problem | LoaderProblem,
    suggested: ScalerConfig | RuleSetting,
    fp32_zeros: float,
    *,
    epochs: int = 0,
    steps: int | None = None,
    penalty: PenaltyConfig = PenaltyConfig(),
) -> RunEvidence:
    """The suggested setting trained in fp16 as the diagnosed one was
    (:mod:`search.diagnosis._suggestion_check` judges it); its outcome and curves only. ``fp32_zeros``: the
    fp32 control's zero share, against which its ``underflow`` code is judged as a trial's."""
    if isinstance(problem, Problem) and not epochs and not steps:
        epochs = problem.epochs
    result, seconds = _timed(
        lambda: train(problem, suggested, epochs=epochs, steps=steps, fp32_reference=False)
    )
    return _evidence("fp16", result, None, fp32_zeros, penalty, seconds, result.min_scale)


def start_steps(steps: int) -> int:
    """The first steps whose gradients ``init_scale`` alone must keep representable: the first tenth of the
    run, at least one (later a dynamic scaler has had the chance to move the scale)."""
    return max(1, steps // 10)


def _timed(run):  # noqa: ANN001, ANN202
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def _evidence(
    label: str,
    result: TrainResult,
    observer: RunObserver | None,
    fp32_zeros: float,
    penalty: PenaltyConfig,
    seconds: float,
    min_scale: float | None,
) -> RunEvidence:
    result = dataclasses.replace(result, fp32_zero_fraction=fp32_zeros)
    judged = assess(result, penalty)
    if observer is None:  # An unwatched control: its outcome and curves only.
        observer = RunObserver()
        scales = (1.0,) * len(result.loss_curve)
    else:
        scales = tuple(r.scale for r in observer.readings)
    readings = observer.readings
    skipped = list(result.skipped)
    kept = [i for i, s in enumerate(skipped) if not s]
    first = start_steps(result.planned_steps)
    histograms = observer.histograms()
    norms = [sum(r.norm2[i] for r in readings[:first]) for i in range(len(observer.names))]
    total = sum(norms)
    parameters = []
    for i, (name, size) in enumerate(zip(observer.names, observer.numels)):
        zeros = [readings[s].zeros[i] for s in kept]
        # At step 0 only: from then on the fp32 control's weights are no longer the fp16 run's.
        rounds = sum(r.would_round[i] for r in readings[:1])
        nonzero = sum(size - r.zeros[i] for r in readings[:1])
        parameters.append(
            ParameterGradients(
                name=name,
                size=size,
                zero_share=sum(zeros) / (size * len(kept)) if kept and size else 0.0,
                would_round_share=(
                    (rounds / nonzero if nonzero else math.nan)
                    if observer.reference_scales is not None
                    else None
                ),
                largest=_largest(readings[s].largest[i] for s in kept),
                first_median=_smallest(r.median[i] for r in readings[:first]),
                first_floor=_smallest(r.floor[i] for r in readings[:first]),
                update_share=norms[i] / total if total > 0 else 0.0,
                overflow_steps=tuple(s for s, r in enumerate(readings) if r.nonfinite[i]),
                histogram=tuple(histograms[i]),
            )
        )
    layers = [
        LayerForward(
            name=name,
            largest=_largest(r.forward_largest[j] for r in readings),
            nonfinite_steps=tuple(s for s, r in enumerate(readings) if r.forward_nonfinite[j]),
            origin_steps=tuple(s for s, r in enumerate(readings) if r.forward_origin == name),
        )
        for j, name in enumerate(observer.layers)
    ]
    return RunEvidence(
        label=label,
        losses=tuple(result.loss_curve),
        scales=scales,
        skipped=tuple(skipped),
        eval_loss=result.eval_loss,
        initial_eval_loss=result.initial_eval_loss,
        learned=judged.learned,
        failure=judged.failure,
        zero_share=result.zero_grad_fraction,
        ended_by_rule=result.ended_by_rule,
        min_scale=min_scale,
        planned_steps=result.planned_steps,
        start_steps=first,
        parameters=tuple(parameters),
        layers=tuple(layers),
        # A skipped step's overflowing parameter has no finite largest: the others' would understate the step.
        step_largest=tuple(math.nan if skip else _largest(r.largest) for r, skip in zip(readings, skipped)),
        seconds=seconds,
        first_step=result.first_step,
    )


def _smallest(values) -> float:  # noqa: ANN001
    finite = [v for v in values if math.isfinite(v)]
    return min(finite) if finite else math.nan


def _largest(values) -> float:  # noqa: ANN001
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else math.nan
