"""The trial record: what a trial of ``search.optimize`` stores, and how every module reads it back.

One trial is one training run. Optuna stores its params (the four GradScaler settings, in the
study's space), its value (the objective) and its state; this module owns everything else the
service writes into a trial, so that no other module spells a key:

* user attrs written by :func:`search.training._objective.run_trial` for every run (:data:`RUN_ATTRS`): the
  losses and evaluation (``final_loss``, ``eval_loss``, ...), ``skipped_steps`` and which steps they were
  (``overflow_steps``), ``nonfinite``, ``failure``, the curves, the zero-gradient fractions, ``device``,
  ``versions``, ``train_seconds``;
* ``baseline`` (:data:`BASELINE`): ``seed-1`` ... ``seed-5`` on the original example's five
  configurations (docs/fairness.md), enqueued once per study; ``seed-1`` (:data:`DEFAULT_BASELINE`) is
  PyTorch's default GradScaler; ``diagnosis`` (:data:`DIAGNOSIS_BASELINE`) on the setting the diagnosis a
  search started from suggests (its ``suggested_setting``), enqueued once after them; ``as-run``
  (:data:`AS_RUN_BASELINE`) in a study from a checkpoint that saved GradScaler's state: the run as it was,
  its scaler continued from that state (scale and count of clean steps), beside the default started afresh;
* ``lr_curve`` (:data:`LR_CURVE`): the learning rate each step used, written only by a run whose rate
  changes (a task with a schedule); ``first_step`` (:data:`FIRST_STEP`): the user's run's global step of
  the run's first step, written only by a run from a checkpoint (``--checkpoint``);
* under a rule with a minimum scale (a framework's, ``--scaler``), also ``ended_by_rule``,
  ``steps_at_minimum`` and ``overflows_at_minimum`` (:data:`RULE_ATTRS`);
* ``population`` (:data:`POPULATION`): written only by a member of a population
  (``--population K``, :func:`search.training._objective.run_population`): how many trials trained together
  with it (their ``train_seconds`` is the population's wall time divided by that); absent on an
  ordinary trial, so that ``--population 1`` stores what it always stored;
* ``rounding_of`` (:data:`ROUNDING_OF`): on a trial enqueued to measure the answer's line rounded
  (:mod:`search.results._answer_rounding`), the trial whose line it rounds and its params;
* ``worker`` (the process that ran it) and, on FAIL, ``fail_reason`` (and ``fail_traceback`` when the
  training raised);
* confirmation runs (``search.confirm``, in the sibling study) add ``config``, ``source_trial``,
  ``data_seed`` and, for corner runs, ``check`` = ``"corner"`` and ``point``;
* two study user attrs about diagnoses: ``diagnosis`` (:data:`STUDY_DIAGNOSIS`), what a search took from the
  diagnosis it started from, set once when the study is created; ``recorded_diagnosis``
  (:data:`RECORDED_DIAGNOSIS`), the last diagnosis ``search.diagnose --storage`` recorded in the study.

A study counts COMPLETE and PRUNED trials as finished (:data:`FINISHED`); FAIL trials are
replaced. The names and values here are stored in users' studies: changing one breaks resume.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial, TrialState, create_trial

from search.scalers import GRADSCALER, RULES

# -- keys ----------------------------------------------------------------------------------------
BASELINE = "baseline"
WORKER = "worker"
ROUNDING_OF = "rounding_of"
FAIL_REASON = "fail_reason"
FAIL_TRACEBACK = (  # On a FAIL trial whose training raised: the traceback, its last 4000 characters.
    "fail_traceback"
)
FINAL_LOSS = "final_loss"
EVAL_LOSS = "eval_loss"
EVAL_MEDIAN = "eval_median"
SKIPPED_STEPS = "skipped_steps"
NONFINITE = "nonfinite"
FAILURE = "failure"
LEARNED = "learned"
LOSS_CURVE = "loss_curve"
SCALE_CURVE = "scale_curve"
LR_CURVE = "lr_curve"  # only where the rate changes over the run
FIRST_STEP = "first_step"  # only on a run from a checkpoint
DEVICE = "device"
TRAIN_SECONDS = "train_seconds"
POPULATION = "population"  # size of the population a trial trained in; population mode only
OVERFLOW_STEPS = (  # the steps (from 0) that overflowed and were skipped, as measured (found_inf)
    "overflow_steps"
)
# Written only by a trial under a rule with a minimum scale (--scaler deepspeed|megatron|fairseq), beside
# RUN_ATTRS:
ENDED_BY_RULE = "ended_by_rule"  # why the framework would have ended the run, or ""
STEPS_AT_MINIMUM = "steps_at_minimum"  # steps taken with the scale at the rule's minimum
OVERFLOWS_AT_MINIMUM = "overflows_at_minimum"  # how many of those overflowed
# Confirmation runs (the sibling study of search.confirm).
CONFIG = "config"
SOURCE_TRIAL = "source_trial"
DATA_SEED = "data_seed"
CHECK = "check"
POINT = "point"
CORNER = "corner"  # the value of CHECK on a corner run of the ranges safe together

RUN_ATTRS = (
    FINAL_LOSS,
    "final_loss_fp32",
    EVAL_LOSS,
    "initial_eval_loss",
    EVAL_MEDIAN,
    "initial_eval_median",
    "evaluation",
    SKIPPED_STEPS,
    NONFINITE,
    FAILURE,
    "final_scale",
    LOSS_CURVE,
    SCALE_CURVE,
    LEARNED,
    "zero_grad_fraction",
    "fp32_zero_fraction",
    DEVICE,
    "versions",
    TRAIN_SECONDS,
    OVERFLOW_STEPS,
)

RULE_ATTRS = (ENDED_BY_RULE, STEPS_AT_MINIMUM, OVERFLOWS_AT_MINIMUM)

# -- values --------------------------------------------------------------------------------------
# The failure codes of a run that stayed finite but did not learn as it should (search.training._penalty).
SILENT_FAILURES = ("overflow_churn", "underflow", "frozen")
# The failure codes only a framework's rule gives (--scaler, search.training._penalty): the run ended at
# the minimum scale (DeepSpeed's ZeRO, fairseq), or sat there skipping (Megatron).
RULE_FAILURES = ("ended_at_minimum", "pinned_at_minimum")
# search.confirm's sibling study: part of its study, not one to pick.
CONFIRM_SUFFIX = ".confirm"
STUDY_DIAGNOSIS = "diagnosis"  # study user attr: the diagnosis a search started from (--from-diagnosis)
# study user attr: the last diagnosis search.diagnose --storage recorded in the study (its --json less the
# runs)
RECORDED_DIAGNOSIS = "recorded_diagnosis"
DEFAULT_BASELINE = (
    GRADSCALER.default_tag
)  # PyTorch's default GradScaler settings (seed-1), its first baseline
# The setting a diagnosis suggests, trained first by a search started from it (--from-diagnosis).
DIAGNOSIS_BASELINE = "diagnosis"
AS_RUN_BASELINE = "as-run"  # a checkpoint's own scaler, continued
DEFAULT_TAGS = tuple(rule.default_tag for rule in RULES.values())  # Each rule's default baseline
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)  # what counts toward --trials


# -- reading a trial back --------------------------------------------------------------------------
def baseline_of(trial: FrozenTrial) -> str | None:
    """The baseline a trial re-measures (``seed-1`` ...), or None for a sampled trial."""
    tag = trial.user_attrs.get(BASELINE)
    return None if tag is None else str(tag)


def default_trial(trials: Iterable[FrozenTrial]) -> FrozenTrial | None:
    """The first trial of the default settings among ``trials``: PyTorch's (baseline ``seed-1``), or in a
    study of a framework's rule that framework's (``deepspeed-default``)."""
    return next((t for t in trials if baseline_of(t) in DEFAULT_TAGS), None)


def unfinished_baselines(trials: Iterable[FrozenTrial], tags: Iterable[str]) -> list[str]:
    """The baselines among ``tags`` with no finished (COMPLETE or PRUNED) trial yet, in order."""
    finished = {baseline_of(t) for t in trials if t.state in FINISHED}
    return [tag for tag in tags if tag not in finished]


def scale_moves(
    scale_curve: Sequence[float | None], init_scale: float, overflow_steps: Iterable[int] | None = None
) -> list[int]:
    """Per optimizer step, how the step moved the stored scale: -1 it was skipped (an overflow), +1 the scale
    grew, 0 neither.

    ``overflow_steps`` are the skipped steps as the trainer measured them (``found_inf``; a trial stores them
    as :data:`OVERFLOW_STEPS`): with them, a step is -1 exactly when it was skipped, under every rule (an
    overflow that a framework's hysteresis absorbs leaves the scale where it was). Without them (a study that
    stored none), a step is -1 when the scale dropped or is missing, which under GradScaler is the same. The
    scale is float32, so the first step is compared with ``init_scale`` rounded to float32 (a float64
    init_scale that rounds down would otherwise look like a backoff).
    """
    skipped = None if overflow_steps is None else set(overflow_steps)
    moves = []
    before: float | None = float(np.float32(init_scale))
    for step, after in enumerate(scale_curve):
        if skipped is not None and step in skipped:
            moves.append(-1)
        elif after is None or before is None or after < before:
            moves.append(0 if skipped is not None else -1)
        else:
            moves.append(1 if after > before else 0)
        before = after
    return moves


def skipped_of(trial: FrozenTrial, init_scale: float) -> list[int]:
    """The steps (from 0) a trial skipped: as recorded (:data:`OVERFLOW_STEPS`), else read from its scale
    curve."""
    if OVERFLOW_STEPS in trial.user_attrs:
        return list(trial.user_attrs[OVERFLOW_STEPS])
    curve = trial.user_attrs.get(SCALE_CURVE) or []
    return [step for step, move in enumerate(scale_moves(curve, init_scale)) if move < 0]


def failure_of(trial: FrozenTrial) -> str:
    """The run's failure code, ``nonfinite`` first (see :mod:`search.training._penalty`)."""
    if trial.user_attrs.get(NONFINITE):
        return "nonfinite"
    return str(trial.user_attrs.get(FAILURE, "none"))


def device_kind(trial: FrozenTrial, default: str = "unknown") -> str:
    """``cpu`` or ``cuda`` from the stored device label (``cuda:0 (NVIDIA H200)``), else ``default``."""
    label = trial.user_attrs.get(DEVICE)
    kind = str(label).split(":")[0].split(" ")[0] if label else ""
    return kind or default


@dataclass(frozen=True)
class Showcase:
    """The trials whose curves the dashboard and the report show side by side."""

    best: FrozenTrial | None
    default: FrozenTrial | None
    worst_finite: FrozenTrial | None


def showcase(trials: Iterable[FrozenTrial]) -> Showcase:
    """The best COMPLETE trial, PyTorch's default and the worst one that stayed finite.

    ``best`` and ``worst_finite`` break ties by the lower trial number. A trial stayed finite when
    it is not ``nonfinite`` and every point of its loss curve is a number.
    """
    complete = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    finite = [
        t
        for t in complete
        if not t.user_attrs.get(NONFINITE) and all(v is not None for v in t.user_attrs.get(LOSS_CURVE) or [])
    ]
    return Showcase(
        best=min(complete, key=lambda t: (t.value, t.number)) if complete else None,
        default=default_trial(complete),
        worst_finite=max(finite, key=lambda t: (t.value, -t.number)) if finite else None,
    )


def waiting_baseline(tag: str, params: dict[str, Any]) -> FrozenTrial:
    """A baseline as ``study.enqueue_trial`` would store it: WAITING, with fixed params."""
    return create_trial(
        state=TrialState.WAITING, system_attrs={"fixed_params": params}, user_attrs={BASELINE: tag}
    )


def waiting_rounding(tag: str, params: dict[str, Any]) -> FrozenTrial:
    """A rounding of the answer's line, WAITING with fixed params, as :func:`waiting_baseline`.

    ``tag`` (``rounding_of``) names the trial whose line it rounds, then its params: ``#20
    growth_interval=14, init_scale=0.03125``; one per rounding, so that it is enqueued once.
    """
    return create_trial(
        state=TrialState.WAITING, system_attrs={"fixed_params": params}, user_attrs={ROUNDING_OF: tag}
    )
